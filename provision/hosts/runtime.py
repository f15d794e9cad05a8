"""The burn-in's runtime on the nodes (``software.runtime``): what the node_runtime role installs, and the check
that each node has it before a stage starts workers there.

The role installs a virtualenv at ``software.runtime.path`` with the pinned torch and ``fabric_tests`` as a
wheel built here, from this controller's own sources: its version is the project's plus a digest of those
sources, so a controller with changed tests reinstalls them and a node left with old ones is told apart.

The same wheel carries the node-side part of ``provision`` (:data:`NODE_MODULES`: ``node-check``, the preflight
facts and judgements it runs, the local session), so Slurm's HealthCheckProgram runs on the node from the runtime
with no controller package there. Those modules and ``fabric_tests`` import only the standard library, each other
(and torch, numpy for the tests) and hold to the runtime's oldest Python, 3.10 (Ubuntu 22.04's): the layering test
checks both.

The check is a fact like the others: a command (``python -m fabric_tests.version``), a pure parser and a
judgement, its result the check ``runtime/version`` of the stage about to run.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import fabric_tests
from fabric_tests.version import DISTRIBUTION
from provision import __version__
from provision.checks.outcome import CheckResult, Outcome
from provision.spec.model import ClusterSpec

#: What fabric_tests imports besides the standard library (pyproject's ``nodes`` extra); torch is pinned apart.
NODE_REQUIREMENTS = ("torch>=2.4", "numpy>=1.26")

#: The node-side modules of ``provision`` the wheel carries beside ``fabric_tests`` (paths under the project).
NODE_MODULES = (
    "provision/__init__.py", "provision/facts/session.py",
    "provision/node_check/__init__.py", "provision/node_check/__main__.py", "provision/node_check/on_node.py",
    "provision/checks/__init__.py", "provision/checks/outcome.py", "provision/checks/kernel_allowlist.py",
    "provision/checks/preflight.py", "provision/checks/nvlink_domain.py",
    "provision/facts/__init__.py", "provision/facts/imex.py", "provision/facts/fact.py", "provision/facts/dcgm.py",
    "provision/facts/infiniband.py", "provision/facts/kernel_log.py", "provision/facts/lspci.py",
    "provision/facts/nvidia_smi.py",
    "provision/facts/packages.py", "provision/facts/system.py",
)
#: The oldest Python the node runtime runs on (Ubuntu 22.04's python3).
NODE_PYTHON = (3, 10)
PROJECT = Path(__file__).resolve().parents[2]

#: Fixed timestamps make the wheel's bytes a function of the sources: copying it again changes nothing.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def sources() -> list[Path]:
    """Every file the wheel carries: ``fabric_tests`` and the node-side modules of ``provision``."""
    package = Path(fabric_tests.__file__).resolve().parent
    return sorted([*package.glob("*.py"), *(PROJECT / module for module in NODE_MODULES)])


def _in_wheel(path: Path) -> str:
    return path.relative_to(PROJECT).as_posix()


def wheel_version() -> str:
    """``<project version>+g<digest of the fabric_tests sources>`` (a PEP 440 local version)."""
    digest = hashlib.sha256()
    for path in sources():
        digest.update(_in_wheel(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__}+g{digest.hexdigest()[:12]}"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(directory: Path, version: str | None = None) -> Path:
    """``fabric_tests`` as a pure-Python wheel in ``directory`` (no build backend needed: a wheel is a zip with
    its metadata and a RECORD of hashes), at ``version`` when the caller has it already."""
    version = version or wheel_version()
    name = DISTRIBUTION.replace("-", "_")
    info = f"{name}-{version}.dist-info"
    files: dict[str, bytes] = {_in_wheel(path): path.read_bytes() for path in sources()}
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n"
                                 "Summary: the burn-in tests provision runs on the nodes\n"
                                 f"Requires-Python: >={NODE_PYTHON[0]}.{NODE_PYTHON[1]}\n"
                                 + "".join(f"Requires-Dist: {need}\n" for need in NODE_REQUIREMENTS)).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: provision\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{name}-{version}-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path, date_time=_EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    target.write_bytes(buffer.getvalue())
    return target


def node_python(spec: ClusterSpec) -> str:
    """The interpreter the burn-in runs on the nodes: the runtime's when the spec names one, else burnin.python."""
    runtime = spec.software.runtime if spec.software is not None else None
    return f"{runtime.path}/bin/python" if runtime is not None else spec.burnin.python


def probe_argv(python: str) -> list[str]:
    return [python, "-m", "fabric_tests.version"]


@dataclass(frozen=True)
class RuntimeFound:
    fabric_tests: str | None
    torch: str | None
    numpy: str | None = None


def parse_runtime(stdout: str) -> RuntimeFound:
    """The last JSON line the probe printed; ValueError when there is none."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            return RuntimeFound(data.get("fabric_tests"), data.get("torch"), data.get("numpy"))
    raise ValueError("no runtime description in the output")


def judge_runtime(found: RuntimeFound | None, problem: str, *, python: str, torch: str,
                  fabric_tests_version: str) -> CheckResult:
    """``runtime/version``: the node's runtime is the one this controller installs. ``problem`` is why the probe
    could not run (``found`` then None): a missing interpreter is a failure, never a pass."""
    remediation = "re-run provision apply (the node_runtime role installs it)"
    if found is None:
        return CheckResult("runtime/version", Outcome.FAILED, f"no burn-in runtime at {python}: {problem}",
                           remediation, [problem])
    wrong = []
    if found.fabric_tests != fabric_tests_version:
        wrong.append(f"fabric_tests {found.fabric_tests or 'not installed'}, this controller's is "
                     f"{fabric_tests_version}")
    if found.torch is None or found.torch.split("+")[0] != torch:
        wrong.append(f"torch {found.torch or 'not installed'}, the spec pins {torch}")
    if found.numpy is None:
        wrong.append("numpy not installed (the tests hand tensors to it)")
    if wrong:
        return CheckResult("runtime/version", Outcome.FAILED, f"{python}: " + "; ".join(wrong), remediation, wrong)
    return CheckResult("runtime/version", Outcome.OK, f"fabric_tests {found.fabric_tests}, torch {found.torch}, "
                       f"numpy {found.numpy}")
