"""The torch stages: ``node`` (each node alone, one worker per GPU) and ``collectives`` (all nodes together).

Each stage launches the workers, reads back what every rank said, and judges per node. Absolute figures
(TFLOPS, GB/s) are judged only on a GPU, against thresholds derived from the GPU model; on the CPU backend (CI,
the simulated cluster) they are recorded and the judgement rests on the comparisons that hold on any device:
a GPU against its node-mates, a rank against the fleet, a result against the known answer.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from provision.burnin.launch import LaunchResult, NodeRun, launch
from provision.burnin.verdict import NodeVerdict, judge
from provision.checks.outcome import CheckResult, Outcome
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.spec.thresholds import effective_thresholds

NODE_DEADLINE_S = 300.0


def _limits(loaded: LoadedSpec, node: ResolvedNode) -> dict[str, float]:
    spec = loaded.spec
    return {name: threshold.value for name, threshold in effective_thresholds(
        spec.hardware[node.hardware], spec.fabric, spec.burnin.thresholds).items()}


def _verdict(loaded: LoadedSpec, node: str, stage: str, results: list[CheckResult]) -> NodeVerdict:
    admission = loaded.spec.admission
    return judge(node, stage, results, warnings_block=admission.warnings_block_admission,
                 unknown_blocks=admission.unknown_blocks_admission)


def _unfinished(run: NodeRun, expected: int) -> list[str]:
    """Why some of this node's workers gave no result (connection, error, killed), one line each."""
    if run.connect_error:
        return [f"cannot reach the node: {run.connect_error}"]
    reported = {record["local_rank"] for record in run.of("result")}
    problems = []
    agent = run.agent
    if agent is None:
        problems.append(f"the test agent did not report ({run.command.problem() if run.command else 'not run'})")
    else:  # the worker that stopped comes first: the others' errors are its consequence
        for local, outcome in agent["workers"].items():
            if outcome["killed"]:
                problems.append(f"GPU {local}: stopped making progress and was killed at the deadline")
    problems += [f"GPU {record['local_rank']}: {record['error']}" for record in run.of("error")]
    missing = [local for local in range(expected) if local not in reported]
    if missing and not problems:
        problems.append(f"GPUs {missing} gave no result")
    return problems if missing or problems else []


# -- node stage -------------------------------------------------------------------------------------------


def node_params(loaded: LoadedSpec, seed: int) -> dict[str, Any]:
    work = loaded.spec.burnin.workload
    return {"matmul_n": work.matmul_n, "matmul_iters": work.matmul_iters, "repeats": work.repeats,
            "memory_bytes": work.memory_bytes, "allreduce_bytes": work.allreduce_bytes,
            "allreduce_iters": work.iters, "seed": seed,
            "timeout_s": _limits(loaded, loaded.nodes[0])["collective_timeout_s"]}


def judge_node(node: ResolvedNode, run: NodeRun, gpus: int, limits: dict[str, float]) -> list[CheckResult]:
    problems = _unfinished(run, gpus)
    if problems:
        return [CheckResult("node_test", Outcome.FAILED, problems[0], "look at the worker's stack dump in the run "
                            "directory; reset the GPU, reboot if it repeats", problems)]
    results = sorted(run.of("result"), key=lambda record: record["local_rank"])
    on_gpu = results[0]["device"].startswith("cuda")
    checks = []

    tflops = [record["tflops"] for record in results]
    median = statistics.median(tflops)
    floor = limits["matmul_peer_fraction"] * median
    slow = [f"GPU {record['local_rank']} at {record['tflops'] / median:.0%} of its node-mates' matmul throughput"
            for record in results if record["tflops"] < floor]
    if on_gpu:
        slow += [f"GPU {record['local_rank']}: {record['tflops']:.0f} TFLOPS, below {limits['matmul_tflops']:g}"
                 for record in results if record["tflops"] < limits["matmul_tflops"]]
    evidence = [f"GPU {record['local_rank']}: {record['tflops']:.4g} TFLOPS" for record in results]
    checks.append(CheckResult("matmul", Outcome.FAILED if slow else Outcome.OK,
                              slow[0] if slow else f"matmul median {median:.4g} TFLOPS, every GPU within "
                              f"{1 - limits['matmul_peer_fraction']:.0%} of it", "check clocks and throttle "
                              "reasons under load; reseat or RMA the GPU" if slow else "", evidence))

    digests = [record["digest"] for record in results]
    majority = max(set(digests), key=digests.count)
    odd = [record["local_rank"] for record in results if record["digest"] != majority]
    checks.append(CheckResult(
        "bit_exact", Outcome.FAILED if odd else Outcome.OK,
        f"GPU(s) {odd} computed a different result from identical inputs (silent data corruption)" if odd
        else f"{len(results)} GPUs computed bit-identical results",
        "run dcgmi diag -r 4 on the node; RMA the GPU if it repeats" if odd else "",
        [f"GPU {record['local_rank']}: {record['digest'][:16]}" for record in results]))

    wrong = [record["local_rank"] for record in results if not record["allreduce_correct"]]
    busbw = min(record["allreduce_busbw_gbps"] for record in results)
    if wrong:
        checks.append(CheckResult("intranode_allreduce", Outcome.FAILED, f"all_reduce returned wrong sums on GPUs "
                                  f"{wrong}", "check NVLink and nvidia-fabricmanager"))
    elif on_gpu and gpus > 1 and busbw < limits["intranode_allreduce_busbw_gbps"]:
        checks.append(CheckResult("intranode_allreduce", Outcome.FAILED, f"intra-node all_reduce busbw {busbw:.0f} "
                                  f"GB/s, below {limits['intranode_allreduce_busbw_gbps']:g}",
                                  "check NVLink status and the fabric manager"))
    else:
        checks.append(CheckResult("intranode_allreduce", Outcome.OK if on_gpu else Outcome.SILENCED,
                                  f"all_reduce correct, busbw {busbw:.3g} GB/s" + ("" if on_gpu else
                                                                                  " (CPU backend: not judged)")))
    memory = min(record["memory_gbps"] for record in results)
    if on_gpu and memory < limits["memory_bandwidth_gbps"]:
        checks.append(CheckResult("memory_bandwidth", Outcome.FAILED, f"device memory copy {memory:.0f} GB/s, "
                                  f"below {limits['memory_bandwidth_gbps']:g}", "reset the GPU; RMA if it repeats"))
    else:
        checks.append(CheckResult("memory_bandwidth", Outcome.OK if on_gpu else Outcome.SILENCED,
                                  f"slowest device copy {memory:.3g} GB/s" + ("" if on_gpu else
                                                                             " (CPU backend: not judged)")))
    return checks


def run_node_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int,
                   port: int, evidence_dir: Path) -> list[NodeVerdict]:
    verdicts = []
    batch = max(1, loaded.spec.connection.forks)
    for start in range(0, len(nodes), batch):
        chunk = nodes[start:start + batch]
        gpus = loaded.spec.hardware[chunk[0].hardware].gpu.count
        result = launch(loaded, state_dir, chunk, test="node", nproc=gpus, params=node_params(loaded, seed),
                        deadline_s=NODE_DEADLINE_S, port=port + start, separate=True)
        _keep_logs(result, evidence_dir)
        for node, run in zip(chunk, result.nodes, strict=True):
            count = loaded.spec.hardware[node.hardware].gpu.count
            verdicts.append(_verdict(loaded, node.name, "node", judge_node(node, run, count, _limits(loaded, node))))
    return verdicts


def _keep_logs(result: LaunchResult, directory: Path) -> None:
    """Each node's agent stderr (stack dumps live there) beside the run's other evidence."""
    directory.mkdir(parents=True, exist_ok=True)
    for run in result.nodes:
        if run.command and run.command.stderr.strip():
            (directory / f"{result.test}-{run.node}.stderr").write_text(run.command.stderr)
