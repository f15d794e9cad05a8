"""DCGM's diagnostic judged per test, on the reports under ``tests/facts/dcgm_diag_r*/`` (DCGM 3.3 and 4.x forms):
a test passes only on DCGM's word for every GPU; what DCGM did not say is unknown, never ok."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from provision.catalog import dcgm_tests
from provision.checks.dcgm_diag import DiagExpectations, evaluate
from provision.checks.outcome import CheckResult, Outcome
from provision.facts.dcgm import DiagReport, parse_diag

pytestmark = pytest.mark.fast
FACTS = Path(__file__).parents[1] / "facts"


def _report(case: str) -> DiagReport:
    return parse_diag(json.loads((FACTS / f"{case}.json").read_text())["output"])


def _judged(case: str, *, level: int, gpus: int, **options: object) -> dict[str, CheckResult]:
    expect = DiagExpectations(level, gpus, frozenset(options.pop("allowed_skips", ())))  # type: ignore[arg-type]
    return {result.check: result for result in evaluate(_report(case), expect, **options)}  # type: ignore[arg-type]


def test_a_healthy_report_passes_every_test_of_its_level() -> None:
    judged = _judged("dcgm_diag_r2/healthy", level=2, gpus=2)
    assert set(judged) == {"dcgm_software", "dcgm_pcie", "dcgm_memory"}
    assert {result.outcome for result in judged.values()} == {Outcome.OK}
    assert judged["dcgm_pcie"].message == "DCGM pcie passed on 2 GPU(s)"


def test_a_failure_names_its_gpu_with_dcgms_text_and_error_id() -> None:
    judged = _judged("dcgm_diag_r3/targeted_power_short_on_one_gpu", level=3, gpus=8, allowed_skips={"eud"})
    power = judged["dcgm_targeted_power"]
    assert power.outcome is Outcome.FAILED
    assert power.message.startswith("DCGM targeted_power: GPU 2: Max power of 512.3 did not reach")
    assert power.evidence[0].endswith("(DCGM error 63)") and len(power.evidence) == 1
    assert {check for check, result in judged.items() if result.outcome is Outcome.OK} == {
        "dcgm_software", "dcgm_pcie", "dcgm_memory", "dcgm_diagnostic", "dcgm_targeted_stress",
        "dcgm_memory_bandwidth"}


def test_a_skipped_optional_test_is_silenced_and_a_skipped_required_one_is_unknown() -> None:
    """Issue 51: DCGM skips EUD where its package is not installed; EUD is optional (judged when it runs, never
    required), so the skip keeps no healthy node out. A test of the run level that DCGM skipped stays unknown."""
    optional = _judged("dcgm_diag_r3/targeted_power_short_on_one_gpu", level=3, gpus=8)
    assert optional["dcgm_eud"].outcome is Outcome.SILENCED
    assert "optional test" in optional["dcgm_eud"].message and "not a reason to keep the node out" in \
        optional["dcgm_eud"].message
    allowed = _judged("dcgm_diag_r3/targeted_power_short_on_one_gpu", level=3, gpus=8, allowed_skips={"eud"})
    assert allowed["dcgm_eud"].outcome is Outcome.SILENCED and "the spec allows it" in allowed["dcgm_eud"].message
    dcgm3 = _judged("dcgm_diag_r3/eud_skipped_dcgm3", level=3, gpus=2)  # 3.x, the EUD package not installed
    assert dcgm3["dcgm_eud"].outcome is Outcome.SILENCED
    assert all(result.outcome is not Outcome.UNKNOWN for result in dcgm3.values()), dcgm3
    required = _judged("dcgm_diag_r2/memory_skipped_on_one_gpu", level=2, gpus=2)
    assert required["dcgm_memory"].outcome is Outcome.UNKNOWN
    assert "skipped memory on GPU 1: a skipped test is not a pass" in required["dcgm_memory"].message
    assert required["dcgm_pcie"].outcome is Outcome.OK


def test_what_dcgm_said_of_a_passing_test_is_kept_with_it() -> None:
    """Issue 51: a 4.x test_summary's info and each GPU's info (how it passed) are the check's evidence."""
    judged = _judged("dcgm_diag_r2/pass_with_summary_info", level=2, gpus=2)
    memory = judged["dcgm_memory"]
    assert memory.outcome is Outcome.OK
    assert "summary: SRAM threshold check skipped: not supported on this GPU" in memory.evidence
    assert "GPU 0: Allocated 80561586175 bytes (98.4%)" in memory.evidence
    assert "GPU 1: GPU to Host bandwidth:\t\t53.07 GB/s" in judged["dcgm_pcie"].evidence


def test_a_test_failed_in_its_summary_alone_fails() -> None:
    """DCGM 4.x: an error tied to no GPU (PCIe replays counted for the node): every GPU passes, the test fails."""
    judged = _judged("dcgm_diag_r2/pcie_fails_in_its_summary_only", level=2, gpus=2)
    assert judged["dcgm_pcie"].outcome is Outcome.FAILED
    assert judged["dcgm_pcie"].message.startswith("DCGM pcie: Detected more than 8 PCIe replays per minute")
    assert judged["dcgm_memory"].outcome is Outcome.OK


def test_dcgm_33s_display_names_and_deployment_checks_map_to_the_same_checks() -> None:
    judged = _judged("dcgm_diag_r4/memtest_faulty_memory_dcgm33", level=4, gpus=8)
    assert set(judged) == {f"dcgm_{plugin}" for plugin in dcgm_tests(4)}
    assert judged["dcgm_memtest"].outcome is Outcome.FAILED
    assert judged["dcgm_memtest"].message == ("DCGM memtest: GPU 5: Found 3 faulty memory elements on GPU 5 Run a "
                                              "field diagnostic on the GPU. (DCGM error 52)")
    software = judged["dcgm_software"]  # nine deployment checks, one of them failed: its name leads its text
    assert software.outcome is Outcome.FAILED
    assert software.message.startswith("DCGM software: GPU 0: Persistence Mode: Persistence mode for GPU 0")
    assert judged["dcgm_pulse_test"].outcome is judged["dcgm_memory"].outcome is Outcome.OK


def test_the_gpus_errors_repeated_in_the_summary_are_counted_once() -> None:
    """DCGM 4.5+ copies every error of a test into its summary."""
    report = _report("dcgm_diag_r1/persistence_off")
    (software,) = report.tests
    repeated = dataclasses.replace(software, summary_messages=software.results[1].messages)
    (result,) = evaluate(dataclasses.replace(report, tests=(repeated,)), DiagExpectations(1, 2))
    assert result.outcome is Outcome.FAILED and len(result.evidence) == 1
    assert result.message == ('DCGM software: GPU 1: Persistence Mode: Persistence mode for GPU 1 is disabled. Enable '
                              'persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root. (DCGM error 29)')


@pytest.mark.parametrize(("case", "level", "gpus", "check", "says"), [
    ("dcgm_diag_r2/healthy", 3, 2, "dcgm_targeted_power", "report at run level 3 has no targeted_power test"),
    ("dcgm_diag_r2/healthy", 2, 8, "dcgm_pcie", "gave no result for GPU 2, 3, 4, 5, 6, 7 of 8"),
    ("dcgm_diag_r3/runtime_error", 3, 8, "dcgm", "did not run: Error: Diagnostic could not be run while GPUs"),
], ids=["a_test_the_level_includes_is_missing", "a_gpu_left_out", "the_run_could_not_start"])
def test_what_dcgm_did_not_say_is_unknown(case: str, level: int, gpus: int, check: str, says: str) -> None:
    judged = _judged(case, level=level, gpus=gpus)
    assert judged[check].outcome is Outcome.UNKNOWN and says in judged[check].message, judged[check]
    if check != "dcgm":
        assert judged["dcgm_software"].outcome is Outcome.OK  # the node's own checks: no GPU to leave out


def test_an_exit_status_of_a_cut_short_run_is_unknown_beside_what_was_reported() -> None:
    judged = _judged("dcgm_diag_r4/after_a_connection_error_line", level=4, gpus=2, exit_code=245)
    assert judged["dcgm"].outcome is Outcome.UNKNOWN and "timed out" in judged["dcgm"].message
    assert {result.outcome for check, result in judged.items() if check != "dcgm"} == {Outcome.OK}


def test_a_failure_the_exit_status_counts_but_the_report_hides_is_unknown() -> None:
    judged = _judged("dcgm_diag_r2/healthy", level=2, gpus=2, exit_code=226)
    assert judged["dcgm"].outcome is Outcome.UNKNOWN and "exited 226" in judged["dcgm"].message
    failing = _judged("dcgm_diag_r2/pcie_fails_in_its_summary_only", level=2, gpus=2, exit_code=205)
    assert "dcgm" not in failing and failing["dcgm_pcie"].outcome is Outcome.FAILED


def test_a_report_that_cannot_be_read_is_unknown() -> None:
    case = json.loads((FACTS / "dcgm_diag_r3/unknown_status.json").read_text())
    with pytest.raises(ValueError, match="none of DCGM's Pass/Skip/Fail") as refused:
        parse_diag(case["output"])
    (result,) = evaluate(None, DiagExpectations(3, 8), problem=str(refused.value))
    assert result.outcome is Outcome.UNKNOWN and "status 'Warn'" in result.message


# -- one run of dcgmi diag as the dcgm stage hands it to the judgement (provision.burnin.dcgm.judge_run) -------
def _run(case: str, rc: int, stderr: str = "", **fields: object) -> Any:
    from provision.facts.session import CommandResult

    output = json.loads((FACTS / f"{case}.json").read_text())["output"] if case else ""
    return CommandResult(("dcgmi", "diag", "-r", "3", "-j"), rc, output, stderr, 900.0, **fields)  # type: ignore[arg-type]


def test_the_stage_judges_a_failed_run_on_its_report_not_its_exit_status() -> None:
    from provision.burnin.dcgm import judge_run

    judged = {result.check: result for result in judge_run(
        _run("dcgm_diag_r3/targeted_power_short_on_one_gpu", 226), DiagExpectations(3, 8, frozenset({"eud"})))}
    assert judged["dcgm_targeted_power"].outcome is Outcome.FAILED
    assert judged["dcgm_memory"].outcome is Outcome.OK


@pytest.mark.parametrize(("fields", "says"), [
    ({"lost": True}, "the connection to the host dropped during dcgmi diag -r 3 -j (ours, not the host's)"),
    ({"timed_out": True}, "timed out after 900 s"),
    ({"refused_root": "sudo: a password is required"}, "needs root: sudo: a password is required"),
])
def test_a_run_that_did_not_finish_is_unknown_with_the_reason_even_with_a_report(fields: dict, says: str) -> None:
    from provision.burnin.dcgm import judge_run

    results = judge_run(_run("dcgm_diag_r2/healthy", 0, **fields), DiagExpectations(2, 2))
    assert [(result.check, result.outcome) for result in results] == [("dcgm", Outcome.UNKNOWN)]
    assert says in results[0].message, results[0].message


def test_a_run_that_printed_nothing_is_unknown() -> None:
    from provision.burnin.dcgm import judge_run

    results = judge_run(_run("", 127, stderr="bash: line 1: dcgmi: command not found"), DiagExpectations(3, 8))
    assert [(result.check, result.outcome) for result in results] == [("dcgm", Outcome.UNKNOWN)]
    assert "command not found" in results[0].message


def test_the_spec_s_timeout_bounds_the_diagnostic_else_its_level_does() -> None:
    from provision.burnin.dcgm import TIMEOUT_S, timeout_of
    from provision.spec.model import DcgmDiag

    assert timeout_of(DcgmDiag(level=4)) == TIMEOUT_S[4] == 4 * 3600  # memtest and pulse: over an hour
    assert timeout_of(DcgmDiag(level=2)) == TIMEOUT_S[2]
    assert timeout_of(DcgmDiag(level=4, timeout_s=9000)) == 9000.0
