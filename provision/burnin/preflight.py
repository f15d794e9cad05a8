"""The preflight stage: every node's checks at once, nodes in parallel, one session per node; and the runtime
check that comes before every stage that starts workers on the nodes."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provision.burnin.verdict import NodeVerdict, judge
from provision.checks import preflight, spec_expectations
from provision.checks.outcome import CheckResult, Outcome
from provision.hosts import runtime
from provision.hosts.remote import open_session
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode

#: Per command; a hung nvidia-smi is a finding (unknown), not a hung burn-in.
COMMAND_TIMEOUT_S = 60.0


def unreachable(check: str, error: Exception) -> CheckResult:
    """``check`` unknown because no session to the node could be opened: ours to retry, never the node's verdict."""
    return CheckResult(check, Outcome.UNKNOWN, f"cannot open a session: {type(error).__name__}: {error}",
                       "check that the host is up and reachable over SSH")


def check_node(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path) -> list[CheckResult]:
    try:
        session = open_session(loaded, node, state_dir)
    except Exception as error:
        return [unreachable("connect", error)]
    try:
        return preflight.run(session, spec_expectations.expectations(loaded, node), COMMAND_TIMEOUT_S)
    finally:
        session.close()


def run_preflight(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, forks: int) -> list[NodeVerdict]:
    def one(node: ResolvedNode) -> NodeVerdict:
        return judge(loaded.spec.admission, node.name, "preflight", check_node(loaded, node, state_dir))

    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(nodes)))) as pool:
        return list(pool.map(one, nodes))


def runtime_of(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path, fabric_tests_version: str) -> CheckResult:
    """``runtime/version`` on one node: its runtime's own description against what this controller installs."""
    python = runtime.node_python(loaded.spec)
    pins = loaded.spec.software.runtime
    assert pins is not None
    judged = functools.partial(runtime.judge_runtime, python=python, torch=pins.torch,
                               fabric_tests_version=fabric_tests_version)
    try:
        session = open_session(loaded, node, state_dir)
    except Exception as error:
        return unreachable("runtime/version", error)
    try:
        result = session.run(runtime.probe_argv(python), COMMAND_TIMEOUT_S)
    finally:
        session.close()
    if not result.ok:
        return judged(None, result.problem())
    try:
        return judged(runtime.parse_runtime(result.stdout), "")
    except ValueError as error:
        return judged(None, f"{error}: {result.stdout.strip()[-200:]!r}")


def check_runtimes(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, stage: str,
                   forks: int) -> dict[str, NodeVerdict]:
    """Before a stage starts workers: the nodes whose runtime is missing or not this controller's, each failed at
    ``stage`` with ``runtime/version`` (never a traceback from an agent). Empty when the spec names no runtime."""
    if loaded.spec.software.runtime is None or not nodes:
        return {}
    version = runtime.wheel_version()  # the sources hashed once, not once per node
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(nodes)))) as pool:
        results = list(pool.map(lambda node: runtime_of(loaded, node, state_dir, version), nodes))
    return {node.name: judge(loaded.spec.admission, node.name, stage, [result])
            for node, result in zip(nodes, results, strict=True) if result.outcome is not Outcome.OK}
