"""The device a worker drives and the backend it talks through: CUDA and NCCL when the node has GPUs,
the CPU and gloo otherwise (how CI and the simulated cluster run the same tests)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


def device_for(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    torch.set_num_threads(1)  # one core per worker, so workers of a node do not fight over threads
    return torch.device("cpu")


def cuda_runtime() -> dict[str, str | None]:
    """What this worker's torch can do with the node's GPUs: the CUDA it was built for (None: a CPU build, as CI and
    the simulated cluster run), and, where a CUDA build finds no usable GPU, why (an HGX node whose
    nvidia-fabricmanager is down says CUDA error 802, "system not yet initialized")."""
    build = torch.version.cuda
    if build is None or torch.cuda.is_available():
        return {"cuda_build": build}
    try:
        torch.cuda.init()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    except Exception as error:  # the reason is the record
        return {"cuda_build": build, "cuda_error": f"{type(error).__name__}: {str(error)[:300]}"}
    return {"cuda_build": build, "cuda_error": "torch.cuda.is_available() is False"}


def compute_clock(device: torch.device) -> Callable[[], float]:
    """The clock that measures how long the *device* worked: the wall clock after a CUDA synchronise on a GPU;
    on the CPU, the calling thread's CPU time, so several workers sharing a few cores are each timed by the
    work they did rather than by the scheduler's choices."""
    return time.perf_counter if device.type == "cuda" else time.thread_time


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work: on CUDA the stream NCCL's collectives run on; on the CPU torch's own
    (a no-op for gloo, whose ``wait()`` already blocked)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif hasattr(torch, "cpu") and hasattr(torch.cpu, "synchronize"):
        torch.cpu.synchronize()


def backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init_group(context: dict[str, Any], rank: int, world_size: int, timeout_s: float) -> None:
    """c10d rendezvous through a TCPStore that ``rank`` 0 serves at the master address."""
    store = dist.TCPStore(  # type: ignore[attr-defined]  # torch.distributed does not re-export TCPStore
        context["master_addr"], context["master_port"], world_size, is_master=rank == 0,
        timeout=datetime.timedelta(seconds=timeout_s))
    dist.init_process_group(backend(), store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
