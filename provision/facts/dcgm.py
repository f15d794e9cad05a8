"""Parse NVIDIA DCGM's ``dcgmi diag -r N -j`` report and ``dcgmi -v``: the diagnostic a burn-in runs on each node.

DCGM publishes no stable schema for this JSON, and it changed between majors (read in NVIDIA/DCGM's
``dcgmi/Diag.cpp`` at v3.3.9 and v4.2.3, and in real captures):

- 3.x: the root key ``"DCGM GPU Diagnostic"``; ``version`` and ``Driver Version Detected`` beside it; tests by
  display name ("Targeted Power"), the nine deployment checks each a test; a result names its GPU as ``gpu_id``
  (a string; an integer on a deployment check; ``gpu_ids`` before 3.3); ``info`` one string; a failure's text
  in ``warnings[].warning`` (``warnings[].warnings`` on a deployment check, DCGM's own slip), a plain string
  before 3.3.
- 4.x: the root key ``"DCGM Diagnostic"``; ``metadata.version``; tests by plugin name (``targeted_power``), the
  deployment checks one ``software`` test; a result names ``entity_group``/``entity_id``; ``info`` a list; each
  test a ``test_summary`` whose status can be ``Fail`` while every GPU passed (an error tied to no GPU: a PCIe
  replay counted for the node), so it is read too.

Statuses in the JSON are ``Pass``, ``Skip`` and ``Fail`` only (a warning is printed ``Fail``; a test that did not
run is left out). Anything else is a format we do not know: refused, so the caller's verdict is unknown. A run
that could not start prints ``{"DCGM Diagnostic": {"runtime_error": ..., "version": ...}}``; lines before the
JSON (``--host`` unreachable) are skipped, as NVIDIA's own test harness skips them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from provision.facts import fact

ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x
STATUSES = ("Pass", "Skip", "Fail")

#: 3.x display names -> the 4.x plugin name both majors' checks are named by. The other 3.x names are the plugin
#: name spelt out ("Targeted Power" -> targeted_power).
PLUGIN_OF_NAME = {
    **{name: "software" for name in (
        "Denylist", "Blacklist", "NVML Library", "CUDA Main Library", "CUDA Toolkit Library",
        "Permissions and OS Blocks", "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
        "Graphics Processes", "Inforom", "Fabric Manager")},
    "GPU Memory": "memory", "EUD Test": "eud", "CPU EUD Test": "cpu_eud",
}


@dataclass(frozen=True)
class DiagMessage:
    text: str
    error_id: int | None  # DCGM_FR_* (dcgm_errors.h): 52 faulty memory, 42 thermal violation, ...
    category: int | None  # DCGM_FR_EC_*: 10 hardware memory, 13 hardware PCIe, 14 hardware power, ...
    severity: int | None  # DCGM_ERROR_*: 1 monitor, 2 isolate, 4 triage, 5 config, 6 reset


@dataclass(frozen=True)
class DiagResult:
    entity: str  # "GPU 3", "CPU 0", or "" for a deployment check that names no GPU
    gpu: int | None
    status: str
    messages: tuple[DiagMessage, ...]
    info: tuple[str, ...]


@dataclass(frozen=True)
class DiagTest:
    name: str  # as DCGM printed it: "Targeted Power" (3.x), "targeted_power" (4.x)
    plugin: str  # the name both majors map to, what the check is named by
    category: str
    summary: str | None  # 4.x test_summary.status (None in 3.x, or where DCGM wrote none)
    summary_messages: tuple[DiagMessage, ...]
    results: tuple[DiagResult, ...]
    summary_info: tuple[str, ...] = ()  # 4.x test_summary.info: what DCGM said of the test as a whole


@dataclass(frozen=True)
class DiagReport:
    version: str | None
    driver: str | None
    tests: tuple[DiagTest, ...]
    runtime_error: str | None


def parse_diag(text: str) -> DiagReport:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"no JSON in dcgmi diag's output: {text.strip()[:120]!r}")
    document = json.loads(text[start:end + 1])
    if not isinstance(document, dict):
        raise ValueError("dcgmi diag's JSON is not an object")
    root_key = next((key for key in ROOT_KEYS if key in document), None)
    if root_key is None:
        raise ValueError(f"not dcgmi diag's JSON: no {' or '.join(map(repr, ROOT_KEYS))} key in {sorted(document)}")
    body = _object(document[root_key], root_key)
    metadata = _object(document.get("metadata", {}), "metadata")
    version = metadata.get("version", document.get("version", body.get("version")))
    driver = metadata.get("Driver Version Detected", document.get("Driver Version Detected"))
    if "runtime_error" in body:
        return DiagReport(_text(version), _text(driver), (), str(body["runtime_error"]))
    tests = []
    for category in _list(body.get("test_categories"), "test_categories"):
        category = _object(category, "test_categories[]")
        for test in _list(category.get("tests", []), "tests"):
            tests.append(_test(_object(test, "tests[]"), str(category.get("category", ""))))
    return DiagReport(_text(version), _text(driver), tuple(tests), None)


def _test(test: dict[str, Any], category: str) -> DiagTest:
    name = str(test.get("name", ""))
    if not name:
        raise ValueError(f"a test without a name in category {category!r}")
    plugin = PLUGIN_OF_NAME.get(name, re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_"))
    summary = test.get("test_summary")
    summary_status: str | None = None
    summary_messages: tuple[DiagMessage, ...] = ()
    summary_info: tuple[str, ...] = ()
    if summary is not None:
        summary = _object(summary, f"{name}: test_summary")
        summary_status = _status(summary.get("status"), f"{name}: test_summary")
        summary_messages = _messages(summary.get("warnings"), None)
        summary_info = _info(summary.get("info"), f"{name}: test_summary")
    results = tuple(_result(_object(result, f"{name}: results[]"), name)
                    for result in _list(test.get("results", []), f"{name}: results") if result is not None)
    return DiagTest(name, plugin, category, summary_status, summary_messages, results, summary_info)


def _info(info: Any, where: str) -> tuple[str, ...]:
    """An ``info`` entry: one string (3.x) or a list of them (4.x)."""
    return () if info is None else (info,) if isinstance(info, str) else \
        tuple(str(line) for line in _list(info, f"{where}: info"))


def _result(result: dict[str, Any], test: str) -> DiagResult:
    gpu = None
    if "entity_group" in result:  # 4.x
        group, number = str(result["entity_group"]), int(result["entity_id"])
        entity = f"{group} {number}"
        gpu = number if group == "GPU" else None
    elif "cpu_id" in result:  # 3.x CPU EUD
        entity = f"CPU {result['cpu_id']}"
    else:
        named = result.get("gpu_id", result.get("gpu_ids"))
        gpu = None if named is None or str(named).strip() == "" else int(str(named).split(",")[0])
        entity = "" if gpu is None else f"GPU {gpu}"
    lines = _info(result.get("info"), test)
    return DiagResult(entity, gpu, _status(result.get("status"), test), _messages(result.get("warnings"), result),
                      lines)


def _messages(warnings: Any, result: dict[str, Any] | None) -> tuple[DiagMessage, ...]:
    if warnings is None:
        return ()
    if isinstance(warnings, str):  # 3.0-3.2: one string, the error id beside it from 3.2
        error_id = result.get("error_id") if result else None
        return (DiagMessage(warnings, None if error_id is None else int(error_id), None, None),) if warnings else ()
    messages = []
    for warning in _list(warnings, "warnings"):
        warning = _object(warning, "warnings[]")
        text = warning.get("warning", warning.get("warnings"))  # "warnings": 3.3's deployment checks
        if not isinstance(text, str):
            raise ValueError(f"a DCGM warning without its text: {sorted(warning)}")
        messages.append(DiagMessage(text, _number(warning.get("error_id")), _number(warning.get("error_category")),
                                    _number(warning.get("error_severity"))))
    return tuple(messages)


def _status(value: Any, where: str) -> str:
    if value not in STATUSES:
        raise ValueError(f"{where}: status {value!r} is none of DCGM's {'/'.join(STATUSES)}")
    return str(value)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, found {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, found {type(value).__name__}")
    return value


def _number(value: Any) -> int | None:
    return None if value is None else int(value)


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


@dataclass(frozen=True)
class DcgmVersion:
    client: str
    hostengine: str | None  # None: no host engine answered (dcgmi -v still exits 0)


def parse_version(text: str) -> DcgmVersion:
    """``dcgmi -v``: the client's build info, then ``Hostengine build info:`` and the engine's, when one answered
    (the command exits 0 either way, so the section is the only sign of a running engine)."""
    client, _, engine = text.partition("Hostengine build info:")
    client_version = _field(client, "Version")
    if client_version is None:
        raise ValueError(f"not dcgmi -v's output: {text.strip()[:120]!r}")
    return DcgmVersion(client_version, _field(engine, "Version") if engine else None)


def _field(block: str, name: str) -> str | None:
    found = re.search(rf"^{re.escape(name)} : (\S+)\s*$", block, re.MULTILINE)
    return found.group(1) if found else None


def diag(level: int) -> fact.Fact[DiagReport]:
    """``dcgmi diag -r LEVEL -j``: 1 the deployment checks (seconds), 2 adds PCIe and memory (~2 min), 3 the
    stress plugins (~15 min on 8 H100s), 4 memtest and the pulse test (~1 h). Root: the EUD plugins and some
    of the stress tests run only as root."""
    return fact.command(f"dcgm_diag_r{level}", ["dcgmi", "diag", "-r", str(level), "-j"], parse_diag, needs_root=True)


DIAG = {level: diag(level) for level in (1, 2, 3, 4)}
VERSION = fact.command("dcgm_version", ["dcgmi", "-v"], parse_version)
