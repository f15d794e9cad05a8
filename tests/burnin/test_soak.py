"""The soak stage end to end on the simulated cluster, its clock at an hour in two seconds: faults that develop over
hours fail their node on the trend that shows them, the acceptance states what the soak demonstrated, and a soak
whose controller was killed continues with the time it still owes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from provision.spec.faults import CATALOG
from tests import promstack
from tests.burnin.test_resume import _wait_for
from tests.conftest import ROOT, run_cli
from tests.simhelpers import processes_of, provision, shrink_to_four_gpus, write_spec

FAULTS = [
    # strikes some 14 simulated hours after injection: after preflight (seconds, hours on this clock), mid-soak
    {"kind": "thermal_throttle_after", "node": "sim02", "target": "gpu1", "params": {"after_h": 14}},
    # a link degrading: its symbol errors' rate doubles every 4 simulated hours (from 1/h at injection), past the
    # soak's allowance (10/h over 24 h) some 10-20 hours in: forecast before its count gets there (issue 54)
    {"kind": "symbol_errors_growing", "node": "sim03", "target": "mlx5_0",
     "params": {"per_hour": 1, "doubling_h": 4}},
    # its clock sags to 0.75 of its mates' under load, naming no reason, some hours into the soak
    {"kind": "clock_sag", "node": "sim04", "target": "gpu2", "params": {"after_h": 8, "factor": 0.75}},
    # one NVLink retraining every four simulated hours from injection (what preceded a GB200's Xid 149 by five days):
    # slow enough that a provisioning of 800 s (400 h here) keeps it under preflight's nvlink_errors limit of 100
    {"kind": "nvlink_recovery_growing", "node": "sim05", "target": "gpu3", "params": {"link": 5, "per_hour": 0.25}},
]


def _soak_spec(directory: Path, faults: list[dict], hosts: str, duration: str = "24h",
               time_scale: int = 3600) -> Path:
    spec = shrink_to_four_gpus(write_spec(directory, faults, hosts=hosts, stages=["preflight", "soak"],
                                          admission={"max_failure_percent": {"burnin": 100},
                                                     "acceptance": {"mtbf_hours": 50, "confidence": 0.5}}))
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["soak"] = {"duration": duration, "poll_interval_s": 3600}
    data["simulation"]["time_scale"] = time_scale  # 3600: a simulated hour a second
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def _samples(spec: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(spec.parent / ".provision" / "sim16" / "state.db")) as db:
        return db.execute(sql).fetchall()


@pytest.fixture(scope="module")
def soaked(tmp_path_factory: pytest.TempPathFactory) -> dict:
    # a simulated hour in two real seconds: at one a second, the CI of stop 62 (both workers' clusters on two cores)
    # polled every five simulated hours and started the load late, so the sagging GPU was seen busy in fewer than
    # the three polls that fail a node and its node was admitted; on this clock the same pace is twice the polls
    spec = _soak_spec(tmp_path_factory.mktemp("soak"), FAULTS, "sim[01-05]", time_scale=1800)
    provision(spec)
    result = run_cli("burnin", str(spec), "--json", timeout=600)
    assert result.stdout, result.stderr
    payload = json.loads(result.stdout)
    return {"spec": spec, "payload": payload, "nodes": {row["node"]: row for row in payload["nodes"]}}


def test_a_healthy_node_soaks_its_hours_under_load_and_is_admitted(soaked: dict) -> None:
    assert soaked["nodes"]["sim01"]["state"] == "admitted", soaked["nodes"]["sim01"]
    polls = _samples(soaked["spec"], "SELECT COUNT(*), MAX(at_s) FROM soak_samples "
                                     "WHERE node = 'sim01' AND series = 'gpu0/clocks_event_reasons'")
    count, reached = polls[0]
    # hourly polls over the 24 simulated hours, a simulated hour a real second: a poll (five commands on the node)
    # that outlasts its second on a busy machine skips the next, and with both workers' clusters on two cores 11 of
    # 24 were seen (a clean-clone make test in session 31); a third of them, reaching the end, is the cadence held
    assert count >= 8 and reached == 24 * 3600, polls
    rounds = _samples(soaked["spec"], "SELECT COUNT(*) FROM soak_samples WHERE node = 'sim01' "
                                      "AND series = 'load/passed'")[0][0]
    assert rounds >= 1, "the node stage's load ran through the soak"
    clocks = dict(_samples(soaked["spec"], "SELECT series, COUNT(*) FROM soak_samples WHERE node = 'sim01' "
                                           "GROUP BY series"))
    assert clocks["gpu0/sm_clock_mhz"] == clocks["gpu0/power_w"] == count, clocks
    assert clocks["gpu0/tflops"] == rounds, "each round of load keeps every GPU's throughput"
    # between rounds an idle GPU reads 345 MHz, under load the H100's 1980: both were polled
    assert {value for (value,) in _samples(soaked["spec"], "SELECT DISTINCT value FROM soak_samples WHERE "
                                           "node = 'sim01' AND series = 'gpu0/sm_clock_mhz'")} == {345.0, 1980.0}
    textfile = (soaked["spec"].parent / ".provision" / "metrics" / "provision_sim16.prom").read_text()
    assert 'provision_soak_gpu_temperature_celsius{campaign=' in textfile
    assert 'counter="symbol_error",node="sim03",port="mlx5_0"}' in textfile
    # the textfile of a whole burn-in through the soak, as the sink rewrote it, passes promtool's lint (issue 56:
    # only a textfile without soak data was linted, and the soak's counter name failed it)
    if promstack.PROMTOOL:
        linted = subprocess.run([promstack.PROMTOOL, "check", "metrics"], input=textfile, text=True,
                                capture_output=True, timeout=30)
        assert linted.returncode == 0 and not linted.stdout.strip(), linted.stdout + linted.stderr


@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: fault["kind"])
def test_what_develops_over_hours_fails_its_node_on_its_trend(soaked: dict, fault: dict) -> None:
    kind = CATALOG[fault["kind"]]
    node = soaked["nodes"][fault["node"]]
    assert (node["state"], node["stage"], node["check"]) == ("quarantined", kind.stage, kind.check), node
    assert fault["target"] in node["reason"], node["reason"]


def test_a_degrading_link_is_forecast_before_its_count_passes_the_allowance(soaked: dict) -> None:
    allowance = 10 * 24  # symbol errors: 10 an hour over the 24-hour soak (checks.soak.IB_COUNTERS)
    samples = _samples(soaked["spec"], "SELECT at_s, value FROM soak_samples WHERE node = 'sim03' AND "
                                       "series = 'mlx5_0/symbol_error' ORDER BY at_s")
    crossed = next(at_s / 3600 for at_s, value in samples if value - samples[0][1] > allowance)
    rows = _samples(soaked["spec"], "SELECT node, component, first_flagged_h, threshold FROM forecasts "
                                    "WHERE first_flagged_h IS NOT NULL")
    # the healthy ports: no trend; the degrading one flagged before its count passed the allowance
    assert [(node, component, threshold) for node, component, _, threshold in rows] == [
        ("sim03", "mlx5_0/symbol_error", allowance)], rows
    assert rows[0][2] < crossed, (rows, samples)
    status = run_cli("status", str(soaked["spec"]), "--json", timeout=60)
    shown = json.loads(status.stdout)["forecasts"]
    assert [(row["node"], row["component"], row["flagged"]) for row in shown if row["flagged"]] == [
        ("sim03", "mlx5_0/symbol_error", 1)], shown
    textfile = (soaked["spec"].parent / ".provision" / "metrics" / "provision_sim16.prom").read_text()
    assert 'provision_forecast_flagged{cluster="sim16",component="mlx5_0/symbol_error",node="sim03"' in textfile


def test_the_acceptance_says_what_the_soak_demonstrated(soaked: dict, tmp_path: Path) -> None:
    text = str(soaked["payload"])
    assert "4 failure(s) in 120 node-hours" in text, text[-2000:]
    html = tmp_path / "report.html"
    result = run_cli("report", str(soaked["spec"]), "--output", str(html), timeout=120)
    assert result.returncode == 0, result.stderr
    page = html.read_text()
    assert "Soak: 4 failure(s) in 120 node-hours" in page
    soak = page[page.index('<section id="soak">'):page.index('<section id="fabric">')]
    for node in ("sim02", "sim03", "sim04", "sim05"):  # every failed node's telemetry, with a healthy one for reference
        assert f"<h3>{node} — failed the soak</h3>" in soak
    assert "<h3>sim01</h3>" in soak and 'aria-label="sim04: SM clock"' in soak
    assert 'class="point flagged"' in soak  # the sagging GPU drawn in red
    assert (tmp_path / "report.soak.csv").read_text().startswith("node,series,hours,value\n")
    forecasts = page[page.index('<section id="forecasts">'):page.index('<section id="soak">')]
    assert "mlx5_0/symbol_error" in forecasts and 'class="projection"' in forecasts


def test_a_soak_killed_mid_way_continues_with_the_time_it_owes(tmp_path: Path) -> None:
    spec = _soak_spec(tmp_path, [], "sim[01-02]", duration="30h")
    provision(spec)
    reached = "SELECT COALESCE(MAX(at_s), 0) FROM soak_samples"
    controller = subprocess.Popen([sys.executable, "-m", "provision", "burnin", str(spec), "--json"], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: (spec.parent / ".provision" / "sim16" / "state.db").exists()
              and _samples(spec, reached)[0][0] >= 8 * 3600, "eight soaked hours", 120, controller)
    os.kill(controller.pid, signal.SIGKILL)
    controller.wait(timeout=30)
    before = _samples(spec, reached)[0][0]
    _wait_for(lambda: not processes_of(tmp_path), "every load process of the killed run to be gone", 30)
    again = run_cli("burnin", str(spec), "--json", timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    first_after = _samples(spec, f"SELECT MIN(at_s) FROM soak_samples WHERE at_s > {before}")[0][0]
    assert _samples(spec, reached)[0][0] == 30 * 3600
    assert first_after - before <= 2 * 3600, "the soak's clock went on from where it stood"
    polls = _samples(spec, "SELECT at_s FROM soak_samples WHERE node = 'sim01' "
                           "AND series = 'gpu0/clocks_event_reasons' ORDER BY at_s")
    assert [at for at, in polls] == sorted({at for at, in polls}), "one soak: no hour polled twice"
    assert len(polls) <= 30 + 4, f"the owed {30 - before / 3600:.0f} h were soaked, not 30 again: {len(polls)}"
