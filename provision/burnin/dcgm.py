"""The dcgm stage: NVIDIA's own diagnostic (``dcgmi diag -r <level> -j``) on every node at once, one session each.

DCGM's report is the node's own measurement, judged per test (:mod:`provision.checks.dcgm_diag`): a test passes
only on DCGM's word for every GPU; a skip, a GPU left out, a run cut short are unknown. The report is kept as
DCGM printed it in the run directory (``dcgm/<node>.json``), the evidence a vendor case asks for. A connection
lost under the diagnostic is ours: the node's diagnostic runs once more, and if the second is lost too the node
is unknown for that reason, never failed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provision.burnin.preflight import unreachable
from provision.burnin.verdict import NodeVerdict, judge
from provision.checks import dcgm_diag
from provision.checks.outcome import CheckResult
from provision.facts import dcgm
from provision.facts.session import CommandResult
from provision.hosts.remote import open_session
from provision.spec import LoadedSpec
from provision.spec.model import DcgmDiag
from provision.spec.semantics import ResolvedNode

#: How long one node's diagnostic may take by level, past which it is cut short (unknown): DCGM's own figures
#: (field guide: r2 minutes, r3 ~10-15 min, r4 over an hour) with room for eight GPUs tested one plugin at a time.
TIMEOUT_S = {1: 300, 2: 1200, 3: 3600, 4: 4 * 3600}
ATTEMPTS = 2  # a connection lost under the diagnostic: once more, then unknown (ours)


def timeout_of(diag: DcgmDiag) -> float:
    """How long one node's diagnostic may run: the spec's ``burnin.dcgm.timeout_s``, else the level's own."""
    return float(diag.timeout_s or TIMEOUT_S[diag.level])


def run_dcgm_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, forks: int,
                   evidence_dir: Path) -> list[NodeVerdict]:
    diag = loaded.spec.burnin.dcgm or DcgmDiag()
    timeout_s = timeout_of(diag)
    evidence_dir.mkdir(parents=True, exist_ok=True)

    def one(node: ResolvedNode) -> NodeVerdict:
        expect = dcgm_diag.DiagExpectations(diag.level, loaded.spec.hardware[node.hardware].gpu.count,
                                            frozenset(diag.allowed_skips))
        results = diagnose(loaded, node, state_dir, expect, timeout_s, evidence_dir / f"{node.name}.json")
        return judge(loaded.spec.admission, node.name, "dcgm", results)

    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(nodes)))) as pool:
        return list(pool.map(one, nodes))


def diagnose(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path, expect: dcgm_diag.DiagExpectations,
             timeout_s: float, evidence: Path) -> list[CheckResult]:
    probe = dcgm.DIAG[expect.level]
    result: CommandResult | None = None
    for _attempt in range(ATTEMPTS):
        try:
            session = open_session(loaded, node, state_dir)
        except Exception as error:
            return [unreachable("connect", error)]
        try:
            result = session.run(probe.argv, timeout_s, become=probe.needs_root)
        finally:
            session.close()
        if not result.lost:
            break
    assert result is not None
    evidence.write_text(result.stdout)
    return judge_run(result, expect)


def judge_run(result: CommandResult, expect: dcgm_diag.DiagExpectations) -> list[CheckResult]:
    """One ``dcgmi diag`` run as the checks see it: its report when it printed one (whatever its exit status: a
    failure exits 226 or 205 with a full report), else why there is none."""
    if result.lost or result.timed_out or result.refused_root:  # a report printed before that is cut short
        return dcgm_diag.evaluate(None, expect, problem=result.problem())
    if not result.stdout.strip():
        return dcgm_diag.evaluate(None, expect, problem="it printed nothing" if result.ok else result.problem())
    try:
        report = dcgm.parse_diag(result.stdout)
    except ValueError as error:
        return dcgm_diag.evaluate(None, expect, problem=f"{error} (exit {result.rc})")
    return dcgm_diag.evaluate(report, expect, exit_code=result.rc)
