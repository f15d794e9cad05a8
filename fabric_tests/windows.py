"""How a worker's timed matmul windows become its speed, and how many it times between two agreements with its
node-mates (``fabric_tests.node_test`` explains both choices).

Kept apart from the node test, which imports torch: this arithmetic is judged by pure tests on recorded windows,
and collecting those must not import torch (seconds a test process).
"""

from __future__ import annotations

#: Windows a node's workers time between two agreements to go on.
ROUND = 10

#: The share of a device's windows, the slowest, left out of its speed.
TRIMMED = 0.1


def typical_window(times: list[float]) -> float:
    """The mean window time of ``times`` less the slowest :data:`TRIMMED` of them: all of fewer than 10 (pure)."""
    ordered = sorted(times)
    kept = ordered[:len(ordered) - int(len(ordered) * TRIMMED)]
    return sum(kept) / len(kept)
