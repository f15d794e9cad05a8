"""The cluster in Prometheus: the textfile passes ``promtool check metrics``, a real node_exporter serves it and a
real Prometheus, scraping it on loopback, answers PromQL with the example's 9 admitted and 7 quarantined nodes.

The verdicts are set here by operator moves (each a recorded run, each rewriting the textfile the spec names):
the burn-in that reaches the same verdicts takes nine minutes and is `make demo`'s job; every fault's own stage
and check is proved by the burn-in tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from provision.cli import main
from provision.sinks.metrics import Family, exposition
from provision.spec.faults import CATALOG
from tests import promstack

# The example's verdicts as `make demo` reaches them: node -> (stage, check).
EXAMPLE_QUARANTINED = {"sim07": ("preflight", "xid"), "sim09": ("node", "matmul"),
                       "sim12": ("collectives", "watchdog"), "sim13": ("collectives", "correctness"),
                       "sim14": ("training", "step_time"), "sim15": ("dcgm", "dcgm_targeted_power"),
                       "sim16": ("soak", "soak_ib_errors")}


@pytest.mark.fast
def test_exposition_escapes_label_values_and_keeps_families_whole() -> None:
    family = Family("provision_nodes", "Nodes of the spec in each lifecycle state")
    family.add(11, cluster="sim16", state="admitted")
    family.add(2.5e12, cluster='a "quoted"\\name\nx', state="quarantined")
    text = exposition([family, Family("provision_empty", "no samples: not written")])
    assert text.splitlines() == [
        "# HELP provision_nodes Nodes of the spec in each lifecycle state",
        "# TYPE provision_nodes gauge",
        'provision_nodes{cluster="sim16",state="admitted"} 11',
        'provision_nodes{cluster="a \\"quoted\\"\\\\name\\nx",state="quarantined"} 2500000000000',
    ]


@pytest.mark.fast
def test_the_example_quarantines_exactly_its_faulty_nodes() -> None:
    """The verdicts above follow from the example's faults (a changed example changes this test)."""
    spec = yaml.safe_load((Path(__file__).parents[2] / "examples" / "sim-cluster.yaml").read_text())
    quarantining = {fault["node"]: (CATALOG[fault["kind"]].stage, CATALOG[fault["kind"]].check)
                    for fault in spec["simulation"]["faults"]
                    if fault.get("node") and CATALOG[fault["kind"]].stage != "provision"}
    assert quarantining == EXAMPLE_QUARANTINED


@pytest.mark.skipif(not (promstack.PROMETHEUS and promstack.NODE_EXPORTER and promstack.PROMTOOL),
                    reason=promstack.MISSING)
def test_prometheus_scrapes_the_textfile_and_counts_the_verdicts(sim_spec: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", str(sim_spec), "--phases", "simulate,register"]) == 0
    for node, (stage, check) in EXAMPLE_QUARANTINED.items():
        assert main(["quarantine", node, "--reason", f"{stage}/{check}: as the burn-in finds it",
                     "--spec", str(sim_spec)]) == 0
    assert main(["admit", "sim[01-06,08,10-11]", "--reason", "burn-in passed", "--spec", str(sim_spec)]) == 0

    textfile = sim_spec.parent / ".provision" / "metrics" / "provision_sim16.prom"  # the spec's metrics.textfile_dir
    assert textfile.is_file(), "the operator's move did not rewrite the textfile the spec names"
    assert not [path for path in textfile.parent.iterdir() if path.suffix != ".prom"], "a temporary file was left"
    linted = subprocess.run([promstack.PROMTOOL, "check", "metrics"], input=textfile.read_text(), text=True,
                            capture_output=True, timeout=30)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert 'provision_nodes{cluster="sim16",state="admitted"} 9' in textfile.read_text()
    assert 'provision_nodes_needed{cluster="sim16"} 15' in textfile.read_text()  # 16 x (1 - spare_fraction 0.1)

    capsys.readouterr()
    assert main(["status", str(sim_spec)]) == 0
    assert ("capacity: 9 of 16 node(s) admitted; the delivery needs 15 (spare_fraction 0.1): short by 6"
            in capsys.readouterr().out)

    explicit = tmp_path / "textfile"
    assert main(["metrics", str(sim_spec), "--textfile", str(explicit)]) == 0
    assert (explicit / "provision_sim16.prom").read_text().count("\n") == textfile.read_text().count("\n")

    with promstack.running(textfile.parent, tmp_path) as stack:
        admitted = stack.wait_for('count(provision_node_state{cluster="sim16",state="admitted"} == 1)')
        quarantined = stack.query('count(provision_node_state{cluster="sim16",state="quarantined"} == 1)')
        held = stack.query('provision_node_state{cluster="sim16",state="quarantined"} == 1')
        by_state = {row["metric"]["state"]: row["value"][1] for row in stack.query("provision_nodes")}
    assert admitted[0]["value"][1] == "9"
    assert quarantined[0]["value"][1] == "7"
    assert sorted(row["metric"]["node"] for row in held) == sorted(EXAMPLE_QUARANTINED)
    assert by_state["admitted"] == "9" and by_state["quarantined"] == "7" and by_state["new"] == "0"


@pytest.mark.fast
def test_the_grafana_dashboard_reads_only_metrics_we_write() -> None:
    """Every metric name in the dashboard's queries is one `provision metrics` writes (a rename breaks this)."""
    import inspect
    import json
    import re

    from provision.sinks import metrics

    written = set(re.findall(r'Family\("(provision_[a-z_]+)"', inspect.getsource(metrics)))
    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana" / "provision.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"provision_[a-z_]+", target["expr"])}
    queried |= set(re.findall(r"provision_[a-z_]+", dashboard["templating"]["list"][1]["definition"]))
    assert queried and queried <= written, queried - written
    assert {panel["id"] for panel in dashboard["panels"]} == set(range(1, len(dashboard["panels"]) + 1))


@pytest.mark.skipif(not promstack.PROMTOOL, reason=promstack.MISSING)
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query of the dashboard (as a recording rule, with the cluster variable filled in)."""
    import json

    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana" / "provision.json").read_text())
    rules = [{"record": f"provision:dashboard_query_{index}", "expr": target["expr"].replace("$cluster", "sim16")}
             for index, target in enumerate(target for panel in dashboard["panels"] for target in panel["targets"])]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run([promstack.PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True,
                             timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(rules)} rules found" in checked.stdout


@pytest.mark.fast
@pytest.mark.parametrize(("nodes", "admitted", "spare", "needed", "line_end"), [
    (16, 11, 0.1, 15, "short by 4"),
    (16, 16, 0.1, 15, "met, 1 spare"),
    (16, 12, 0.25, 12, "met, 0 spare"),  # 16 x 0.75 is 12, not 13
    (511, 500, 0.0, 511, "short by 11"),
])
def test_spare_fraction_says_whether_the_delivery_is_met(nodes: int, admitted: int, spare: float, needed: int,
                                                         line_end: str) -> None:
    from provision.fleet.capacity import capacity

    enough = capacity(nodes, admitted, spare)
    assert enough.needed == needed and enough.line().endswith(line_end)


@pytest.mark.fast
def test_each_trending_forecast_is_exported_with_its_flag_and_one_without_a_trend_is_not(tmp_path: Path) -> None:
    from provision.sinks.metrics import forecast_families
    from provision.state import StateStore
    from provision.state.store import ForecastRecord

    with StateStore(tmp_path) as store:
        store.record_forecasts("watch", [
            ForecastRecord("sim03", "leaf01/7 SymbolErrorCounter", 24.0, 15.8, 9.0, 30.0, 16.2, 259.0, 1000.0, True,
                           "16.18/h, 4.0x the earlier 12 h: 741 events to go"),
            ForecastRecord("sim04", "leaf01/8 SymbolErrorCounter", 24.0, None, None, None, 9.0, 216.0, 1000.0,
                           False, "no trend: 9.00/h now against 9.00/h before (steady)")], run_id="pass-1")
        text = exposition(forecast_families(store, "sim16"))
    lines = set(text.splitlines())
    labels = 'cluster="sim16",component="leaf01/7 SymbolErrorCounter",node="sim03",source="watch"'
    assert f"provision_forecast_seconds{{{labels}}} 56880" in lines
    assert f"provision_forecast_flagged{{{labels}}} 1" in lines
    assert "sim04" not in text  # no trend: no projection to export (absent, not health)
    if promstack.PROMTOOL:
        linted = subprocess.run([promstack.PROMTOOL, "check", "metrics"], input=text, text=True,
                                capture_output=True, timeout=30)
        assert linted.returncode == 0 and not linted.stdout.strip(), linted.stdout + linted.stderr


@pytest.mark.fast
def test_the_latest_soak_poll_of_each_node_is_exported_in_base_units(tmp_path: Path) -> None:
    from provision.sinks.metrics import soak_families
    from provision.state import StateStore

    with StateStore(tmp_path) as store:
        campaign, _ = store.open_campaign("run-1", ["soak"], "sha")
        store.record_soak(campaign, "sim01", 3600.0, {"gpu0/sm_clock_mhz": 1980.0, "gpu0/temperature_c": 64.0,
                                                      "mlx5_0/symbol_error": 3.0, "load/passed": 1.0})
        store.record_soak(campaign, "sim01", 7200.0, {"gpu0/sm_clock_mhz": 1485.0, "gpu0/power_w": 512.5,
                                                      "mlx5_0/symbol_error": 9.0, "xid/read": 1.0})
        text = exposition(soak_families(store, "sim16"))
    lines = set(text.splitlines())
    labels = 'campaign="run-1",cluster="sim16",gpu="0",node="sim01"'
    assert f"provision_soak_gpu_sm_clock_hertz{{{labels}}} 1485000000" in lines
    assert f"provision_soak_gpu_temperature_celsius{{{labels}}} 64" in lines  # its latest poll: the first
    assert f"provision_soak_gpu_power_watts{{{labels}}} 512.5" in lines
    assert ('provision_soak_ib_port_errors{campaign="run-1",cluster="sim16",counter="symbol_error",node="sim01",'
            'port="mlx5_0"} 9') in lines
    assert 'provision_soak_poll_seconds{campaign="run-1",cluster="sim16",node="sim01"} 7200' in lines
    assert "load" not in text and "xid" not in text  # the soak's bookkeeping is not telemetry
    if promstack.PROMTOOL:  # promtool refused the name it had ("should not include type 'counter'", issue 56)
        linted = subprocess.run([promstack.PROMTOOL, "check", "metrics"], input=text, text=True,
                                capture_output=True, timeout=30)
        assert linted.returncode == 0 and not linted.stdout.strip(), linted.stdout + linted.stderr
