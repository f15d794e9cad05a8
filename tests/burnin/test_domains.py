"""The nvlink_domain stage over launches of GPU workers as the agent reports them (``measurement``, ``result`` and
``agent`` records, NCCL's INFO lines in the output: tests/data/nccl_debug_mnnvl_*.log): each domain of the trays
in the burn-in measured apart, judged against the published figure of its size, a tray failed on its own GPUs'
lines, a slow domain's trays held with no tray quarantined, and a tray alone in its domain waiting. The same stage
on the simulator's CPU workers, end to end: tests/hosts/test_provisioning_trays.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.burnin.domains import run_domain_stage
from provision.burnin.launch import LaunchResult, NodeRun
from provision.hosts.remote import CommandResult
from provision.spec import load_spec
from tests.sim.test_nvl72 import tray_spec

DATA = Path(__file__).parents[1] / "data"
pytestmark = pytest.mark.fast


class GpuLaunches:
    """Answers each launch as GPU workers would: every rank measured the all_reduce at each size at ``busbw``
    GB/s (a domain's own figure), its node's output NCCL's lines from ``logs`` (per tray, else the healthy one)."""

    device = "cuda"

    def __init__(self, busbw: dict[str, float], logs: dict[str, str] | None = None) -> None:
        self.busbw, self.logs, self.launched = busbw, logs or {}, []

    def message_bytes(self, size: int, ranks: int) -> int:
        return size

    def __call__(self, loaded: Any, state_dir: Path, nodes: list[Any], *, test: str, nproc: int,
                 params: dict[str, Any], deadline_s: float, port: int | None = None) -> LaunchResult:
        self.launched.append((params["nvlink_domain"], [node.name for node in nodes]))
        ranks = nproc * len(nodes)
        gbps = self.busbw[params["nvlink_domain"]]
        runs = []
        for node_rank, node in enumerate(nodes):
            records: list[dict[str, Any]] = []
            for local in range(nproc):
                rank = node_rank * nproc + local
                for asked in params["sizes"]:
                    size = self.message_bytes(asked, ranks)
                    seconds = size / (gbps * ranks / (2 * (ranks - 1)) * 1e9)
                    records += [{"type": "measurement", "rank": rank, "scope": "all", "op": "all_reduce",
                                 "bytes": size, "ranks": ranks, "time_us": seconds * 1e6, "correct": True}
                                for _ in range(params["iters"])]
                records.append({"type": "result", "rank": rank, "local_rank": local,
                                "device": f"cuda:{local}" if self.device == "cuda" else "cpu",
                                "measurements": len(params["sizes"]) * params["iters"], "outside_s": 0.01,
                                "calls": 10})
            records.append({"type": "agent", "node": node.name, "node_rank": node_rank, "seconds": 2.0,
                            "workers": {str(local): {"exit": 0, "killed": False} for local in range(nproc)},
                            "left_alive": 0})
            log = (DATA / self.logs.get(node.name, "nccl_debug_mnnvl_nvls.log")).read_text()
            runs.append(NodeRun(node.name, node_rank, CommandResult(("python3",), 0, log, "", 2.0), records))
        return LaunchResult(test, runs, nproc)


class CpuLaunches(GpuLaunches):
    """The simulator's CPU workers: each size rounded down to a multiple of the ranks, as the workers' all_reduce
    sizes its tensor (fabric_tests/collectives.py), so domains of different tray counts measure different bytes."""

    device = "cpu"

    def message_bytes(self, size: int, ranks: int) -> int:
        return max(ranks, size // 4 // ranks * ranks) * 4


@pytest.fixture
def loaded(tmp_path: Path) -> Any:
    spec = tray_spec(tmp_path, [])
    return load_spec(spec)


def _run(loaded: Any, tmp_path: Path, launcher: GpuLaunches, names: list[str]) -> dict[str, Any]:
    nodes = [node for node in loaded.nodes if node.name in names]
    return {verdict.node: verdict for verdict in run_domain_stage(loaded, nodes, tmp_path, port=24000,
                                                                  evidence_dir=tmp_path / "ev", launcher=launcher)}


def test_healthy_domains_pass_each_measured_apart(loaded: Any, tmp_path: Path) -> None:
    launcher = GpuLaunches({"rack1": 900.0, "rack2": 900.0})
    verdicts = _run(loaded, tmp_path, launcher, ["gb001", "gb002", "gb003", "gb004", "gb005", "gb006"])
    assert launcher.launched == [("rack1", ["gb001", "gb002", "gb003"]), ("rack2", ["gb004", "gb005", "gb006"])]
    assert all(verdict.passed for verdict in verdicts.values()), {n: v.reason for n, v in verdicts.items()}
    checks = {result.check: result for result in verdicts["gb001"].results}
    assert "MNNVL, NVLS" in checks["domain_busbw"].message and checks["mnnvl"].outcome.value == "ok"
    report = json.loads((tmp_path / "ev" / "nvlink-domains.json").read_text())
    assert report[0]["algorithm"] == "MNNVL, NVLS" and report[0]["on_gpu"] is True


def test_a_slow_domain_holds_its_trays_and_quarantines_none(loaded: Any, tmp_path: Path) -> None:
    verdicts = _run(loaded, tmp_path, GpuLaunches({"rack1": 900.0, "rack2": 300.0}),
                    ["gb001", "gb002", "gb003", "gb004", "gb005", "gb006"])
    assert {name for name, verdict in verdicts.items() if verdict.passed} == {"gb001", "gb002", "gb003"}
    for tray in ("gb004", "gb005", "gb006"):
        assert verdicts[tray].waiting and not verdicts[tray].failed
        assert "its NVLink domain is slow with no tray to blame: rack2: all_reduce 300 GB/s" in verdicts[tray].reason


def test_a_trays_own_gpu_out_of_its_partition_fails_that_tray_only(loaded: Any, tmp_path: Path) -> None:
    launcher = GpuLaunches({"rack1": 900.0}, {"gb002": "nccl_debug_mnnvl_gpu_out_of_partition.log"})
    verdicts = _run(loaded, tmp_path, launcher, ["gb001", "gb002", "gb003"])
    assert verdicts["gb002"].failed and verdicts["gb002"].check == "mnnvl", verdicts["gb002"].reason
    assert verdicts["gb001"].passed and verdicts["gb003"].passed


def test_a_tray_alone_of_its_domain_in_the_burn_in_waits(loaded: Any, tmp_path: Path) -> None:
    launcher = GpuLaunches({"rack1": 900.0})
    verdicts = _run(loaded, tmp_path, launcher, ["gb001", "gb002", "gb004"])
    assert verdicts["gb004"].waiting.startswith("the only tray of domain rack2 in this burn-in")
    assert launcher.launched == [("rack1", ["gb001", "gb002"])]


def test_the_specs_domain_busbw_fraction_is_what_a_domain_is_held_to(tmp_path: Path) -> None:
    """800 GB/s over rack1's 12 GPUs: at least the default 0.75 of the lowest published GB200 domain figure
    (839 GB/s, 72 GPUs), below the 0.99 a spec may ask for instead."""
    default = load_spec(tray_spec(tmp_path, []))
    strict_dir = tmp_path / "strict"
    strict_dir.mkdir()
    spec = tray_spec(strict_dir, [])
    data = yaml.safe_load(spec.read_text())
    data["burnin"].setdefault("thresholds", {})["domain_busbw_fraction"] = 0.99
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    strict = load_spec(spec)
    trays = ["gb001", "gb002", "gb003"]
    assert all(verdict.passed for verdict in _run(default, tmp_path, GpuLaunches({"rack1": 800.0}), trays).values())
    held = _run(strict, strict_dir, GpuLaunches({"rack1": 800.0}), trays)
    assert all(verdict.waiting and "below 830.6 GB/s (0.99 x 839" in verdict.reason for verdict in held.values()), {
        name: verdict.reason for name, verdict in held.items()}


def test_cpu_domains_of_different_sizes_are_still_compared(loaded: Any, tmp_path: Path) -> None:
    """rack1's three trays and rack2's two measure 65,520 and 65,536 bytes (multiples of 6 and 4 ranks at 2 a
    tray): still the same message to compare, so a degraded rack2 is held, not recorded as alone (the whole GB200
    example's 15- and 16-tray domains once passed a degraded switch tray so)."""
    launcher = CpuLaunches({"rack1": 0.02, "rack2": 0.002})
    verdicts = _run(loaded, tmp_path, launcher, ["gb001", "gb002", "gb003", "gb004", "gb005"])
    report = {row["domain"]: row for row in json.loads((tmp_path / "ev" / "nvlink-domains.json").read_text())}
    assert max(map(int, report["rack1"]["busbw"])) != max(map(int, report["rack2"]["busbw"])), report
    assert {name for name, verdict in verdicts.items() if verdict.passed} == {"gb001", "gb002", "gb003"}
    assert all(verdicts[tray].waiting and "slow with no tray to blame" in verdicts[tray].reason
               for tray in ("gb004", "gb005")), {name: verdict.reason for name, verdict in verdicts.items()}
