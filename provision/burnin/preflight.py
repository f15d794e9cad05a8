"""The preflight stage: every node's checks at once, nodes in parallel, one session per node; and the runtime
check that comes before every stage that starts workers on the nodes."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provision.burnin.verdict import NodeVerdict, judge
from provision.checks import nvlink_domain, preflight, spec_expectations
from provision.checks.outcome import CheckResult, Outcome
from provision.facts.nvidia_smi import GPU_FABRIC, GpuFabric
from provision.hosts import runtime
from provision.hosts.remote import open_session
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode, domain_trays

#: Per command; a hung nvidia-smi is a finding (unknown), not a hung burn-in.
COMMAND_TIMEOUT_S = 60.0


def unreachable(check: str, error: Exception) -> CheckResult:
    """``check`` unknown because no session to the node could be opened: ours to retry, never the node's verdict."""
    return CheckResult(check, Outcome.UNKNOWN, f"cannot open a session: {type(error).__name__}: {error}",
                       "check that the host is up and reachable over SSH")


def read_node(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path, *,
              kernel_after_s: float | None = None) -> tuple[list[CheckResult], list[GpuFabric] | None]:
    """One node's preflight checks, and a compute tray's GPU fabric facts as read (None: not a tray, or not read),
    which its domain is judged on once every tray of it has been read. ``kernel_after_s``: judge the kernel log
    only after that point (seconds since boot; the watch's re-validation after a GPU reset)."""
    try:
        session = open_session(loaded, node, state_dir)
    except Exception as error:
        return [unreachable("connect", error)], None
    try:
        expect = spec_expectations.expectations(loaded, node)
        gathered = preflight.collect(session, COMMAND_TIMEOUT_S, platform=expect.platform)
        gathered.kernel_after_s = kernel_after_s
        results = preflight.evaluate(gathered, expect)
        return results, gathered.parsed.get(GPU_FABRIC.name)
    finally:
        session.close()


def check_node(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path, *,
               kernel_after_s: float | None = None) -> list[CheckResult]:
    return read_node(loaded, node, state_dir, kernel_after_s=kernel_after_s)[0]


def domain_results(loaded: LoadedSpec, fabrics: dict[str, list[GpuFabric] | None]) -> dict[str, CheckResult]:
    """``nvlink_domain`` for every compute tray preflight read: the trays the spec puts in one domain must name one
    NVLink partition (:func:`~provision.checks.nvlink_domain.judge_domain_membership`), judged among the trays of
    this run, on the GPUs that joined a partition: a GPU left out of any (CliqueId 0) is ``gpu_fabric``'s finding,
    not a second domain. A tray whose fabric was not read, or none of whose GPUs joined, is unknown here (its
    ``gpu_fabric`` says why), never in."""
    results: dict[str, CheckResult] = {}
    for domain in loaded.spec.nvlink_domains or []:
        trays = [host for host in domain_trays(domain) if host in fabrics]
        joined = {tray: [gpu for gpu in fabrics[tray] or [] if gpu.state == "Completed" and gpu.status == "Success"
                         and gpu.clique_id not in ("", "0", "N/A")] for tray in trays}
        read = {tray: gpus for tray, gpus in joined.items() if gpus}
        results.update(nvlink_domain.judge_domain_membership(read))
        for tray in trays:
            if tray not in read:
                results[tray] = CheckResult("nvlink_domain", Outcome.UNKNOWN, f"no GPU of {tray} was read in an "
                                            "NVLink partition: its domain cannot be told", "see gpu_fabric; re-run "
                                            "preflight")
    return results


def run_preflight(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, forks: int) -> list[NodeVerdict]:
    trays = {node.name for node in nodes if loaded.spec.hardware[node.hardware].platform == "nvl72"}
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(nodes)))) as pool:
        read = list(pool.map(lambda node: read_node(loaded, node, state_dir), nodes))
    domains = domain_results(loaded, {node.name: fabric for node, (_, fabric) in zip(nodes, read, strict=True)
                                      if node.name in trays})
    return [judge(loaded.spec.admission, node.name, "preflight",
                  [*results, *([domains[node.name]] if node.name in domains else [])])
            for node, (results, _) in zip(nodes, read, strict=True)]


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
