"""The fleet's world all_reduce against its design, on recorded public figures (pure, milliseconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.burnin.world import judge_world
from provision.spec import load_spec
from provision.spec.thresholds import effective_thresholds
from tests.simhelpers import write_spec

pytestmark = pytest.mark.fast
GIB = 1 << 30


def _rows(figures: dict[int, float]) -> list[dict]:
    return [{"scope": "all", "op": "all_reduce", "bytes": size, "ranks": 16, "busbw_gbps": busbw}
            for size, busbw in figures.items()] + [{"scope": "rail0", "op": "all_reduce", "bytes": 2 * GIB,
                                                    "ranks": 2, "busbw_gbps": 41.0}]


def _floor(tmp_path: Path) -> float:
    loaded = load_spec(write_spec(tmp_path, [], hosts="sim[01-02]"))  # 8 rails of NDR (400 Gb/s)
    spec = loaded.spec
    return effective_thresholds(spec.hardware["hgx-h100"], spec.fabric, spec.burnin.thresholds)[
        "world_busbw_gbps"].value


def test_the_floor_is_the_nodes_rail_bandwidth(tmp_path: Path) -> None:
    assert _floor(tmp_path) == pytest.approx(0.8 * 8 * 50)  # field guide: a node moves at most 8 x 50 GB/s


def test_two_healthy_h100_nodes_pass(tmp_path: Path) -> None:
    """2 x p5.48xlarge (8 x H100, 3,200 Gb/s each), all_reduce_perf: 437.79 GB/s busbw at 2 GiB
    (aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md); two-node busbw can exceed the
    NIC bound (nccl-tests issue 169), and is never failed for it."""
    judged = judge_world(_rows({8 << 20: 131.2, 2 * GIB: 437.79}), floor_gbps=_floor(tmp_path))
    assert judged.judged and not judged.slow, judged


def test_a_fleet_at_ten_gigabytes_is_systemic(tmp_path: Path) -> None:
    judged = judge_world(_rows({4 * GIB: 10.2}), floor_gbps=_floor(tmp_path))
    assert judged.slow and "10.2 GB/s at 4294967296 B" in judged.reason and "below world_busbw_gbps 320" in \
        judged.reason


def test_sizes_that_are_still_climbing_are_not_judged(tmp_path: Path) -> None:
    judged = judge_world(_rows({64 << 20: 41.0}), floor_gbps=_floor(tmp_path))
    assert not judged.judged and not judged.slow and "not judged" in judged.reason


def test_cpu_workers_are_recorded_not_judged() -> None:
    judged = judge_world(_rows({4 * GIB: 0.03}), floor_gbps=None)
    assert not judged.slow and "recorded, not judged" in judged.reason


def test_an_a100_fleet_on_four_rails_passes_its_own_floor() -> None:
    """2 x p4de (8 x A100, 4 x 100 Gb/s EFA): 78.33 GB/s busbw at 2 GiB (same README); its floor is 0.8 x 4 x
    12.5 = 40 GB/s."""
    judged = judge_world(_rows({2 * GIB: 78.33}), floor_gbps=0.8 * 4 * 12.5)
    assert judged.judged and not judged.slow


def test_the_collectives_stage_stops_a_slow_fleet_as_systemic(tmp_path: Path, monkeypatch) -> None:
    """Replayed launch of four GPU nodes whose world all_reduce ran at ~10 GB/s at 4 GiB: nobody is a straggler and
    nobody's sum is wrong, so only the design can say the fleet is slow."""
    import yaml

    from provision.burnin import collectives
    from provision.burnin.launch import LaunchResult, NodeRun

    spec = write_spec(tmp_path, [], hosts="sim[01-04]")
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["workload"].update(collective_ops=["all_reduce"], collective_sizes=[4 * GIB])
    spec.write_text(yaml.safe_dump(data))
    loaded = load_spec(spec)

    def launch(loaded, state_dir, nodes, *, test, nproc, params, deadline_s, port):
        runs = []
        world = len(nodes) * nproc
        seconds = 4 * GIB / (10e9 / (2 * (world - 1) / world))  # busbw 10 GB/s
        for index, node in enumerate(nodes):
            records = [{"type": "agent", "workers": {str(local): {"killed": False} for local in range(nproc)}}]
            for local in range(nproc):
                rank = index * nproc + local
                records.append({"type": "result", "rank": rank, "local_rank": local, "device": f"cuda:{local}",
                                "measurements": 2, "outside_s": 1.0})
                records += [{"type": "measurement", "rank": rank, "scope": scope, "op": "all_reduce",
                             "bytes": 4 * GIB, "ranks": world if scope == "all" else len(nodes),
                             "time_us": seconds * 1e6, "correct": True} for scope in ("all", f"rail{local}")]
            runs.append(NodeRun(node.name, index, records=records))
        return LaunchResult(test, runs, nproc)

    monkeypatch.setattr(collectives, "judge_slow_rails", lambda *args, **kwargs: {})
    with pytest.raises(collectives.WorldSystemic, match="below world_busbw_gbps 320"):
        collectives.run_collectives_stage(loaded, loaded.nodes, tmp_path, port=20000, evidence_dir=tmp_path / "w",
                                        launcher=launch)
