"""Multi-node training smoke test: a small transformer trained with DDP, then with FSDP and a sharded checkpoint.

What a collective benchmark does not exercise, a real training step does: autograd, bucketed gradient
all-reduce overlapping the backward pass (DDP), parameter all-gather and gradient reduce-scatter (FSDP), an
optimizer, and writing and reading a sharded checkpoint (torch.distributed.checkpoint). Everything is made here
from torch alone: the model, and the data — sequences ``x, x+s, x+2s, … (mod vocab)`` from a generator seeded by
(seed, rank, step), so any step of any rank can be reproduced, and a model that learns lowers its loss fast.

Two launches make one test. ``phase=train``: DDP for ``steps`` steps; then FSDP for ``steps`` steps with a
checkpoint saved after step ``checkpoint_step``. ``phase=resume``: fresh processes build the FSDP model, load
that checkpoint, and train the remaining steps; every rank's losses and final parameter shard must match the
first launch's bit for bit (the controller compares the digests).

Python's garbage collector is disabled and collected every ``gc_every`` steps outside the timed region, as
large runs do, so a collection is not mistaken for a slow node, and slowness that *is* periodic is the node's.

On a GPU the run is made deterministic before anything touches cuBLAS, or a bit-exact resume would fail healthy
GPUs: ``CUBLAS_WORKSPACE_CONFIG=:4096:8``, ``torch.use_deterministic_algorithms``, TF32 off, cuDNN deterministic,
attention on the math kernel (the flash and memory-efficient backwards accumulate in a non-deterministic order).
The settings are in every rank's record. Before a multi-node run trains, it proves ``checkpoint_dir`` is shared:
each node writes a file there and every node must read every other node's, or the run stops with the paths.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import struct
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional

from fabric_tests.devices import compute_clock, device_for, init_group, synchronize


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return cast(torch.Tensor, x + self.mlp(self.norm2(x)))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, length: int) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return cast(torch.Tensor, self.head(self.norm(x)))


def batch(params: dict[str, Any], rank: int, step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(params["seed"] * 1_000_003 + rank * 10_007 + step)
    size, length, vocab = params["batch"], params["length"], params["vocab"]
    start = torch.randint(0, vocab, (size, 1), generator=generator)
    stride = torch.randint(1, 5, (size, 1), generator=generator)
    tokens = (start + stride * torch.arange(length + 1)) % vocab
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def _model(params: dict[str, Any], device: torch.device) -> TinyTransformer:
    torch.manual_seed(params["seed"])  # identical initial weights on every rank
    return TinyTransformer(params["vocab"], params["width"], params["heads"], params["layers"],
                           params["length"]).to(device)


def _fsdp(params: dict[str, Any], device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = _model(params, device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=params["lr"])


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, params: dict[str, Any], rank: int, steps: range,
           device: torch.device, on_step: Callable[[int], None] | None = None) -> tuple[list[float], list[float]]:
    """Losses and per-step times (device time: see ``devices.compute_clock``) of ``steps``."""
    clock = compute_clock(device)
    losses, times = [], []
    for step in steps:
        if params["gc_every"] and step % params["gc_every"] == 0:
            gc.collect()  # on schedule and outside the timed region
        inputs, targets = batch(params, rank, step, device)
        synchronize(device)
        started = clock()
        with _attention_kernel(device):
            loss = functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        times.append(clock() - started)
        losses.append(loss.item())
        if on_step is not None:
            on_step(step)
    return losses, times


def _digest(values: list[float]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(values)}d", *values)).hexdigest()


def _shard_digest(model: nn.Module) -> str:
    """This rank's part of the weights, bit for bit."""
    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters()):
        local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
        digest.update(name.encode())
        digest.update(local.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, path: str, *, load: bool) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optimizer_state}
    if not load:
        dcp.save(state, checkpoint_id=path)  # type: ignore[attr-defined]  # torch does not re-export it
        return
    dcp.load(state, checkpoint_id=path)  # type: ignore[attr-defined]  # torch does not re-export it
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def deterministic(device: torch.device) -> dict[str, Any]:
    """Make this process's CUDA work repeatable; returns the settings for the rank's record."""
    if device.type != "cuda":
        return {"device": "cpu", "deterministic_algorithms": False, "note": "CPU kernels are deterministic here"}
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before the first cuBLAS call of the process
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return {"device": "cuda", "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cublas_workspace_config": os.environ["CUBLAS_WORKSPACE_CONFIG"], "tf32": False,
            "cudnn_deterministic": True, "attention": "math"}


def _attention_kernel(device: torch.device) -> AbstractContextManager[None]:
    if device.type != "cuda":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def prove_shared(directory: str, node_rank: int, nnodes: int, *, timeout_s: float = 30.0) -> None:
    """Each node writes a file into ``directory``; every node must see every other node's (then it is storage
    the nodes share, as a sharded checkpoint needs). Called by local rank 0 of each node, between barriers."""
    probe = os.path.join(directory, ".shared-check")
    os.makedirs(probe, exist_ok=True)
    with open(os.path.join(probe, f"node-{node_rank}"), "w") as handle:
        handle.write(f"{node_rank}\n")
    deadline = time.monotonic() + timeout_s  # network filesystems may show a new file a little later
    while True:
        missing = [other for other in range(nnodes) if not os.path.exists(os.path.join(probe, f"node-{other}"))]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if missing:
        raise RuntimeError(f"checkpoint_dir {directory} is not shared between the nodes: node {node_rank} does not "
                           f"see the file(s) node(s) {missing} wrote there (burnin.workload.checkpoint_dir must be "
                           "storage every node mounts, e.g. NFS or Lustre)")


def _rounded(values: list[float]) -> list[float]:
    return [float(f"{value:.5g}") for value in values]


def run(context: dict[str, Any]) -> dict[str, Any]:
    params = context["params"]
    rank, world = context["rank"], context["nproc"] * context["nnodes"]
    device = device_for(context["local_rank"])
    settings = deterministic(device)
    init_group(context, rank, world, params["timeout_s"])
    # FSDP2 warns that the model's output is a view (a Linear over 3-D input); nothing here modifies it in place
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module", category=UserWarning)
    gc.disable()
    steps, saved_at = params["steps"], params["checkpoint_step"]
    path = os.path.join(params["checkpoint_dir"], "fsdp")
    result: dict[str, Any] = {"device": str(device), "phase": params["phase"], "determinism": settings}
    try:
        if params["phase"] == "train" and context["nnodes"] > 1 and params["checkpoint_step"] >= 0:
            dist.barrier()
            if context["local_rank"] == 0:
                prove_shared(params["checkpoint_dir"], context["node_rank"], context["nnodes"])
            dist.barrier()
            result["checkpoint_dir_shared"] = True
        if params["phase"] == "train":
            from torch.nn.parallel import DistributedDataParallel

            model = _model(params, device)
            ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
            optimizer: torch.optim.Optimizer = torch.optim.AdamW(ddp.parameters(), lr=params["lr"])
            losses, times = _train(ddp, optimizer, params, rank, range(steps), device)
            result.update(ddp_losses=_rounded(losses), ddp_step_s=_rounded(times))
            del ddp, model, optimizer

            fsdp, optimizer = _fsdp(params, device)

            def save(step: int) -> None:
                if step == saved_at:
                    _checkpoint(fsdp, optimizer, path, load=False)

            losses, times = _train(fsdp, optimizer, params, rank, range(steps), device, on_step=save)
            result.update(fsdp_losses=_rounded(losses), fsdp_step_s=_rounded(times))
            tail = losses[saved_at + 1:]
        else:
            fsdp, optimizer = _fsdp(params, device)
            _checkpoint(fsdp, optimizer, path, load=True)
            tail, _ = _train(fsdp, optimizer, params, rank, range(saved_at + 1, steps), device)
            dist.barrier()
            if rank == 0:  # the checkpoint has served its purpose; it lives on storage the nodes share
                shutil.rmtree(params["checkpoint_dir"], ignore_errors=True)
        result.update(tail_digest=_digest(tail), tail_losses=_rounded(tail[:8]), shard_digest=_shard_digest(fsdp))
        dist.barrier()
    finally:
        gc.enable()
    dist.destroy_process_group()
    return result
