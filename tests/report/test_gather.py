"""The report's rows, built from what the burn-in wrote (pure: no store, no browser; the report end to end is
tests/sinks/test_metrics.py's and the burn-in tests')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.report.gather import acceptance_line, busbw_rows, gpu_rows, pair_rows, training_rows

pytestmark = pytest.mark.fast


def test_the_last_completed_collectives_attempt_gives_the_figures() -> None:
    row = {"scope": "all", "op": "all_reduce", "bytes": 1 << 20, "ranks": 32, "algbw_gbps": 90.0,
           "busbw_gbps": 174.4, "extra": "dropped"}
    assert busbw_rows([{"busbw": [row]}, {"busbw": []}]) == [{key: row[key] for key in row if key != "extra"}]
    assert busbw_rows(None) == []


def test_a_gpu_below_its_node_mates_is_flagged_against_the_spec_fraction() -> None:
    records = [{"node": "sim01", "local_rank": rank, "tflops": tflops} for rank, tflops in enumerate((700, 690, 500))]
    rows = gpu_rows(records, {"sim01": {"matmul_peer_fraction": 0.9}})
    assert [row["slow"] for row in rows] == [False, False, True] and rows[0]["node_median_tflops"] == 690


def test_pair_and_training_rows() -> None:
    tests = {"tests": [{"flows": [["sim01/mlx5_0", "sim02/mlx5_0"]], "gbps": 380.0, "threshold_gbps": 350.0,
                        "passed": True, "round": 1}, {"flows": [], "gbps": 0.0}]}
    assert pair_rows(tests) == [{"hosts": "sim01 - sim02", "rail": "mlx5_0", "round": 1,
                                 "flows": ["sim01/mlx5_0->sim02/mlx5_0"], "gbps": 380.0, "threshold_gbps": 350.0,
                                 "passed": True}]
    training = [{"node": "sim01", "gpu": 0, "ddp": {"step_s_median": 0.1, "loss_first": 4.0, "loss_last": 2.0},
                 "fsdp": {"no": "figures"}}]
    assert [(row["mode"], row["step_s_median"]) for row in training_rows(training)] == [("ddp", 0.1)]


def test_the_acceptance_statement_is_the_newest_runs(tmp_path: Path) -> None:
    old, new, gone = tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"
    for run, statement in ((old, "old"), (new, "15 of 16 admitted")):
        run.mkdir()
        (run / "events.jsonl").write_text(json.dumps({"event": "burnin.acceptance", "statement": statement}) + "\n")
    assert acceptance_line([{"run_dir": str(old)}, {"run_dir": str(new)}, {"run_dir": str(gone)}]) == \
        "15 of 16 admitted"
    assert acceptance_line([]) == ""


def test_the_report_shows_each_domains_size_left_and_each_forecast_with_its_projection() -> None:
    from provision.report import render
    from provision.report.gather import ReportData

    data = ReportData(cluster="gb200", spec_path="spec.yaml", spec_sha256="0" * 64, generated_at="2026-11-28",
                      runs=[], campaign=None, software={}, controller={}, device="", counts={}, nodes=[], cards=[],
                      thresholds=[], link_health={"analysed": False, "note": "no evidence", "suspects": []})
    data.domains = [{"name": "rack1", "trays": ["gb001", "gb002"], "states": {"gb001": "admitted",
                                                                              "gb002": "quarantined"},
                     "usable": ["gb001"], "usable_gpus": 4, "size_gpus": 8, "policy": "shrink",
                     "standing": "degraded", "note": "degraded: 1 of 2 trays admitted, a domain of 4 GPUs"}]
    data.forecasts = [{"node": "sim03", "component": "mlx5_0/symbol_error", "hours": 7.9, "low": 5.0, "high": 12.0,
                       "flagged": 1, "source": "soak:c1", "why": "9.00/h, 3.0x the earlier 5.5 h",
                       "points": [(0.0, 0.0), (6.0, 21.0), (11.0, 66.0)], "at_h": 11.0, "count": 66.0,
                       "threshold": 240.0}]
    page = render(data, [])
    domains = page[page.index('<section id="domains">'):page.index('<section id="forecasts">')]
    assert "<td>degraded</td><td>4 of 8</td>" in domains and "gb002 (quarantined)" in domains
    forecasts = page[page.index('<section id="forecasts">'):]
    assert "<td>8 h</td><td>5-12 h</td><td>yes</td>" in forecasts and 'class="projection"' in forecasts
