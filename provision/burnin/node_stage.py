"""The ``node`` stage: each node alone, one worker per GPU (matmul, memory copy, the intra-node collectives),
judged per GPU against its node-mates and, on a GPU, against the model's figures and the fleet's baseline."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provision.burnin.launch import Launcher, NodeRun, launch
from provision.burnin.records import (
    keep_logs,
    unfinished_workers,
)
from provision.burnin.verdict import NodeVerdict, judge
from provision.checks import baseline
from provision.checks.node_stage import judge_node_records, on_gpu
from provision.checks.outcome import CheckResult, Outcome
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.spec.thresholds import stage_limits

NODE_DEADLINE_S = 300.0


def node_params(loaded: LoadedSpec, seed: int) -> dict[str, Any]:
    work = loaded.spec.burnin.workload
    return {"matmul_n": work.matmul_n, "matmul_iters": work.matmul_iters, "repeats": work.repeats,
            "memory_bytes": work.memory_bytes, "allreduce_bytes": work.allreduce_bytes,
            "allreduce_iters": work.iters, "seed": seed,
            "timeout_s": stage_limits(loaded, loaded.nodes[0])["collective_timeout_s"]}


def judge_node(run: NodeRun, gpus: int, limits: dict[str, float]) -> list[CheckResult]:
    problems = unfinished_workers(run, gpus)
    if problems:
        return [CheckResult("node_test", Outcome.FAILED, problems[0], "look at the worker's stack dump in the run "
                            "directory; reset the GPU, reboot if it repeats", problems)]
    return judge_node_records(run.of("result"), gpus, limits)


#: The baseline check of one node: its node, its figures and whether they were measured on GPUs.
AgainstBaseline = Callable[[ResolvedNode, baseline.NodeFigures, bool], CheckResult]


def _node_batches(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int,
                  evidence_dir: Path, batch: int, launcher: Launcher, hold_s: float = 0.0,
                  against: AgainstBaseline | None = None,
                  figures: dict[str, tuple[str, baseline.NodeFigures]] | None = None) -> dict[str, list[CheckResult]]:
    """Each node's checks; ``figures`` gets each node's figures and the device they were measured on ("gpu" or
    "cpu"), where its workers ran on what they were meant to (a CPU's figures of a GPU node are nobody's baseline);
    ``against`` judges them as one more check."""
    checks = {}
    records: list[dict[str, Any]] = []
    by_count: dict[int, list[ResolvedNode]] = {}
    for node in nodes:  # one launch starts the same number of workers on every node it takes
        by_count.setdefault(loaded.spec.hardware[node.hardware].gpu.count, []).append(node)
    for gpus, alike in by_count.items():
        for start in range(0, len(alike), batch):
            chunk = alike[start:start + batch]
            params = {**node_params(loaded, seed), **({"hold_s": hold_s} if hold_s > 0 else {})}
            result = launcher(loaded, state_dir, chunk, test="node", nproc=gpus, params=params,
                              deadline_s=NODE_DEADLINE_S + hold_s, separate=True)
            keep_logs(result, evidence_dir)
            for node, run in zip(chunk, result.nodes, strict=True):
                checks[node.name] = judge_node(run, gpus, stage_limits(loaded, node))
                measured = checks[node.name][0].check == "gpu_runtime" and len(checks[node.name]) > 1
                found = baseline.node_figures(run.of("result")) if measured else {}
                gpu = on_gpu(run.of("result"))
                if figures is not None and found:
                    figures[node.name] = ("gpu" if gpu else "cpu", found)
                if against is not None and found:
                    checks[node.name].append(against(node, found, gpu))
                records += [{"node": node.name, **{key: value for key, value in record.items() if key != "type"}}
                            for record in sorted(run.of("result"), key=lambda record: record["local_rank"])]
    # per rank: device, matmul dtype, shapes swept and best, TF32, TFLOPS, copy GB/s, all_reduce busbw
    evidence_dir.mkdir(parents=True, exist_ok=True)
    (evidence_dir / "node.json").write_text(json.dumps(records, indent=1, default=str))
    return checks


def run_node_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int,
                   evidence_dir: Path, launcher: Launcher = launch, hold_s: float = 0.0,
                   batch: int | None = None, against: AgainstBaseline | None = None) -> list[NodeVerdict]:
    """All nodes, ``connection.forks`` at a time (or ``batch``); a node that is slow on matmul, or whose test did not
    finish (workers that never met at rendezvous, or stopped), is run again, alone, before it fails: a slow or hung
    GPU is so every time, a busy machine is not. ``hold_s``: each GPU is kept under matmul that long (a soak's
    round, every node at once; the repeat does not hold). ``against``: the fleet's baseline check, confirmed alone
    like matmul; each verdict carries the figures it was judged on."""
    figures: dict[str, tuple[str, baseline.NodeFigures]] = {}
    checks = _node_batches(loaded, nodes, state_dir, seed=seed, evidence_dir=evidence_dir,
                           batch=max(1, batch or loaded.spec.connection.forks), launcher=launcher, hold_s=hold_s,
                           against=against, figures=figures)
    confirm = {"matmul", "node_test", "baseline"}
    again_nodes = [node for node in nodes if (failed := {result.check for result in checks[node.name]
                                                         if result.outcome is Outcome.FAILED}) and failed <= confirm]
    if again_nodes:
        for node in again_nodes:  # the repeat's figures stand for the node, or none do
            figures.pop(node.name, None)
        again = _node_batches(loaded, again_nodes, state_dir, seed=seed, evidence_dir=evidence_dir / "repeat",
                              batch=1, launcher=launcher, against=against, figures=figures)
        for node in again_nodes:
            first = next(result for result in checks[node.name] if result.outcome is Outcome.FAILED)
            second = next((result for result in again[node.name] if result.check == first.check), None)
            checks[node.name] = again[node.name]  # the repeat's result is the verdict, whatever it says
            if not any(result.outcome is Outcome.FAILED for result in again[node.name]):
                passed = second or again[node.name][0]
                passed.evidence = [f"first run: {first.message}; not confirmed alone", *passed.evidence]
            elif second is not None and second.outcome is Outcome.FAILED:
                second.message += " (confirmed on a repeat)"
    verdicts = [judge(loaded.spec.admission, node.name, "node", checks[node.name]) for node in nodes]
    for verdict in verdicts:
        device, found = figures.get(verdict.node, ("", {}))
        verdict.measured_on, verdict.figures = device, {name: list(items) for name, items in found.items()}
    return verdicts
