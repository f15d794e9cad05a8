"""Multi-node collectives: all_reduce, all_gather, reduce_scatter and all_to_all over a size sweep, on the
whole world and on each rail (the ranks with the same local GPU index, as nccl-tests' ``SPLIT="MOD n"``).

Each measurement fills the buffers so the right answer is known, checks it after the first call, and times
``iters`` calls. Every call is *posted* asynchronously and logged with its sequence number before it is waited
on with a short timeout: when a rank stops, its peers have posted a call it never did, and that is how the
controller names it. Time spent outside collectives is reported per rank, because in a synchronous
collective a straggler is the rank the others wait for, not the one that waits. ``params["scopes"]`` picks
``all``, ``rails`` or both (the default); a slow rail is located by launches that measure only the rails.
"""

from __future__ import annotations

import datetime
import time
from typing import Any, cast

import torch
import torch.distributed as dist

from fabric_tests.devices import device_for, init_group, synchronize
from fabric_tests.protocol import emit


class Buffers:
    """Input, output and the expected output of one operation at one size, for one rank of a group."""

    def __init__(self, op: str, nbytes: int, rank: int, n: int, device: torch.device) -> None:
        count = max(n, nbytes // 4 // n * n)  # a multiple of the group size, as reduce_scatter needs
        self.op, self.nbytes = op, count * 4
        if op == "all_reduce":
            self.input = torch.full((count,), float(rank + 1), device=device)
            self.output = self.input
            self.expected = torch.full((count,), n * (n + 1) / 2, device=device)
        elif op == "all_gather":
            part = count // n
            self.input = torch.full((part,), float(rank + 1), device=device)
            self.output = torch.empty(count, device=device)
            self.expected = torch.arange(1, n + 1, device=device, dtype=torch.float32).repeat_interleave(part)
        elif op == "reduce_scatter":
            self.input = torch.full((count,), float(rank + 1), device=device)
            self.output = torch.empty(count // n, device=device)
            self.expected = torch.full((count // n,), n * (n + 1) / 2, device=device)
        elif op == "all_to_all":
            part = count // n
            self.input = (torch.arange(n, device=device, dtype=torch.float32) + rank * 1000).repeat_interleave(part)
            self.output = torch.empty(count, device=device)
            self.expected = (torch.arange(n, device=device, dtype=torch.float32) * 1000 + rank).repeat_interleave(
                part)
        else:
            raise ValueError(f"unknown collective {op}")

    def reset(self, rank: int) -> None:
        if self.op == "all_reduce":
            self.input.fill_(float(rank + 1))

    def post(self, group: dist.ProcessGroup | None) -> dist.Work:
        if self.op == "all_reduce":
            return cast("dist.Work", dist.all_reduce(self.input, group=group, async_op=True))
        if self.op == "all_gather":
            return cast("dist.Work", dist.all_gather_into_tensor(self.output, self.input, group=group, async_op=True))
        if self.op == "reduce_scatter":
            return cast("dist.Work", dist.reduce_scatter_tensor(self.output, self.input, group=group, async_op=True))
        return cast("dist.Work", dist.all_to_all_single(self.output, self.input, group=group, async_op=True))

    def correct(self) -> bool:
        return bool(torch.equal(self.output, self.expected))


class Sequencer:
    """Posts every call, logs its sequence number, waits with the test's timeout, and counts every moment this rank
    spent blocked on its peers as waiting: in ``wait()`` on gloo, in the device synchronise on NCCL (where ``wait()``
    only orders the stream and returns at once). What is left is the rank's own time."""

    def __init__(self, rank: int, timeout_s: float) -> None:
        self.rank, self.seq = rank, 0
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.waiting_s = 0.0

    def call(self, buffers: Buffers, group: dist.ProcessGroup | None, label: str) -> None:
        self.seq += 1
        work = buffers.post(group)
        emit("posted", rank=self.rank, seq=self.seq, op=label)
        started = time.perf_counter()
        work.wait(self.timeout)
        self.waiting_s += time.perf_counter() - started

    def settle(self, device: torch.device) -> None:
        """Block until every posted call completed (the device synchronise), counted as waiting."""
        started = time.perf_counter()
        synchronize(device)
        self.waiting_s += time.perf_counter() - started


def measure(buffers: Buffers, group: dist.ProcessGroup | None, group_rank: int, sequencer: Sequencer,
            params: dict[str, Any], device: torch.device, label: str) -> tuple[float, bool, float]:
    """One operation at one size, the nccl-tests way: a checked first call, ``warmup`` calls, then ``iters``
    calls back to back timed as a whole. Seconds per call, whether the first result was right, and the time this
    rank spent outside the collectives (its own slowness)."""
    sequencer.call(buffers, group, label)
    sequencer.settle(device)
    correct = buffers.correct()
    for _ in range(params["warmup"]):
        buffers.reset(group_rank)
        sequencer.call(buffers, group, label)
    sequencer.settle(device)
    dist.barrier(group=group)  # as nccl-tests does: otherwise the first rank in starts its clock on the others' lag
    waited_before = sequencer.waiting_s
    started = time.perf_counter()
    for _ in range(params["iters"]):
        sequencer.call(buffers, group, label)
    sequencer.settle(device)
    elapsed = time.perf_counter() - started
    return elapsed / params["iters"], correct, elapsed - (sequencer.waiting_s - waited_before)


def run(context: dict[str, Any]) -> dict[str, Any]:
    params = context["params"]
    rank, nproc, nnodes = context["rank"], context["nproc"], context["nnodes"]
    world = nproc * nnodes
    device = device_for(context["local_rank"])
    init_group(context, rank, world, params["timeout_s"])
    rails = [dist.new_group([node * nproc + lane for node in range(nnodes)]) for lane in range(nproc)]
    wanted = params.get("scopes", ["all", "rails"])  # a rail check measures only the rails
    scopes: list[tuple[str, dist.ProcessGroup | None, int]] = []
    if "all" in wanted:
        scopes.append(("all", dist.group.WORLD, world))
    if "rails" in wanted and nnodes > 1 and nproc > 1:
        scopes.append((f"rail{context['local_rank']}", rails[context["local_rank"]], nnodes))
    sequencer = Sequencer(rank, params["timeout_s"])
    measured, outside_s = 0, 0.0
    for scope, group, n in scopes:
        group_rank = dist.get_rank(group)
        for op in params["ops"]:
            for nbytes in params["sizes"]:
                buffers = Buffers(op, nbytes, group_rank, n, device)
                seconds, correct, outside = measure(buffers, group, group_rank, sequencer, params, device,
                                                    f"{scope}/{op}/{buffers.nbytes}")
                outside_s += outside
                emit("measurement", rank=rank, scope=scope, op=op, bytes=buffers.nbytes, ranks=n,
                     time_us=round(seconds * 1e6, 3), correct=correct)
                measured += 1
    dist.barrier()
    dist.destroy_process_group()
    return {"device": str(device), "measurements": measured, "outside_s": round(outside_s, 6),
            "calls": sequencer.seq}
