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
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import struct
import warnings

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
        return x + self.mlp(self.norm2(x))


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
        return self.head(self.norm(x))


def batch(params: dict, rank: int, step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(params["seed"] * 1_000_003 + rank * 10_007 + step)
    size, length, vocab = params["batch"], params["length"], params["vocab"]
    start = torch.randint(0, vocab, (size, 1), generator=generator)
    stride = torch.randint(1, 5, (size, 1), generator=generator)
    tokens = (start + stride * torch.arange(length + 1)) % vocab
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def _model(params: dict, device: torch.device) -> TinyTransformer:
    torch.manual_seed(params["seed"])  # identical initial weights on every rank
    return TinyTransformer(params["vocab"], params["width"], params["heads"], params["layers"],
                           params["length"]).to(device)


def _fsdp(params: dict, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = _model(params, device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=params["lr"])


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, params: dict, rank: int, steps: range,
           device: torch.device, on_step=None) -> tuple[list[float], list[float]]:
    """Losses and per-step times (device time: see ``devices.compute_clock``) of ``steps``."""
    clock = compute_clock(device)
    losses, times = [], []
    for step in steps:
        if params["gc_every"] and step % params["gc_every"] == 0:
            gc.collect()  # on schedule and outside the timed region
        inputs, targets = batch(params, rank, step, device)
        synchronize(device)
        started = clock()
        loss = functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        loss.backward()
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
    state = {"model": model_state, "optimizer": optimizer_state}
    if not load:
        dcp.save(state, checkpoint_id=path)
        return
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _rounded(values: list[float]) -> list[float]:
    return [float(f"{value:.5g}") for value in values]


def run(context: dict) -> dict:
    params = context["params"]
    rank, world = context["rank"], context["nproc"] * context["nnodes"]
    device = device_for(context["local_rank"])
    init_group(context, rank, world, params["timeout_s"])
    # FSDP2 warns that the model's output is a view (a Linear over 3-D input); nothing here modifies it in place
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module", category=UserWarning)
    gc.disable()
    steps, saved_at = params["steps"], params["checkpoint_step"]
    path = os.path.join(params["checkpoint_dir"], "fsdp")
    result: dict = {"device": str(device), "phase": params["phase"]}
    try:
        if params["phase"] == "train":
            from torch.nn.parallel import DistributedDataParallel

            model = _model(params, device)
            ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
            optimizer = torch.optim.AdamW(ddp.parameters(), lr=params["lr"])
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
