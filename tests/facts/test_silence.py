"""Silence never reads as health: every fact, fed nothing, a cut-off output, or lines behind a prefix we do not
know, leaves no check that reads it saying ``ok``.

The healthy host is our recorded cases of a two-GPU H100 node (``tests/facts``); for each fact the checks that
read it are found by taking the fact away (they turn ``unknown``), then the fact is replaced by each degraded
output and none of those checks may pass. Facts no preflight check reads (nccl-tests, Slurm) must refuse
the degraded outputs or report them as not passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from provision.checks import preflight
from provision.checks.outcome import Outcome
from provision.facts.nccl_tests import parse_nccl_tests
from provision.facts.registry import FACTS
from provision.facts.slurm import parse_nodes, parse_sinfo
from tests.facts.test_facts import _expectations

pytestmark = pytest.mark.fast
CASES = Path(__file__).parents[1] / "facts"

UNKNOWN_PREFIX = "host17 | "


def _cut(text: str) -> str:
    """The output cut in the middle of a line, as a dropped connection or a killed command leaves it."""
    return text[:len(text) // 2 + 3]


def _prefixed(text: str) -> str:
    return "".join(UNKNOWN_PREFIX + line + "\n" for line in text.splitlines())


DEGRADED = {"empty": lambda text: "", "cut": _cut, "unknown prefix": _prefixed}


HEALTHY = {"gpus": "gpus/h100_healthy", "remapped_rows": "remapped_rows/healthy",
           "retired_pages": "retired_pages/healthy", "nvlink": "nvlink/healthy", "kernel_log": "kernel_log/clean",
           "lspci": "lspci/healthy", "ibstat": "ibstat/active_ndr", "df": "df/healthy", "swaps": "swaps/none",
           "nv_mem": "nv_mem/registered", "nvlink_errors": "nvlink_errors/healthy",
           "topology": "topology/two_gpus_one_rail", "fabric_manager": "fabric_manager/active",
           "dpkg_status": "dpkg_status/driver_535",
           "modules": "modules/peermem_loaded", "pci_devices": "pci_devices/one_device",
           "infiniband": "infiniband/one_device", "cmdline": "cmdline/ubuntu_server",
           "dcgm_version": "dcgm_version/hostengine_running", "machine": "machine/x86_64_host"}


@pytest.fixture(scope="module")
def host() -> tuple[preflight.Gathered, preflight.Expectations]:
    def output(name: str) -> Any:
        return json.loads((CASES / f"{HEALTHY[name]}.json").read_text())["output"]

    gathered = preflight.Gathered(
        outputs={probe.name: output(probe.name) for probe in preflight.PROBES},
        files={probe.name: output(probe.name) for probe in preflight.FILES},
        links={probe.name: output(probe.name) for probe in preflight.LINKS})
    return gathered, _expectations({"allowlist": "builtin", "iommu": "passthrough", "dcgm_min": "3.1.6"})


def _evaluate(gathered: preflight.Gathered, expect: preflight.Expectations) -> dict[str, Outcome]:
    fresh = dataclasses.replace(gathered, parsed={})
    return {result.check: result.outcome for result in preflight.evaluate(fresh, expect)}


def _with(gathered: preflight.Gathered, name: str, value: Any) -> preflight.Gathered:
    outputs, files, links = dict(gathered.outputs), dict(gathered.files), dict(gathered.links)
    problems = {key: problem for key, problem in gathered.problems.items() if key != name}
    if value is None:
        problems[name] = f"{name}: taken away"
        outputs.pop(name, None)
    elif name in outputs:
        outputs[name] = value
    elif name in files:
        files[name] = value
    else:
        links[name] = value
    return preflight.Gathered(outputs, files, links, problems)


PREFLIGHT_FACTS = [fact.name for fact in (*preflight.PROBES, *preflight.FILES, *preflight.LINKS)]


@pytest.mark.parametrize("degraded", sorted(DEGRADED))
@pytest.mark.parametrize("name", PREFLIGHT_FACTS)
def test_no_check_passes_on_a_degraded_fact(host, name: str, degraded: str) -> None:
    gathered, expect = host
    baseline = _evaluate(gathered, expect)
    taken = _evaluate(_with(gathered, name, None), expect)
    readers = [check for check, outcome in taken.items()
               if outcome is Outcome.UNKNOWN and baseline.get(check) is Outcome.OK]
    if name in gathered.links:  # a folder of links: nothing, half of them, or targets that are not paths
        entries = gathered.links[name]
        value: Any = {"": {}, "cut": dict(list(entries.items())[:len(entries) // 2]),
                      "unknown prefix": {key: UNKNOWN_PREFIX + target for key, target in entries.items()}}
        value = value["" if degraded == "empty" else degraded]
    else:
        original = gathered.outputs.get(name) if name in gathered.outputs else gathered.files[name]
        assert original, f"the simulated host gave no {name} to degrade"
        value = DEGRADED[degraded](original)
    outcomes = _evaluate(_with(gathered, name, value), expect)
    passed = [check for check in readers if outcomes[check] is Outcome.OK]
    assert not passed, f"{name} {degraded}: {passed} still ok"


def test_every_registered_fact_is_walked() -> None:
    # judged elsewhere, each with its own silence test (the soak's telemetry: test_soak_trends, a series that
    # stopped is unknown)
    others = {"nccl_all_reduce_perf", "slurm_nodes", "slurm_jobs", "sinfo",
              "gpu_query_fields", "query_xml", "gpu_telemetry",
              *(f"dcgm_diag_r{level}" for level in (1, 2, 3, 4)),
              # an NVLink domain's, judged by provision.checks.nvlink_domain (tests/checks/test_nvlink_domain.py)
              "gpu_fabric", "imex_status", "imex_nodes", "imex_config", "imex_peers", "imex_channels", "nvlsm_start",
              # a failed job's nodes' kernel logs, read by `provision triage --job`: one not read is said to be
              # missing, a line without a time kept (tests/triage/test_job.py)
              "kernel_log_iso"}
    assert set(FACTS) == set(PREFLIGHT_FACTS) | others


@pytest.mark.parametrize("degraded", ["empty", "unknown prefix"])
def test_the_field_probe_refuses_what_lists_no_field(degraded: str) -> None:
    """A probe that lists nothing chooses nothing: the newest names are asked, and a driver that refuses them makes
    the GPU checks unknown (below)."""
    from provision.facts.nvidia_smi import parse_help_query

    output = DEGRADED[degraded](json.loads((CASES / "gpu_query_fields" / "driver_535.json").read_text())["output"])
    with pytest.raises(ValueError):
        parse_help_query(output)


@pytest.mark.parametrize("degraded", sorted(DEGRADED))
def test_dcgm_never_passes_a_degraded_report(degraded: str) -> None:
    from provision.checks.dcgm_diag import DiagExpectations, evaluate
    from provision.facts import dcgm

    case = json.loads((CASES / "dcgm_diag_r2" / "healthy.json").read_text())
    try:
        report = dcgm.parse_diag(DEGRADED[degraded](case["output"]))
    except ValueError:
        report = None
    judged = evaluate(report, DiagExpectations(2, 2))
    assert not any(result.outcome is Outcome.OK for result in judged), degraded
    version = json.loads((CASES / "dcgm_version" / "hostengine_running.json").read_text())["output"]
    with contextlib.suppress(ValueError):
        assert dcgm.parse_version(DEGRADED[degraded](version)).hostengine is None, "a cut -v names no engine"


NCCL = (Path(__file__).parents[1] / "facts" / "nccl_all_reduce_perf" / "a100_public_points.json")
SCONTROL = (Path(__file__).parents[1] / "facts" / "slurm_nodes" / "multi_line_default.json")
SINFO = (Path(__file__).parents[1] / "facts" / "sinfo" / "default_with_suffixes.json")


@pytest.mark.parametrize("degraded", sorted(DEGRADED))
def test_nccl_tests_never_passes_a_degraded_output(degraded: str) -> None:
    output = DEGRADED[degraded](json.loads(NCCL.read_text())["output"])
    try:
        report = parse_nccl_tests(output)
    except ValueError:
        return
    assert not report.passed, degraded


@pytest.mark.parametrize("degraded", sorted(DEGRADED))
@pytest.mark.parametrize("case", [SCONTROL, SINFO], ids=["scontrol", "sinfo"])
def test_slurm_listings_refuse_a_degraded_output(case: Path, degraded: str) -> None:
    output = DEGRADED[degraded](json.loads(case.read_text())["output"])
    parse = parse_nodes if case == SCONTROL else parse_sinfo
    if degraded == "empty":  # an empty listing is a cluster with no node: the caller must not read it as health
        assert parse(output) == [] if case == SCONTROL else True
        if case == SINFO:
            with pytest.raises(ValueError):
                parse(output)
        return
    with pytest.raises(ValueError):
        parse(output)


JOBS = (Path(__file__).parents[1] / "facts" / "slurm_jobs" / "revalidations_and_a_user_job.json")


@pytest.mark.parametrize("degraded", sorted(DEGRADED))
def test_a_degraded_job_listing_never_shows_a_job_that_ended_well(degraded: str) -> None:
    """The watch reads its revalidation jobs' ends from this listing: a cut or foreign text is refused, and an empty
    one holds no job (the watch then says it cannot tell how its job ended: never that it passed)."""
    from provision.facts.slurm import parse_jobs

    output = DEGRADED[degraded](json.loads(JOBS.read_text())["output"])
    try:
        jobs = parse_jobs(output)
    except ValueError:
        return
    assert not [job for job in jobs if job.state == "completed" and job.exit_code == 0], degraded
    assert degraded != "unknown prefix", "a line with a foreign prefix was read as a job"


def test_the_healthy_host_passes_every_check_it_reads(host) -> None:
    gathered, expect = host
    outcomes = _evaluate(gathered, expect)
    assert {check for check, outcome in outcomes.items() if outcome is not Outcome.OK} <= {"vbios"}, outcomes


class RecordedHost:
    """A HostSession over recorded outputs (the protocol preflight talks to), with a driver of a chosen branch:
    before 535 nvidia-smi refuses the clocks_event_reasons names, as the real one does (exit 2)."""

    host = "recorded"

    def __init__(self, help_case: str | None, *, branch: int) -> None:
        self.help = None if help_case is None else json.loads((CASES / f"{help_case}.json").read_text())["output"]
        self.branch = branch
        self.asked: list[list[str]] = []

    def run(self, argv, timeout_s, *, become=False):
        from provision.hosts.remote import CommandResult

        self.asked.append(list(argv))
        if list(argv) == ["nvidia-smi", "--help-query-gpu"]:
            if self.help is None:
                return CommandResult(tuple(argv), 127, "", "nvidia-smi: command not found", 0.1)
            return CommandResult(tuple(argv), 0, self.help, "", 0.1)
        gpu_query = len(argv) > 1 and argv[1].startswith("--query-gpu=")
        if gpu_query and "clocks_event_reasons" in argv[1] and self.branch < 535:
            return CommandResult(tuple(argv), 2, 'Field "clocks_event_reasons.active" is not a valid field to '
                                 "query.\n", "", 0.1)
        name = "gpus" if gpu_query else next(probe.name for probe in preflight.PROBES if probe.argv == list(argv))
        output = json.loads((CASES / f"{HEALTHY[name]}.json").read_text())["output"]
        return CommandResult(tuple(argv), 0, output, "", 0.1)

    def read_text(self, path):
        name = next(probe.name for probe in preflight.FILES if probe.path == path)
        return json.loads((CASES / f"{HEALTHY[name]}.json").read_text())["output"]

    def resolve_links(self, directory):
        name = next(probe.name for probe in preflight.LINKS if probe.path == directory)
        return json.loads((CASES / f"{HEALTHY[name]}.json").read_text())["output"]

    def close(self):
        return None


@pytest.mark.parametrize("driver", ["gpu_query_fields/driver_470", "gpu_query_fields/driver_535"])
def test_the_gpu_query_asks_for_the_names_the_driver_knows(driver: str) -> None:
    session = RecordedHost(driver, branch=int(driver[-3:]))
    gathered = preflight.collect(session, 10)
    query = next(argv[1] for argv in session.asked if argv[1].startswith("--query-gpu="))
    assert ("clocks_event_reasons.active" in query) is driver.endswith("535"), query
    outcomes = _evaluate(gathered, _expectations({"allowlist": "builtin"}))
    assert outcomes["throttle"] is Outcome.OK and outcomes["gpu_count"] is Outcome.OK, outcomes


def test_a_driver_that_refuses_a_field_leaves_the_gpu_checks_unknown() -> None:
    """No help to probe (an older nvidia-smi path, a failing probe) and a driver that refuses the new name: every
    GPU check is unknown, none says ok."""
    session = RecordedHost(None, branch=470)
    gathered = preflight.collect(session, 10)
    assert "not a valid field" in gathered.problems["gpus"]
    outcomes = _evaluate(gathered, _expectations({"allowlist": "builtin"}))
    assert all(outcomes[check] is Outcome.UNKNOWN for check in ("gpu_count", "driver", "ecc", "throttle")), outcomes


@pytest.mark.parametrize("degraded", sorted(DEGRADED))
def test_the_xml_report_refuses_a_degraded_output(degraded: str) -> None:
    from provision.facts.nvidia_smi import parse_query_xml

    output = DEGRADED[degraded](json.loads((CASES / "query_xml" / "two_h100.json").read_text())["output"])
    with pytest.raises(ValueError):
        parse_query_xml(output)


def test_collect_keeps_within_sshds_sessions_per_connection() -> None:
    """sshd refuses channels past MaxSessions (10 by default) on one connection: the probes of a host run at most
    CHANNELS_AT_ONCE at a time, however many there are."""
    import threading
    import time

    class Counting(RecordedHost):
        def __init__(self) -> None:
            super().__init__("gpu_query_fields/driver_535", branch=535)
            self.open, self.most, self.lock = 0, 0, threading.Lock()

        def run(self, argv, timeout_s, *, become=False):
            with self.lock:
                self.open += 1
                self.most = max(self.most, self.open)
            time.sleep(0.05)
            try:
                return super().run(argv, timeout_s, become=become)
            finally:
                with self.lock:
                    self.open -= 1

    session = Counting()
    preflight.collect(session, 10)
    assert len(preflight.PROBES) > preflight.CHANNELS_AT_ONCE and session.most <= preflight.CHANNELS_AT_ONCE


def test_after_a_reset_only_what_followed_it_is_judged_and_silence_is_still_not_health(host) -> None:
    """The watch's re-validation after a GPU reset (``kernel_after_s``, where the log stood when the reset began):
    the recorded Xid 79 before that point is the episode's cause, judged already; a line after it fails the node
    again; and an empty or unstamped log is unknown whatever the window, never ok."""
    gathered, expect = host
    xid79 = json.loads((CASES / "kernel_log" / "xid79.json").read_text())["output"]

    def xid_outcome(text: str, after: float | None) -> Outcome:
        judged = dataclasses.replace(_with(gathered, "kernel_log", text), kernel_after_s=after)
        return next(result.outcome for result in preflight.evaluate(judged, expect) if result.check == "xid")

    assert xid_outcome(xid79, None) is Outcome.FAILED
    assert xid_outcome(xid79, 8123.6) is Outcome.OK  # the reset began after the Xid
    assert xid_outcome(xid79, 8000.0) is Outcome.FAILED  # ... or before it: the Xid followed the reset
    assert xid_outcome("", 8123.6) is Outcome.UNKNOWN
    assert xid_outcome("NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n",
                       8123.6) is Outcome.UNKNOWN  # no stamp: a format we do not know
