"""The preflight stage: every node's checks at once, nodes in parallel, one session per node."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provision.burnin.verdict import NodeVerdict, judge
from provision.checks import preflight
from provision.checks.outcome import CheckResult, Outcome
from provision.observe import open_session
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode

#: Per command; a hung nvidia-smi is a finding (unknown), not a hung burn-in.
COMMAND_TIMEOUT_S = 60.0


def check_node(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path) -> list[CheckResult]:
    try:
        session = open_session(loaded, node, state_dir)
    except Exception as error:
        return [CheckResult("connect", Outcome.UNKNOWN, f"cannot open a session: {type(error).__name__}: {error}",
                            "check that the host is up and reachable over SSH")]
    try:
        return preflight.run(session, preflight.expectations(loaded, node), COMMAND_TIMEOUT_S)
    finally:
        session.close()


def run_preflight(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, forks: int,
                  on_node=lambda verdict: None) -> list[NodeVerdict]:
    def one(node: ResolvedNode) -> NodeVerdict:
        verdict = judge(loaded.spec.admission, node.name, "preflight", check_node(loaded, node, state_dir))
        on_node(verdict)
        return verdict

    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(nodes)))) as pool:
        return list(pool.map(one, nodes))
