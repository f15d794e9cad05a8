"""A minimal, independent all_reduce bandwidth measurement, timed the way nccl-tests' ``all_reduce_perf`` does,
run in the same processes as ``fabric_tests.collectives``' own measurement so the two can be compared.

nccl-tests: ``warmup`` untimed calls, then ``iters`` calls issued back to back and timed as a whole after the
device is synchronised; the time per call is averaged over the ranks; algbw = bytes / time and
busbw = algbw · 2(n−1)/n. Here: plain blocking ``dist.all_reduce`` calls (no sequencing, no timeouts, no
correctness bookkeeping), so any overhead in our own path shows up as a difference. ``bench.busbw_accuracy``
launches it; each repeat measures ours then the reference at every size, interleaved, so drift of a shared
machine hits both alike.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from fabric_tests.collectives import Buffers, Sequencer, measure
from fabric_tests.devices import device_for, init_group, synchronize
from fabric_tests.protocol import emit


def reference_seconds(tensor: torch.Tensor, warmup: int, iters: int, device: torch.device) -> float:
    for _ in range(warmup):
        dist.all_reduce(tensor)
    synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    synchronize(device)
    return (time.perf_counter() - started) / iters


def run(context: dict[str, Any]) -> dict[str, Any]:
    params = context["params"]
    rank, world = context["rank"], context["nproc"] * context["nnodes"]
    device = device_for(context["local_rank"])
    init_group(context, rank, world, params["timeout_s"])
    sequencer = Sequencer(rank, params["timeout_s"])
    for repeat in range(params["repeats"]):
        for nbytes in params["sizes"]:
            buffers = Buffers("all_reduce", nbytes, rank, world, device)
            dist.barrier()
            seconds, correct, _ = measure(buffers, dist.group.WORLD, rank, sequencer, params, device,
                                          f"all/all_reduce/{buffers.nbytes}")
            emit("measurement", rank=rank, scope="all", op="all_reduce", bytes=buffers.nbytes, ranks=world,
                 time_us=round(seconds * 1e6, 3), correct=correct, repeat=repeat)
            tensor = torch.ones(buffers.nbytes // 4, dtype=torch.float32, device=device)
            mine = reference_seconds(tensor, params["warmup"], params["iters"], device)
            average = torch.tensor([mine], dtype=torch.float64)
            dist.all_reduce(average)  # nccl-tests reports the time averaged over the ranks
            if rank == 0:
                emit("reference", bytes=buffers.nbytes, ranks=world, repeat=repeat,
                     time_us=round(float(average.item()) / world * 1e6, 3))
    dist.barrier()
    dist.destroy_process_group()
    return {"device": str(device)}
