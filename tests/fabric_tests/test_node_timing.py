"""How the node test turns a worker's timed windows into its speed (``fabric_tests/node_test.py``; the arithmetic:
``fabric_tests/windows.py``).

The pure part is judged on windows recorded on this machine (``tests/data/windows``): node-mates on one core beside
another test module, where the best window and a quantile of the windows put a healthy GPU below its mates and the
mean less the slowest tenth does not. The lockstep is run for real: forked workers in a gloo group on loopback.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import time
from pathlib import Path

import pytest

from fabric_tests.windows import ROUND, typical_window

WINDOWS = Path(__file__).parents[1] / "data" / "windows"


def _ratios(speeds: list[float]) -> list[float]:
    """Each worker's speed over the median of its node-mates', as the node stage and the baseline compare them."""
    return [speed / statistics.median(speeds[:index] + speeds[index + 1:]) for index, speed in enumerate(speeds)]


def _recorded(name: str) -> list[list[float]]:
    data = json.loads((WINDOWS / name).read_text())
    return [data["windows_s"][rank] for rank in sorted(data["windows_s"], key=int)]


def test_the_mean_less_the_slowest_tenth_keeps_healthy_node_mates_together() -> None:
    for name in ("shared-core-unsynchronised.json", "shared-core-rounds.json"):
        ratios = _ratios([1 / typical_window(windows) for windows in _recorded(name)])
        assert all(0.95 <= ratio <= 1.05 for ratio in ratios), (name, ratios)


def test_the_best_window_and_a_quantile_do_not() -> None:
    best = _ratios([1 / min(windows) for windows in _recorded("shared-core-rounds.json")])
    assert min(best) < 0.7, "one lucky window: a healthy GPU below the simulated cluster's 0.7 node-mate band"
    tenth = _ratios([1 / sorted(windows)[len(windows) // 10]
                     for windows in _recorded("shared-core-unsynchronised.json")])
    assert min(tenth) < 0.9, "a quantile that falls between the core's two speeds, in a different place per worker"


def test_a_slow_gpu_is_slow_by_its_whole_share_and_few_windows_are_all_kept() -> None:
    healthy = _recorded("shared-core-rounds.json")
    slowed = [*healthy[:2], [window / 0.85 for window in healthy[2]], healthy[3]]
    ratios = _ratios([1 / typical_window(windows) for windows in slowed])
    assert ratios[2] < 0.87 and all(ratio > 0.95 for index, ratio in enumerate(ratios) if index != 2), ratios
    assert typical_window([0.5, 0.1, 0.3]) == pytest.approx(0.3), "a GPU's five windows: their plain mean"
    assert typical_window([*[1.0] * 9, 10.0]) == pytest.approx(1.0), "the slowest tenth left out"


def _worker(rank: int, port: int, stops_after_s: float, results: multiprocessing.Queue) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from fabric_tests.node_test import _time_matmul

    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=30))
    a, b, cpu = torch.ones(8, 8), torch.ones(8, 8), torch.device("cpu")
    counted = len(_time_matmul(cpu, a, b, 1, 25, lockstep=True))
    held = len(_time_matmul(cpu, a, b, 1, 0, lockstep=True, until=time.monotonic() + stops_after_s))
    dist.destroy_process_group()
    results.put((rank, counted, held))


def test_node_mates_in_lockstep_time_the_same_windows_and_stop_together() -> None:
    """The soak's held load ends by the clock: a worker whose time is up must not leave its mates at a barrier."""
    from tests.simhelpers import free_loopback_port

    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue = context.Queue()
    port = free_loopback_port()
    workers = [context.Process(target=_worker, args=(rank, port, stop, results))
               for rank, stop in ((0, 0.0), (1, 0.3))]
    for worker in workers:
        worker.start()
    got = sorted(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
    assert [counted for _rank, counted, _held in got] == [25, 25], got
    assert got[0][2] == got[1][2] == ROUND, "rank 0's time was up at the first vote: one round, for both"


@pytest.mark.slow  # 2.5 s of torch matmuls: left out of make test-fast
def test_each_shape_of_the_sweep_is_timed_on_operands_of_that_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's first shape is n/2: operands carried over from it and counted as n's work made an H100 read
    5,815 TFLOPS at n = 8192 (8x its 723, measured on an H100 with `python -m bench.gpu`, 2026-11-28), a matmul
    check that could not fail. Every shape is timed on its own operands and counted as its own work."""
    import torch

    from fabric_tests import node_test

    timed: list[tuple[int, ...]] = []

    def windows(device, a, b, iters, repeats, lockstep=False, until=None):  # one second a window, whatever the shape
        timed.append((*a.shape, *b.shape))
        return [1.0] * max(repeats, 1)

    monkeypatch.setattr(node_test, "matmul_plan", lambda device_type, n, free=None: (torch.float32, [n // 2, n, 2 * n]))
    monkeypatch.setattr(node_test, "_time_matmul", windows)
    measured = node_test._matmul(torch.device("cpu"), 64, iters=1, repeats=3, seed=0)
    assert timed == [(32, 32, 32, 32), (64, 64, 64, 64), (128, 128, 128, 128)]
    assert measured["tflops_by_n"] == {str(size): pytest.approx(2 * size**3 / 1e12) for size in (32, 64, 128)}
    assert measured["best_n"] == 128


def test_a_window_the_device_clock_saw_no_time_in_is_timed_by_the_wall_clock(monkeypatch) -> None:
    """The CPU worker's clock (its thread's CPU time) still across a copy: measured by the wall clock, never a
    division by zero (a worker died of one, its node failed node_test on our own error)."""
    import torch

    from fabric_tests import node_test

    monkeypatch.setattr(node_test, "compute_clock", lambda device: (lambda: 1.0))  # a clock that never moves
    bandwidth = node_test._memory_bandwidth(torch.device("cpu"), 1 << 20, 3)
    assert 0 < bandwidth < float("inf")
    windows = node_test._time_matmul(torch.device("cpu"), torch.ones(64, 64), torch.ones(64, 64), 2, 3)
    assert len(windows) == 3 and all(window > 0 for window in windows)
