"""Single-node stage, one worker per GPU: matmul throughput, a bit-exact cross-check, memory bandwidth and
an intra-node all-reduce.

Every worker multiplies the *same* seeded matrices, so on healthy hardware every result is bit-identical; the
controller compares the digests across the node (silent data corruption shows as the odd one out) and each
GPU's throughput against its node-mates'.

The matmul is timed over ``repeats`` windows **in lockstep rounds**: the node's workers agree to go on before
every ten windows (and so agree when a soak's held load ends), so the windows of every GPU of the node are measured
under the same conditions: the node's power and temperature; on CPU workers sharing a core, whether the core's
sibling was busy, which halves a window's speed. A GPU's speed is the **mean of its windows less the slowest tenth**
(MAMF's mean, without the windows an interruption slowed; an interruption never speeds one up). Measured on CPU
workers beside another test module (``tests/data/windows``): timed each on its own, the 10% quantile put a healthy
worker at 0.85 of its mates (about a tenth of the windows came at the fast speed, so the quantile fell between the
two speeds, in a different place per worker); in lockstep, the best window put one at 0.58 (one lucky window). The
mean moves by a window's share when a window changes. A round of ten, not a barrier per window: a worker woken
first from every barrier ran 3-7% slow on a shared core (its window cut into by its mates' wake-ups).

On a GPU the matmul runs in **bf16** (the dtype of the catalog's peak; TF32 off so no other path is taken) over a
short MAMF-style sweep of square shapes — ``matmul_n`` halved, as given and doubled, while three of them fit in a
quarter of the GPU's memory — and the best shape counts: a GPU reaches its peak only at shapes that fill it.
The dtype, the shapes swept and the best one are in every record. On the CPU the matmul stays fp32 at
``matmul_n``, compared against the node-mates only.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import torch
import torch.distributed as dist

from fabric_tests.devices import compute_clock, cuda_runtime, device_for, init_group, synchronize
from fabric_tests.windows import ROUND, typical_window


def matmul_plan(device_type: str, n: int, free_bytes: int | None = None) -> tuple[torch.dtype, list[int]]:
    """The dtype and square shapes a device's matmul is measured with (pure: what the records say)."""
    if device_type != "cuda":
        return torch.float32, [n]
    shapes = sorted({max(256, n // 2 // 256 * 256), n, n * 2})
    if free_bytes is not None:  # three bf16 matrices of a shape must fit in a quarter of the free memory
        shapes = [size for size in shapes if 3 * 2 * size * size <= free_bytes // 4] or shapes[:1]
    return torch.bfloat16, shapes


def _time_matmul(device: torch.device, a: torch.Tensor, b: torch.Tensor, iters: int, repeats: int,
                 lockstep: bool = False, until: float | None = None) -> list[float]:
    """Each window's time for ``iters`` matmuls, by the device's clock: ``repeats`` windows, or with ``until`` (a
    ``time.monotonic()``) rounds of windows until it has passed, at least one. With ``lockstep`` every round of
    :data:`ROUND` windows starts when the node's group has agreed to go on (an all-reduce of each worker's wish:
    the barrier and the agreement on when to stop, so no worker waits at a barrier its mates have left)."""
    times: list[float] = []
    clock = compute_clock(device)
    while True:
        if len(times) % ROUND == 0:
            wish = len(times) < repeats if until is None else not times or time.monotonic() < until
            if lockstep:
                vote = torch.tensor([int(wish)], dtype=torch.int32, device=device)
                dist.all_reduce(vote, op=dist.ReduceOp.MIN)
                wish = bool(vote.item())
            if not wish:
                return times
        elif until is None and len(times) >= repeats:
            return times
        synchronize(device)
        started, wall = clock(), time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        synchronize(device)
        times.append(_elapsed(clock() - started, wall))


def _matmul(device: torch.device, n: int, iters: int, repeats: int, seed: int, hold_s: float = 0.0,
            lockstep: bool = False) -> dict[str, Any]:
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    dtype, shapes = matmul_plan(device.type, n, free)
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    result = torch.matmul(a, b)  # warm-up, and the result whose digest is compared
    synchronize(device)
    digest = hashlib.sha256(result.float().cpu().numpy().tobytes()).hexdigest()
    by_shape = {}
    for size in shapes:
        # each shape timed on operands of that shape: the work counted is 2·size³ a product (the first shape of the
        # sweep is smaller than n, so operands carried over from it would be counted 8 times over at n)
        x, y = (a, b) if size == n else (
            torch.randn(size, size, generator=generator).to(device=device, dtype=dtype),
            torch.randn(size, size, generator=generator).to(device=device, dtype=dtype))
        torch.matmul(x, y)  # the shape's warm-up (cuBLAS picks its kernel on the first call)
        windows = _time_matmul(device, x, y, iters, repeats, lockstep)
        by_shape[size] = 2 * size**3 * iters / typical_window(windows) / 1e12
    best_n = max(by_shape, key=lambda size: by_shape[size])
    if hold_s > 0:  # a soak's round: the GPU kept under matmul at its best shape for the time asked, its speed that
        # of the held windows (a clock that sagged during the round shows in this round, not the next)
        a = torch.randn(best_n, best_n, generator=generator).to(device=device, dtype=dtype)
        b = torch.randn(best_n, best_n, generator=generator).to(device=device, dtype=dtype)
        held = _time_matmul(device, a, b, iters, 0, lockstep, until=time.monotonic() + hold_s)
        by_shape[best_n] = 2 * best_n**3 * iters / typical_window(held) / 1e12
    return {"tflops": by_shape[best_n], "digest": digest, "dtype": str(dtype).removeprefix("torch."),
            "shapes": shapes, "best_n": best_n, "tflops_by_n": {str(size): value for size, value in by_shape.items()},
            "tf32": bool(device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32)}


def _memory_bandwidth(device: torch.device, nbytes: int, repeats: int) -> float:
    source = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    best, clock = float("inf"), compute_clock(device)
    for _ in range(repeats):
        synchronize(device)
        started, wall = clock(), time.perf_counter()
        target.copy_(source)
        synchronize(device)
        best = min(best, _elapsed(clock() - started, wall))
    return 2 * nbytes / best / 1e9  # read + write, GB/s


def _peer_copy(device: torch.device, nproc: int, nbytes: int, repeats: int) -> tuple[float | None, int | None]:
    """GB/s of a copy from this GPU's memory to its neighbour's (the next local rank's), every GPU of the node
    copying at once, each to the next: over NVLink on an HGX board or a tray, one direction of each link pair in
    use. The fastest of ``repeats``. CPU workers have no peer device: (None, None)."""
    if device.type != "cuda" or nproc < 2:
        return None, None
    peer = torch.device("cuda", (device.index + 1) % nproc)
    source = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty(nbytes // 4, dtype=torch.float32, device=peer)
    target.copy_(source)  # the first copy opens the peer mapping: not timed
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        synchronize(peer)
        dist.barrier()  # every pair copies at the same time, as a collective loads them
        started = time.perf_counter()
        target.copy_(source)
        synchronize(device)
        synchronize(peer)
        best = min(best, time.perf_counter() - started)
    return nbytes / best / 1e9, peer.index


def _elapsed(measured: float, wall_started: float) -> float:
    """A window's time by the device's clock, or by the wall clock when that clock saw no time pass: on CPU
    workers the calling thread's CPU time can stay still across work torch spread over its intra-op threads (a
    copy's window read 0.0 and the worker died of a ZeroDivisionError, its node failed ``node_test`` on our own
    error: a clean clone of session 35). The wall clock is never still over real work."""
    return measured if measured > 0 else time.perf_counter() - wall_started


def _allreduce(device: torch.device, context: dict[str, Any], nbytes: int, iters: int) -> tuple[float, bool]:
    n = context["nproc"]
    tensor = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    tensor.fill_(context["local_rank"] + 1)
    dist.all_reduce(tensor)
    correct = bool(torch.all(tensor == n * (n + 1) / 2))
    dist.barrier()
    synchronize(device)
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    synchronize(device)
    elapsed = (time.perf_counter() - started) / iters
    return nbytes / elapsed / 1e9 * 2 * (n - 1) / n, correct  # busbw, as nccl-tests computes it


def run(context: dict[str, Any]) -> dict[str, Any]:
    params = context["params"]
    device = device_for(context["local_rank"])
    together = context["nproc"] > 1  # the node's group: the matmul's lockstep, then the intra-node all-reduce
    if together:
        init_group(context, context["local_rank"], context["nproc"], params["timeout_s"])
    matmul = _matmul(device, params["matmul_n"], params["matmul_iters"], params["repeats"], params["seed"],
                     float(params.get("hold_s", 0.0)), lockstep=together)
    memory = _memory_bandwidth(device, params["memory_bytes"], params["repeats"])
    busbw, correct = 0.0, True
    peer_gbps, peer = None, None
    if together:
        busbw, correct = _allreduce(device, context, params["allreduce_bytes"], params["allreduce_iters"])
        peer_gbps, peer = _peer_copy(device, context["nproc"], params["memory_bytes"], params["repeats"])
        dist.destroy_process_group()
    return {"device": str(device), **matmul, "memory_gbps": memory, "allreduce_busbw_gbps": busbw,
            "allreduce_correct": correct, "peer_copy_gbps": peer_gbps, "peer": peer, **cuda_runtime()}
