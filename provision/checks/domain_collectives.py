"""An NVLink domain's collectives judged (the ``nvlink_domain`` burn-in stage; issue 53, item 4), as pure functions
of what was measured and what NCCL said: on the controller, beside the catalogue's published figures (the tray's
own judgements, :mod:`provision.checks.nvlink_domain`, run on the node and know no catalogue)."""

from __future__ import annotations

from dataclasses import dataclass

from provision.catalog import DOMAIN_ALLREDUCE_BUSBW, GPU_MODELS
from provision.checks.nvlink_domain import _result
from provision.checks.outcome import CheckResult, Outcome
from provision.facts.nccl_debug import NcclDomain

#: Below this size a domain's all_reduce is still climbing with the message size: recorded, not judged (the
#: published figures are at 4-32 GB).
DOMAIN_FLOOR_MIN_BYTES = 1 << 30


@dataclass(frozen=True)
class DomainJudgement:
    """One domain's collectives: each tray's own finding (what its ranks' NCCL said of its GPUs), and the domain's
    (its busbw, whether NCCL fused the trays and ran NVLS), which no tray is blamed for."""

    trays: dict[str, CheckResult]
    slow: str  # why the domain as a whole is below its figure ("" when it is not)
    algorithm: str  # what NCCL ran: "MNNVL with NVLS", "MNNVL, NVLS off", "gloo (CPU workers)", ...
    reason: str  # the domain's figure against what it was judged by


def domain_figure(model: str, gpus: int, *, nvls: bool) -> tuple[float, str] | None:
    """What a domain of ``gpus`` GPUs of ``model`` reaches in an all_reduce, and where the figure comes from: with
    NVLS, the published figure of that domain size (else the lowest published for the model: a domain that shrank
    is held to no more than the largest ones reach); NVLS off, the one-tray ring figure (slower, not failed)."""
    published = DOMAIN_ALLREDUCE_BUSBW.get(model, {})
    if not nvls and model in GPU_MODELS:
        return GPU_MODELS[model].ring_allreduce_busbw, f"{model} ring all_reduce without NVLS (one tray)"
    if gpus in published:
        return published[gpus], f"{model}, {gpus}-GPU domain, NVLS"
    if published:
        size = min(published, key=published.__getitem__)
        return published[size], f"{model}, lowest published domain figure ({size} GPUs), NVLS"
    return None


def _tray_nccl(tray: str, said: NcclDomain | None) -> CheckResult:
    """One tray's GPUs as its ranks' NCCL saw them: each in a partition (state Completed, a non-zero clique and
    fabric UUID) and no health field TRUE. Nothing printed is unknown: silence is not health."""
    if said is None or not said.lines:
        return CheckResult("mnnvl", Outcome.UNKNOWN, f"{tray}'s ranks printed no NCCL MNNVL or communicator line",
                           "leave NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS INIT in burnin.nccl_env")
    problems = [f"GPU {gpu.bus_id}: in no NVLink partition (fabric UUID {gpu.fabric_uuid}, cliqueId "
                f"{gpu.clique_id:#x}, state {gpu.state})" for gpu in said.gpus if not gpu.in_partition]
    problems += [f"GPU {gpu.bus_id}: fabric health mask {gpu.health_mask:#x}: {', '.join(gpu.troubles)}"
                 for gpu in said.gpus if gpu.in_partition and gpu.troubles]
    if said.comms and said.mnnvl is False and said.gpus and not problems:
        problems.append(f"NCCL built the communicator without MNNVL on {tray} (MNNVL 0): its GPUs talked to the "
                        "domain over InfiniBand")
    return _result("mnnvl", problems, f"{len(said.gpus)} GPUs in the domain's partition, MNNVL on",
                   "read the tray's nvidia-smi -q Fabric block and nvidia-imex-ctl -N; check the IMEX channel "
                   "(/dev/nvidia-caps-imex-channels) the workers see")


def judge_domain_collectives(domain: str, busbw: dict[int, float], said: dict[str, NcclDomain | None], *,
                             model: str, gpus: int, on_gpu: bool, fraction: float,
                             peers_gbps: list[float] | None = None, peer_fraction: float = 0.4) -> DomainJudgement:
    """A domain's all_reduce over all its trays (``busbw``: bytes -> GB/s), and what each tray's NCCL said.

    On GPUs each tray is judged on its own lines (:func:`_tray_nccl`); the domain's busbw at the largest size (1 GiB
    and up) against ``fraction`` of :func:`domain_figure` (NVIDIA's cluster validation floors an NVL72's 700 at
    630). A domain whose trays NCCL did not fuse on any of them (MNNVL 0 everywhere) is the domain's: IMEX, the
    channel in the workers' view, or NCCL_MNNVL_ENABLE, never one tray. CPU workers have no design figure: the
    domain is judged against the other domains measured in the same stage (``peers_gbps``), below
    ``peer_fraction`` of the best of them slow; alone, recorded."""
    largest = max(busbw) if busbw else 0
    shown = f"all_reduce {busbw[largest]:g} GB/s at {largest} B over {gpus} ranks" if busbw else "no all_reduce"
    if not busbw:
        return DomainJudgement({}, f"{domain}: no all_reduce measured", "", "nothing measured")
    if not on_gpu:
        algorithm = "gloo (CPU workers): no NCCL algorithm to record"
        trays = {tray: CheckResult("mnnvl", Outcome.SILENCED, "gloo backend (no GPU): no MNNVL to check")
                 for tray in said}
        best = max(peers_gbps or [], default=0.0)
        if not best:
            return DomainJudgement(trays, "", algorithm, f"{shown} (CPU workers, no other domain: recorded)")
        if busbw[largest] < peer_fraction * best:
            return DomainJudgement(trays, f"{domain}: {shown}, below {peer_fraction:g} x {best:g} GB/s, the best "
                                   "other domain measured beside it", algorithm, shown)
        return DomainJudgement(trays, "", algorithm, f"{shown}, at least {peer_fraction:g} x {best:g} GB/s of the "
                               "best other domain")
    trays = {tray: _tray_nccl(tray, found) for tray, found in said.items()}
    heard = [found for found in said.values() if found is not None and found.comms]
    nvls = bool(heard) and all(found.nvls for found in heard)
    fused = bool(heard) and all(found.mnnvl for found in heard)
    algorithm = ("MNNVL" if fused else "no MNNVL") + (", NVLS" if nvls else ", NVLS off (slower, not failed)")
    if heard and not any(found.mnnvl for found in heard):
        trays = {tray: (CheckResult("mnnvl", Outcome.SILENCED, "MNNVL off on every tray: the domain's finding")
                        if check.outcome is Outcome.FAILED and "MNNVL 0" in check.message else check)
                 for tray, check in trays.items()}
        return DomainJudgement(trays, f"{domain}: NCCL built no tray's communicator over the NVLink domain (MNNVL 0 "
                               "everywhere): IMEX, the IMEX channel in the workers' view or NCCL_MNNVL_ENABLE, "
                               "not a tray", algorithm, shown)
    figure = domain_figure(model, gpus, nvls=nvls)
    if figure is None:
        return DomainJudgement(trays, "", algorithm, f"{shown} (no published figure for {model}: recorded)")
    floor = round(figure[0] * fraction, 1)
    if largest < DOMAIN_FLOOR_MIN_BYTES:
        return DomainJudgement(trays, "", algorithm, f"{shown} (below {DOMAIN_FLOOR_MIN_BYTES} B: not judged)")
    if busbw[largest] < floor:
        return DomainJudgement(trays, f"{domain}: {shown}, below {floor:g} GB/s ({fraction:g} x {figure[0]:g}, "
                               f"{figure[1]}) with {algorithm}", algorithm, shown)
    return DomainJudgement(trays, "", algorithm, f"{shown}, at least {floor:g} GB/s ({fraction:g} x {figure[0]:g}, "
                           f"{figure[1]})")
