"""Single-node stage, one worker per GPU: matmul throughput, a bit-exact cross-check, memory bandwidth and
an intra-node all-reduce.

Every worker multiplies the *same* seeded matrices, so on healthy hardware every result is bit-identical; the
controller compares the digests across the node (silent data corruption shows as the odd one out) and each
GPU's throughput against its node-mates'. Timings are best-of-``repeats``: a slow GPU is slow every time,
while a hiccup of the machine is not.
"""

from __future__ import annotations

import hashlib
import time

import torch
import torch.distributed as dist

from fabric_tests.devices import compute_clock, device_for, init_group, synchronize


def _matmul(device: torch.device, n: int, iters: int, repeats: int, seed: int) -> tuple[float, str]:
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=generator).to(device)
    b = torch.randn(n, n, generator=generator).to(device)
    result = torch.matmul(a, b)  # warm-up, and the result whose digest is compared
    synchronize(device)
    digest = hashlib.sha256(result.cpu().numpy().tobytes()).hexdigest()
    best, clock = float("inf"), compute_clock(device)
    for _ in range(repeats):
        synchronize(device)
        started = clock()
        for _ in range(iters):
            torch.matmul(a, b)
        synchronize(device)
        best = min(best, clock() - started)
    return 2 * n**3 * iters / best / 1e12, digest


def _memory_bandwidth(device: torch.device, nbytes: int, repeats: int) -> float:
    source = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    best, clock = float("inf"), compute_clock(device)
    for _ in range(repeats):
        synchronize(device)
        started = clock()
        target.copy_(source)
        synchronize(device)
        best = min(best, clock() - started)
    return 2 * nbytes / best / 1e9  # read + write, GB/s


def _allreduce(device: torch.device, context: dict, nbytes: int, iters: int) -> tuple[float, bool]:
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


def run(context: dict) -> dict:
    params = context["params"]
    device = device_for(context["local_rank"])
    tflops, digest = _matmul(device, params["matmul_n"], params["matmul_iters"], params["repeats"], params["seed"])
    memory = _memory_bandwidth(device, params["memory_bytes"], params["repeats"])
    busbw, correct = 0.0, True
    if context["nproc"] > 1:
        init_group(context, context["local_rank"], context["nproc"], params["timeout_s"])
        busbw, correct = _allreduce(device, context, params["allreduce_bytes"], params["allreduce_iters"])
        dist.destroy_process_group()
    return {"device": str(device), "tflops": tflops, "digest": digest, "memory_gbps": memory,
            "allreduce_busbw_gbps": busbw, "allreduce_correct": correct}
