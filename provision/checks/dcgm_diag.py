"""Judge a node's DCGM diagnostic (``dcgmi diag -r N -j``): one check per DCGM test, named by its plugin.

A test passes only on DCGM's own word for every GPU of the node. What DCGM did not say is not a pass: a test
the run level includes but the report lacks, a GPU a per-GPU test left out, a test it skipped (unless the spec
names it as allowed to skip: the EUD plugins ship in a separate package), a run that could not start, a report we
cannot read. Those are ``unknown``; but a skip of an optional test (EUD, CPU EUD, nvbandwidth: judged when they
run, never required) is silenced with DCGM's reason, since a node that lacks the EUD package is not a bad node.
What DCGM said of a passing test (its ``info``, a threshold it skipped) is kept as the check's evidence. A failure
names the GPU and carries DCGM's text and error id as evidence; a test whose summary fails while every GPU passed
(an error DCGM tied to no GPU, e.g. PCIe replays) fails too.
"""

from __future__ import annotations

from dataclasses import dataclass

from provision.catalog import DCGM_OPTIONAL_TESTS, dcgm_tests
from provision.checks.outcome import CheckResult, Outcome
from provision.facts.dcgm import DiagMessage, DiagReport, DiagResult, DiagTest

#: Exit statuses of ``dcgmi diag`` that come with a complete report: 0 (nothing counted as failed), 226 (a
#: failure: DCGM_ST_NVVS_ERROR) and 205 (a failure of the isolate class: DCGM_ST_NVVS_ISOLATE_ERROR).
COMPLETE = {0, 205, 226}
INCOMPLETE = {203: "the diagnostic was killed (DCGM_ST_NVVS_KILLED)", 245: "the diagnostic timed out (DCGM_ST_TIMEOUT)",
              242: "the diagnostic returned no data (DCGM_ST_NO_DATA)"}
PER_NODE = {"software"}  # checks of the node's software; a 3.x deployment check names no GPU when it passes
REMEDIATION = "read DCGM's text and error id; a hardware-class failure (memory, PCIe, power) is a case for the vendor"


@dataclass(frozen=True)
class DiagExpectations:
    level: int
    gpus: int
    allowed_skips: frozenset[str] = frozenset()


def evaluate(report: DiagReport | None, expect: DiagExpectations, *, exit_code: int = 0,
             problem: str = "") -> list[CheckResult]:
    if report is None:
        return [CheckResult("dcgm", Outcome.UNKNOWN, f"DCGM's diagnostic could not be read: {problem or 'no output'}",
                            "check that DCGM is installed and nv-hostengine runs (dcgmi -v)")]
    if report.runtime_error is not None:
        return [CheckResult("dcgm", Outcome.UNKNOWN, f"DCGM's diagnostic did not run: {report.runtime_error}",
                            "the message says why; run dcgmi diag on the node", [report.runtime_error])]
    results = []
    if exit_code not in COMPLETE:
        meaning = INCOMPLETE.get(exit_code, "not a status a finished diagnostic returns")
        results.append(CheckResult("dcgm", Outcome.UNKNOWN, f"dcgmi diag exited {exit_code}: {meaning}",
                                   "run it again; a test cut short proves nothing"))
    by_plugin: dict[str, list[DiagTest]] = {}
    for test in report.tests:
        by_plugin.setdefault(test.plugin, []).append(test)
    asked = dcgm_tests(expect.level)
    for plugin in (*asked, *(name for name in by_plugin if name not in asked)):
        tests = by_plugin.get(plugin)
        if not tests:
            results.append(CheckResult(f"dcgm_{plugin}", Outcome.UNKNOWN,
                                       f"DCGM's report at run level {expect.level} has no {plugin} test",
                                       "a test DCGM did not report proves nothing; check the DCGM packages"))
            continue
        results.append(_judge(plugin, tests, expect))
    if exit_code in (205, 226) and not any(result.outcome is Outcome.FAILED for result in results):
        results.append(CheckResult("dcgm", Outcome.UNKNOWN, f"dcgmi diag exited {exit_code} (a failure counted) but "
                                   "its report shows none", "run it again and read DCGM's own log"))
    return results


def _judge(plugin: str, tests: list[DiagTest], expect: DiagExpectations) -> CheckResult:
    check = f"dcgm_{plugin}"
    failures = []
    for test in tests:
        prefix = f"{test.name}: " if plugin == "software" != test.name else ""  # 3.x: nine deployment checks
        for result in test.results:
            if result.status == "Fail":
                where = f"{result.entity}: " if result.entity else ""
                failures += [f"{where}{prefix}{_said(message)}" for message in result.messages] or \
                    [f"{where}{prefix}failed, without a message"]
        if test.summary == "Fail":
            entity_texts = {message.text for result in test.results for message in result.messages}
            failures += [f"{prefix}{_said(message)}" for message in test.summary_messages
                         if message.text not in entity_texts]  # 4.5+ repeats the GPUs' errors in the summary
            if not any(result.status == "Fail" for result in test.results) and not test.summary_messages:
                failures.append(f"{prefix}the test failed, with no GPU named and no message")
    if failures:
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return CheckResult(check, Outcome.FAILED, f"DCGM {plugin}: {failures[0]}{more}", REMEDIATION, failures)
    results = [result for test in tests for result in test.results]
    skipped = [result for result in results if result.status == "Skip"]
    said = _what_dcgm_said(tests)
    if skipped or any(test.summary == "Skip" for test in tests):
        named = sorted({result.entity for result in skipped if result.entity})
        because = f"; DCGM said: {_reason(tests, skipped)}" if _reason(tests, skipped) else ""
        if plugin in expect.allowed_skips:
            return CheckResult(check, Outcome.SILENCED, f"DCGM skipped {plugin}; the spec allows it to skip{because}",
                               evidence=said)
        if plugin in DCGM_OPTIONAL_TESTS:
            return CheckResult(check, Outcome.SILENCED,
                               f"DCGM skipped {plugin}, an optional test (judged when it runs, never required): "
                               f"not a reason to keep the node out{because}", evidence=said)
        return CheckResult(check, Outcome.UNKNOWN,
                           f"DCGM skipped {plugin}{' on ' + ', '.join(named) if named else ''}: a skipped test is "
                           f"not a pass{because}", "name it in the spec's allowed skips if this node cannot run it",
                           said)
    if not results:
        return CheckResult(check, Outcome.UNKNOWN, f"DCGM reported {plugin} without a result")
    if plugin not in PER_NODE:
        seen = {result.gpu for result in results if result.gpu is not None}
        missing = sorted(set(range(expect.gpus)) - seen)
        if missing:
            return CheckResult(check, Outcome.UNKNOWN,
                               f"DCGM's {plugin} gave no result for GPU {', '.join(map(str, missing))} "
                               f"of {expect.gpus}", "a GPU DCGM did not test is not a GPU that passed")
    gpus = len({result.gpu for result in results if result.gpu is not None})
    return CheckResult(check, Outcome.OK, f"DCGM {plugin} passed" + (f" on {gpus} GPU(s)" if gpus else ""),
                       evidence=said)


#: At most this many of DCGM's own lines are kept with a check (a 4.x report repeats each GPU's figures).
SAID_LINES = 48


def _what_dcgm_said(tests: list[DiagTest]) -> list[str]:
    """DCGM's info and warnings for a test, kept with its verdict (a pass says how it passed: the power reached,
    a threshold DCGM skipped), each once, the GPU named."""
    lines: list[str] = []
    for test in tests:
        lines += [f"summary: {line}" for line in test.summary_info]
        lines += [f"summary: {_said(message)}" for message in test.summary_messages]
        for result in test.results:
            where = f"{result.entity}: " if result.entity else ""
            lines += [f"{where}{line}" for line in result.info]
            lines += [f"{where}{_said(message)}" for message in result.messages]
    return list(dict.fromkeys(lines))[:SAID_LINES]


def _reason(tests: list[DiagTest], skipped: list[DiagResult]) -> str:
    """Why DCGM skipped a test, in its words: the skipped results' messages and info, else the summary's."""
    for lines in ([_said(message) for result in skipped for message in result.messages]
                  + [line for result in skipped for line in result.info],
                  [_said(message) for test in tests for message in test.summary_messages]
                  + [line for test in tests for line in test.summary_info]):
        if lines:
            return "; ".join(dict.fromkeys(lines))[:300]
    return ""


def _said(message: DiagMessage) -> str:
    return message.text if message.error_id is None else f"{message.text} (DCGM error {message.error_id})"
