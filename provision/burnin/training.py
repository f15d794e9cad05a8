"""The ``training`` stage: the multi-node training smoke test (``fabric_tests.training``), judged per node.

Two launches: ``train`` (DDP, then FSDP with a sharded checkpoint half-way) and ``resume`` (fresh processes load
the checkpoint and finish the run). A node passes when each of its ranks finished both, its losses fell under DDP
and under FSDP, its step times stayed within the spread the spec allows, and the resumed run matched the first
bit for bit (losses and final weight shard). A rank that stops is named by the watchdog and its node taken out;
the others run again, since a checkpoint is only comparable within one world. A launch that fails on every node
at once is ours until it repeats (seen on a loaded machine: every rank timed out while one was late loading the
checkpoint): the whole attempt runs once more, and only a second failure everywhere stops the burn-in as systemic.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from provision.burnin.launch import Launcher, LaunchResult, NodeRun, launch
from provision.burnin.records import (
    FailedEverywhere,
    culprits,
    keep_logs,
    lost_nodes,
    raised_errors,
    unfinished_workers,
    worker_problems,
)
from provision.burnin.verdict import NodeVerdict, judge
from provision.checks.node_stage import on_gpu
from provision.checks.outcome import CheckResult, Outcome
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.spec.thresholds import stage_limits

#: Steps left out of the spread: the first ones allocate and warm caches.
WARMUP_STEPS = 2
#: The last steps' mean loss must be below this share of the first steps' (the loss "falls").
LOSS_FALL_RATIO = 0.9
#: A step this many times the median is a spike; spikes at a fixed interval make slowness "periodic".
SPIKE_FACTOR = 2.0
#: The last third of the steps taking this many times the first third is slowness that grows.
GROWTH_FACTOR = 1.5
MAX_ATTEMPTS = 3
MODES = ("ddp", "fsdp")
#: The least a training rank waits on its peers in one operation, seconds (the default collective timeout).
TRAINING_WAIT_FLOOR_S = 60.0


def training_wait(collective_timeout_s: float) -> float:
    """How long a training rank waits on its peers in one operation: the spec's collective timeout, but never
    under :data:`TRAINING_WAIT_FLOOR_S`. A training operation is not one timed collective: the first one after a
    launch waits for every rank to build its model, and the checkpoint's save and load wait for every rank's
    writes and reads of shared storage. Seen on this machine with the example's 10 s (32 ranks on two cores): one
    rank late loading the checkpoint made every other rank time out, twice in a row, and a healthy delivery
    stopped as systemic. A rank that really hangs is still found: the launch's deadline kills it, and the
    watchdog names it."""
    return max(TRAINING_WAIT_FLOOR_S, collective_timeout_s)


def training_params(loaded: LoadedSpec, *, seed: int, phase: str, checkpoint_dir: str) -> dict[str, Any]:
    work = loaded.spec.burnin.workload
    return {"phase": phase, "seed": seed % 2**31, "steps": work.training_steps,
            "checkpoint_step": work.training_steps // 2, "checkpoint_dir": checkpoint_dir,
            "vocab": 64, "width": work.training_width, "heads": 4, "layers": work.training_layers,
            "length": work.training_length, "batch": work.training_batch, "lr": 3e-3, "gc_every": 10,
            "timeout_s": training_wait(stage_limits(loaded, loaded.nodes[0])["collective_timeout_s"])}


def growth(times: list[float]) -> float:
    """How much slower the last third of the steady steps ran than the first third (1.0: not at all)."""
    steady = times[WARMUP_STEPS:]
    if len(steady) < 3:
        return 1.0
    third = max(1, len(steady) // 3)
    early, late = statistics.median(steady[:third]), statistics.median(steady[-third:])
    return late / early if early > 0 else 1.0


def shared_growth(runs: list[NodeRun]) -> dict[str, dict[str, float]]:
    """Per node and mode, how much the *other* nodes of the same launch slowed down (the lower median of their
    GPUs).

    Growth every node shares is not one node's: the machine or the fabric changed under the whole launch (on a
    GPU a DDP step also waits for the slowest rank, so one throttling GPU slows them all; in CI another suite
    started beside this one). A node is judged by its growth beyond the others'; alone, against none (1.0)."""
    per_node = {run.node: {mode: [growth(record[f"{mode}_step_s"]) for record in run.of("result")]
                           for mode in MODES} for run in runs}

    def others(node: str, mode: str) -> float:
        values = [value for other, modes in per_node.items() if other != node for value in modes[mode]]
        return statistics.median_low(values) if values else 1.0  # two nodes of three growing: not excused

    return {node: {mode: others(node, mode) for mode in MODES} for node in per_node}


#: A rhythm: slow steps on at least this share of one interval's slots, and on at most a third of that share (and
#: at most RHYTHM_OFF_MAX) of the other steps; seen at least RHYTHM_MIN_HITS times.
RHYTHM_ON_MIN = 0.75
RHYTHM_OFF_MAX = 0.2
RHYTHM_MIN_HITS = 4


def rhythm(spikes: list[int], length: int) -> int | None:
    """The interval at which slow steps recur, if they do: the shortest ``p >= 2`` and phase whose slots
    (``phase, phase + p, ...``) are slow at least ``RHYTHM_ON_MIN`` of the time while the other steps are rarely
    slow. A background job every 5 steps stays a rhythm when the machine adds a slow step of its own between two
    of its beats or hides one of them (seen on this machine: the other suite's load broke an exact-gaps rule and
    admitted the node); consecutive slow steps (a burst) are no rhythm (``p >= 2``), nor are slow steps spread
    evenly over a loaded machine (the off-beat share)."""
    slow = set(spikes)
    for period in range(2, length // RHYTHM_MIN_HITS + 1):
        for phase in range(period):
            slots = range(phase, length, period)
            hits = sum(1 for index in slots if index in slow)
            if hits < RHYTHM_MIN_HITS or hits < RHYTHM_ON_MIN * len(slots):
                continue
            off_rate = (len(slow) - hits) / max(1, length - len(slots))
            if off_rate <= RHYTHM_OFF_MAX and off_rate * 3 <= hits / len(slots):
                return period
    return None


def step_time_shape(times: list[float], shared: float = 1.0) -> tuple[float, str]:
    """Spread of per-step times and what the slowness looks like, warm-up left out.

    The spread is robust (1.4826·MAD / median): one step slowed by the machine is noise, not a slow node. What a
    robust spread would hide — slow steps at a fixed interval, steps that keep getting slower — is named by the
    shape, and :func:`judge_training` fails those whatever the spread. Growth counts beyond ``shared``, what the
    other nodes of the launch grew (:func:`shared_growth`)."""
    steady = times[WARMUP_STEPS:]
    if len(steady) < 3:
        return 0.0, "too few steps to judge"
    median = statistics.median(steady)
    if median <= 0:
        return 0.0, "steady"
    spread = 1.4826 * statistics.median(abs(value - median) for value in steady) / median
    spikes = [index for index, value in enumerate(steady) if value > SPIKE_FACTOR * median]
    grew = growth(times)
    interval = rhythm(spikes, len(steady))
    if interval is not None:
        return spread, f"periodic: a step over {SPIKE_FACTOR:g}x the median every {interval} steps"
    if grew > GROWTH_FACTOR * max(1.0, shared):
        beside = f" (the other nodes' {shared:.1f}x)" if shared > 1.0 else ""
        return spread, f"growing: the last steps take {grew:.1f}x the first{beside}"
    if spikes:
        return spread, f"erratic: {len(spikes)} step(s) over {SPIKE_FACTOR:g}x the median"
    return spread, "steady"


def _falls(losses: list[float]) -> bool:
    window = max(1, min(5, len(losses) // 4))
    return statistics.fmean(losses[-window:]) < LOSS_FALL_RATIO * statistics.fmean(losses[:window])


def judge_step_time(records: dict[int, dict[str, Any]], limit_cv: float,
                    shared: dict[str, float] | None = None) -> CheckResult:
    """Per GPU and mode: a periodic shape fails, so does growth beyond the other nodes' (``shared``), and a wide
    spread on a GPU."""
    uneven = []
    for local, record in sorted(records.items()):
        for mode in MODES:
            spread, shape = step_time_shape(record[f"{mode}_step_s"], (shared or {}).get(mode, 1.0))
            if shape.startswith(("periodic", "growing")):
                uneven.append(f"GPU {local} {mode}: step time {shape}")
            elif spread > limit_cv and record["device"].startswith("cuda"):  # CPU time of ms-long steps on a
                # shared CPU spreads by 0.3 with nothing wrong (seen in CI): on gloo only the shape is judged
                uneven.append(f"GPU {local} {mode}: step time spread {spread:.2f} > {limit_cv:g} ({shape})")
    # the most specific finding leads the message: a rhythm names its cause, growth and spread are often the machine
    uneven.sort(key=lambda line: 0 if "periodic" in line else 1 if "growing" in line else 2)
    return CheckResult("step_time", Outcome.FAILED if uneven else Outcome.OK,
                       uneven[0] if uneven else f"step times within a spread of {limit_cv:g}",
                       "a periodic slow step points at a background job or the GC; a growing one at "
                       "thermals or memory; check the node's clocks and its processes" if uneven else "", uneven)


def judge_training(trained: NodeRun, resumed: NodeRun, nproc: int, limit_cv: float,
                   shared: dict[str, float] | None = None) -> list[CheckResult]:
    for run, what in ((trained, "training"), (resumed, "resume from the checkpoint")):
        problems = unfinished_workers(run, nproc)
        if problems:
            return [CheckResult("training", Outcome.FAILED, f"{what}: {problems[0]}", "look at the worker's stack "
                                "dump in the run directory", problems)]
    first = {record["local_rank"]: record for record in trained.of("result")}
    second = {record["local_rank"]: record for record in resumed.of("result")}
    checks = []

    flat = [f"GPU {local} {mode}: {record[f'{mode}_losses'][0]:.4g} -> {record[f'{mode}_losses'][-1]:.4g}"
            for local, record in sorted(first.items()) for mode in ("ddp", "fsdp")
            if not _falls(record[f"{mode}_losses"])]
    checks.append(CheckResult("loss", Outcome.FAILED if flat else Outcome.OK,
                              f"the loss did not fall ({flat[0]})" if flat else "the loss fell under DDP and FSDP "
                              "on every GPU", "compare the GPU's results in the node stage; check its memory (dcgmi "
                              "diag -r 3)" if flat else "", flat))

    checks.append(judge_step_time(first, limit_cv, shared))

    diverged = [f"GPU {local}: losses after the checkpoint {first[local]['tail_losses'][:3]} then "
                f"{second[local]['tail_losses'][:3]} on resume" if first[local]["tail_digest"] !=
                second[local]["tail_digest"] else f"GPU {local}: final weight shard differs after resume"
                for local in sorted(first) if local in second and (
                    first[local]["tail_digest"] != second[local]["tail_digest"]
                    or first[local]["shard_digest"] != second[local]["shard_digest"])]
    checks.append(CheckResult(
        "checkpoint_resume", Outcome.FAILED if diverged else Outcome.OK,
        f"the run resumed from its sharded checkpoint did not continue bit-exactly ({diverged[0]})" if diverged
        else "resumed from the sharded checkpoint bit-exactly (losses and weights)",
        "check the checkpoint storage and the GPU's memory" if diverged else "", diverged))
    return checks


def training_report(trained: LaunchResult) -> list[dict[str, Any]]:
    """Per rank: loss first and last, step time median, spread and shape, for DDP and FSDP."""
    rows = []
    shared = shared_growth(trained.nodes)
    for run in trained.nodes:
        for record in sorted(run.of("result"), key=lambda record: record["local_rank"]):
            row: dict[str, Any] = {"node": run.node, "gpu": record["local_rank"], "device": record["device"],
                                   "determinism": record.get("determinism"),
                                   "checkpoint_dir_shared": record.get("checkpoint_dir_shared")}
            for mode in MODES:
                spread, shape = step_time_shape(record[f"{mode}_step_s"], shared[run.node][mode])
                row[mode] = {"loss_first": record[f"{mode}_losses"][0], "loss_last": record[f"{mode}_losses"][-1],
                             "step_s_median": statistics.median(record[f"{mode}_step_s"]),
                             "step_time_spread": round(spread, 3), "shape": shape}
            rows.append(row)
    return rows


def _incomplete(problems: dict[str, list[str]], nodes: int, *, phase: str,
                attempt: int) -> dict[str, list[CheckResult]]:
    """Of the nodes whose workers raised, errored or gave no result, those at fault (the others' timeouts are its
    consequence: they train again without it); every node at once raises :class:`FailedEverywhere`."""
    if not problems:
        return {}
    causes = culprits(problems, nodes, stage="training", when=f"the {phase} launch of attempt {attempt}")
    return {host: [CheckResult("training", Outcome.FAILED, f"{phase}: {lines[0]}", "look at the worker's error "
                               "and stack dump in the run directory", lines[:8])] for host, lines in causes.items()}


def _stopped(result: LaunchResult, nodes: int, params: dict[str, Any], *, phase: str,
             attempt: int) -> dict[str, list[CheckResult]]:
    """The nodes one launch stopped at, with their failed results: those that raised, were lost, or whose workers
    gave nothing (:func:`_incomplete`); every node at once raises :class:`FailedEverywhere`."""
    return _incomplete(raised_errors(result), nodes, phase=phase, attempt=attempt) or lost_nodes(
        result, check="training", doing=f"during the {phase} launch", timeout_s=params["timeout_s"],
        when=f"the {phase} launch") or _incomplete(worker_problems(result), nodes, phase=phase, attempt=attempt)


def run_training_stage(loaded: LoadedSpec, nodes: list[ResolvedNode], state_dir: Path, *, seed: int, port: int,
                       run_id: str, evidence_dir: Path, launcher: Launcher = launch) -> list[NodeVerdict]:
    burnin = loaded.spec.burnin
    nproc = burnin.ranks_per_node or loaded.spec.hardware[nodes[0].hardware].gpu.count
    limits = stage_limits(loaded, nodes[0])
    checkpoint_dir = f"{burnin.workload.checkpoint_dir.rstrip('/')}/{run_id}"
    deadline = max(180.0, 10 * limits["collective_timeout_s"], 3 * training_wait(limits["collective_timeout_s"]))
    failed: dict[str, list[CheckResult]] = {}
    remaining = list(nodes)
    judged: dict[str, list[CheckResult]] = {}
    steps: dict[str, tuple[str, dict[str, list[tuple[str, float]]]]] = {}
    retried = False
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if not remaining:  # one node left still trains: DDP and FSDP across its own GPUs
            break
        launches: list[LaunchResult] = []
        for phase in ("train", "resume"):
            params = training_params(loaded, seed=seed, phase=phase, checkpoint_dir=f"{checkpoint_dir}-{attempt}")
            result = launcher(loaded, state_dir, remaining, test="training", nproc=nproc, params=params,
                            deadline_s=deadline, port=port + 2 * attempt + len(launches))
            keep_logs(result, evidence_dir / f"training-attempt{attempt}-{phase}")
            launches.append(result)
            try:
                stopped = _stopped(result, len(remaining), params, phase=phase, attempt=attempt)
            except FailedEverywhere:
                if retried or attempt == MAX_ATTEMPTS:
                    raise
                retried = True  # once, as ours (a rendezvous or a checkpoint load late under load): all again
                break
            if stopped:
                for host, results in stopped.items():
                    failed.setdefault(host, []).extend(results)
                break
        else:
            shared = shared_growth(launches[0].nodes)
            for trained, resumed in zip(launches[0].nodes, launches[1].nodes, strict=True):
                judged[trained.node] = judge_training(trained, resumed, nproc, limits["step_time_cv"],
                                                      shared[trained.node])
                steps[trained.node] = step_figures(trained)
            evidence_dir.mkdir(parents=True, exist_ok=True)
            (evidence_dir / "training.json").write_text(json.dumps(training_report(launches[0]), indent=2))
            break
        remaining = [node for node in remaining if node.name not in failed]
    suspects = [node for node in nodes if node.name not in failed and node.name in judged
                and {result.check for result in judged[node.name] if result.outcome is Outcome.FAILED} == {"step_time"}]
    if suspects:
        judged.update(_step_time_again(loaded, suspects, state_dir, judged, seed=seed, port=port + 2 * MAX_ATTEMPTS + 2,
                                       checkpoint_dir=f"{checkpoint_dir}-repeat", deadline_s=deadline,
                                       evidence_dir=evidence_dir, launcher=launcher))
    verdicts = []
    for node in nodes:
        results = failed.get(node.name) or judged.get(node.name) or [CheckResult(
            "training", Outcome.UNKNOWN, "the training test never completed after removing the nodes that stopped it",
            "re-run the burn-in")]
        verdicts.append(judge(loaded.spec.admission, node.name, "training", results))
        if node.name in steps and node.name not in failed:
            verdicts[-1].measured_on, verdicts[-1].figures = steps[node.name]
    return verdicts


def step_figures(run: NodeRun) -> tuple[str, dict[str, list[tuple[str, float]]]]:
    """A node's DDP step time per GPU (the median step, seconds) for the fleet's baseline, and where measured."""
    records = sorted(run.of("result"), key=lambda record: record["local_rank"])
    steps = [(f"GPU {record['local_rank']}", statistics.median(record["ddp_step_s"])) for record in records
             if record.get("ddp_step_s")]
    return "gpu" if on_gpu(records) else "cpu", {"step_s": steps}


def _step_time_again(loaded: LoadedSpec, suspects: list[ResolvedNode], state_dir: Path,
                     judged: dict[str, list[CheckResult]], *, seed: int, port: int, checkpoint_dir: str,
                     deadline_s: float, evidence_dir: Path, launcher: Launcher) -> dict[str, list[CheckResult]]:
    """Nodes whose only failure is the shape of their step times train once more, together and without the
    rest, before they fail: a node that gets slower, or slow in a rhythm, is so every time, while a burst of
    load elsewhere on the machine (seen in CI: 1.5x "growth" while another test ran) is not. The repeat's
    step times are the verdict; the first run's stay as evidence. A repeat that cannot finish changes nothing."""
    nproc = loaded.spec.burnin.ranks_per_node or loaded.spec.hardware[suspects[0].hardware].gpu.count
    limit_cv = stage_limits(loaded, suspects[0])["step_time_cv"]
    # no checkpoint: the repeat judges step times only, and a saved one would outlive it
    params = {**training_params(loaded, seed=seed, phase="train", checkpoint_dir=checkpoint_dir), "checkpoint_step": -1}
    result = launcher(loaded, state_dir, suspects, test="training", nproc=nproc, params=params, deadline_s=deadline_s,
                      port=port)
    keep_logs(result, evidence_dir / "training-repeat")
    if lost_nodes(result, check="training", doing="during the repeat", timeout_s=params["timeout_s"],
                  when="the repeat"):
        return {}
    updated = {}
    finished = [run for run in result.nodes if not unfinished_workers(run, nproc)]
    shared = shared_growth(finished)
    for run in finished:
        first = next(check for check in judged[run.node] if check.check == "step_time")
        again = judge_step_time({record["local_rank"]: record for record in run.of("result")}, limit_cv,
                                shared[run.node])
        if again.outcome is Outcome.FAILED:
            again.message += " (confirmed on a repeat)"
        else:
            again.evidence = [f"first run: {first.message}; not confirmed on a repeat", *first.evidence]
        updated[run.node] = [again if check.check == "step_time" else check for check in judged[run.node]]
    return updated
