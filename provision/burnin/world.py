"""The fleet's own collectives against the design: a world all_reduce far below what its rails can carry is the
fabric's or the configuration's problem (a spine plane down, NCCL on sockets, GPUDirect off everywhere), not any
node's, and a burn-in that only compares nodes with each other would pass a whole fleet at 10 GB/s.

On GPUs the world scope's all_reduce busbw at the largest size measured, when that is at least
:data:`WORLD_FLOOR_MIN_BYTES`, must reach ``world_busbw_gbps`` (0.8 x the node's rail bandwidth: each GPU's ring
traffic leaves through its rail, so a node moves at most rails x link GB/s; the field guide's "below 80% of
theoretical at 4-16 GB is a problem"). Smaller sizes are still climbing and are not judged. CPU workers have no
design figure: recorded, not judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Below this size a healthy fleet's busbw is still climbing with the message size (latency-bound).
WORLD_FLOOR_MIN_BYTES = 1 << 30


@dataclass(frozen=True)
class WorldJudgement:
    slow: bool
    judged: bool
    reason: str


def judge_world(rows: Iterable[Mapping[str, Any]], *, floor_gbps: float | None) -> WorldJudgement:
    """The world all_reduce (rows as the collectives stage's ``bus_bandwidth``) against ``floor_gbps`` (None: not
    judged, on CPU workers)."""
    world = {int(row["bytes"]): float(row["busbw_gbps"]) for row in rows
             if row["scope"] == "all" and row["op"] == "all_reduce"}
    if not world:
        return WorldJudgement(False, False, "no world all_reduce measured")
    largest = max(world)
    shown = f"all_reduce {world[largest]:g} GB/s at {largest} B across the fleet"
    if floor_gbps is None:
        return WorldJudgement(False, False, f"{shown} (CPU workers: recorded, not judged)")
    if largest < WORLD_FLOOR_MIN_BYTES:
        return WorldJudgement(False, False, f"{shown} (below {WORLD_FLOOR_MIN_BYTES} B a healthy fleet is still "
                                            "climbing: not judged)")
    if world[largest] < floor_gbps:
        return WorldJudgement(True, True, f"{shown}, below world_busbw_gbps {floor_gbps:g}")
    return WorldJudgement(False, True, f"{shown}, at least world_busbw_gbps {floor_gbps:g}")
