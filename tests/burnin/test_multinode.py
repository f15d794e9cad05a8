"""Burn-in's torch stages end to end on the simulated cluster: real forked workers, real c10d rendezvous and
gloo collectives over loopback with NCCL's completion semantics (``simulation.collective_semantics: nccl``),
rank-layer faults injected through the simulated node's Python.

Each fault must be caught by the stage and check its catalog entry names, the healthy node admitted, and no
test process left behind anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.spec.faults import CATALOG
from tests import browser
from tests.conftest import run_cli
from tests.simhelpers import processes_of, provision_then_burn_in, shrink_to_four_gpus, write_spec

FAULTS = [
    {"kind": "slow_gpu", "node": "sim02", "target": "gpu1", "params": {"factor": 0.5}},
    {"kind": "rank_wrong_result", "node": "sim03", "params": {"local_rank": 1}},
    {"kind": "rank_hang", "node": "sim04", "params": {"local_rank": 1, "after_ops": 5}},
    {"kind": "rank_slow", "node": "sim05", "params": {"factor": 0.2}},
    {"kind": "collective_corruption", "node": "sim07", "params": {"local_rank": 1}},
    {"kind": "degraded_hca_port", "node": "sim08", "target": "mlx5_3"},  # rail 1 (GPU 1 of the four-GPU profile)
]


def _spec(directory: Path, faults: list[dict] = FAULTS, hosts: str = "sim[01-08]") -> Path:
    # NCCL's completion (wait() returns at once, the time is spent in the synchronise): the hang, the straggler and
    # the slow rail must be named as on gloo, whose blocking wait() the other burn-in tests run
    return shrink_to_four_gpus(write_spec(directory, faults, hosts=hosts, stages=["preflight", "node",
                                                                                  "collectives"],
                                          admission={"max_failure_percent": {"burnin": 100}},
                                          collective_semantics="nccl"))


@pytest.fixture(scope="module")
def burned_in(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return provision_then_burn_in(_spec(tmp_path_factory.mktemp("multinode")))


def test_healthy_node_is_admitted(burned_in: dict) -> None:
    assert burned_in["rc"] == 1
    assert burned_in["nodes"]["sim01"]["state"] == "admitted"
    assert burned_in["nodes"]["sim06"]["state"] == "admitted"


@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: fault["kind"])
def test_rank_faults_are_caught_by_their_stage_and_check(burned_in: dict, fault: dict) -> None:
    kind = CATALOG[fault["kind"]]
    node = burned_in["nodes"][fault["node"]]
    assert node["state"] == "quarantined", node
    assert (node["stage"], node["check"]) == (kind.stage, kind.check), node


def test_the_hung_rank_is_named(burned_in: dict) -> None:
    reason = burned_in["nodes"]["sim04"]["reason"]
    assert "sim04, GPU 1" in reason and "stopped inside a collective" in reason


def test_slow_gpu_is_named_and_confirmed(burned_in: dict) -> None:
    assert "GPU 1 at" in burned_in["nodes"]["sim02"]["reason"]
    assert "confirmed on a repeat" in burned_in["nodes"]["sim02"]["reason"]


def test_node_stage_records_its_settings_per_rank(burned_in: dict) -> None:
    rows = json.loads((burned_in["run_dir"] / "workers" / "node.json").read_text())
    assert {row["node"] for row in rows} >= {"sim01", "sim06"}
    for row in rows:  # on CPU workers: fp32 at matmul_n; on a GPU these say bfloat16 and the shapes swept
        assert row["dtype"] == "float32" and row["shapes"] == [row["best_n"]] and row["tf32"] is False, row
        assert row["tflops"] > 0 and str(row["best_n"]) in row["tflops_by_n"]


def test_busbw_is_recorded_per_scope_and_operation(burned_in: dict) -> None:
    report = json.loads((burned_in["run_dir"] / "workers" / "collectives.json").read_text())
    rows = report[-1]["busbw"]
    assert {row["op"] for row in rows} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    assert {row["scope"] for row in rows} >= {"all", "rail0", "rail1"}
    env = report[-1]["nccl_env"]["sim01"]  # what every node's agent told NCCL
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3,mlx5_4,mlx5_5" and env["NCCL_SOCKET_IFNAME"] == "=lo", env
    for row in rows:
        n = row["ranks"]
        factor = 2 * (n - 1) / n if row["op"] == "all_reduce" else (n - 1) / n
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor, rel=1e-3)


def test_no_test_process_survives(burned_in: dict) -> None:
    left = processes_of(burned_in["spec"].parent, running="fabric_tests.agent")
    assert not left, left


def test_a_corrupting_rank_is_isolated_by_group_testing(burned_in: dict) -> None:
    reason = burned_in["nodes"]["sim07"]["reason"]
    assert "every group holding sim07 gets wrong all_reduce sums" in reason
    assert "confirmed beside a healthy partner" in reason


def test_a_slow_rail_is_pinned_on_its_node_by_pairing(burned_in: dict) -> None:
    reason = burned_in["nodes"]["sim08"]["reason"]
    assert "rail 1 (mlx5_3, GPU 1) on sim08 is slow beside a healthy partner" in reason, reason
    report = json.loads((burned_in["run_dir"] / "workers" / "collectives.json").read_text())
    judged = report[-1]
    assert set(judged["stragglers"]) == set() and "rail1" in judged["rails"], judged  # sim05 was removed first
    pairing = judged["rail_pairing"]
    assert pairing["slow"] == [1] and list(pairing["confirmed"]) == ["sim08"] and not pairing["systemic"]
    passed = json.loads((burned_in["run_dir"] / "burnin-collectives.json").read_text())
    healthy = next(verdict for verdict in passed if verdict["node"] == "sim01")
    rail_check = next(result for result in healthy["results"] if result["check"] == "rail_busbw")
    assert rail_check["outcome"] == "ok" and "slow on other nodes only" in rail_check["message"], rail_check


def _report(burned_in: dict) -> Path:
    result = run_cli("report", str(burned_in["spec"]), "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    return Path(json.loads(result.stdout)["report"])


@pytest.mark.skipif(not browser.available(), reason=browser.MISSING)
def test_the_acceptance_report_renders_offline_in_a_real_browser(burned_in: dict) -> None:
    html = _report(burned_in)
    seen = browser.open_report(html, "report-collectives")
    assert seen.console_errors == []
    assert seen.requests == [html.resolve().as_uri()], "the report asked the network for something"
    quarantined = sorted(name for name, row in burned_in["nodes"].items() if row["state"] == "quarantined")
    assert sorted(seen.cards) == quarantined == sorted(fault["node"] for fault in FAULTS)
    titles = [plot["title"] for plot in seen.plots]
    assert [title for title in titles if "bus bandwidth" in title] == [
        f"{op}: bus bandwidth" for op in ("all_gather", "all_reduce", "all_to_all", "reduce_scatter")]
    assert "matmul throughput per GPU" in titles and "device memory copy bandwidth per GPU" in titles
    for plot in seen.plots:
        if plot["title"].startswith(("all_", "reduce_", "matmul", "device")):
            assert plot["declared"] == plot["drawn"] == plot["visible"] > 0, plot
    matmul = next(plot for plot in seen.plots if plot["title"] == "matmul throughput per GPU")
    assert matmul["flagged"] >= 1, "sim02's slow GPU is not marked"
    busbw_csv = (html.parent / "report.busbw.csv").read_text().splitlines()
    assert len(busbw_csv) - 1 == sum(plot["drawn"] for plot in seen.plots if "bus bandwidth" in plot["title"])
    assert "Measured on the CPU backend" in seen.text
    assert seen.screenshot is not None and seen.screenshot.stat().st_size > 10_000
