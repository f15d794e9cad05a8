"""NVLink domains as Slurm's topology.conf: a job placed inside one domain. The block form (topology/block, Slurm
23.11+) and the tree form (any Slurm: the one this machine's slurmctld 22.05 accepts, tested against it), and a
domain a failed tray left smaller: its policy says whether what remains runs jobs, and the file says its size."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.state import NodeState, StateStore
from tests import slurmcluster
from tests.conftest import EXAMPLES, run_cli
from tests.stores import recorded_run
from topology.export import slurm_domains
from topology.hostlist import expand

EXAMPLE = EXAMPLES / "gb200-nvl72.yaml"


@pytest.mark.fast
def test_a_block_a_domain_and_the_least_block_size_the_smallest_domain() -> None:
    text = slurm_domains([("rack1", ["gb002", "gb001"]), ("rack2", ["gb003"]), ("rack3", [])], plugin="block",
                         notes={"rack3": "no tray admitted"})
    lines = text.splitlines()
    assert lines[0] == "# Slurm topology.conf (TopologyPlugin=topology/block)"
    assert [line for line in lines if not line.startswith("#")] == [
        "BlockName=rack1 Nodes=gb[001-002]", "BlockName=rack2 Nodes=gb003", "BlockSizes=1"]
    assert "# rack3: no tray admitted" in lines
    tree = slurm_domains([("rack1", ["gb001", "gb002"]), ("rack2", ["gb003"])], plugin="tree")
    assert [line for line in tree.splitlines() if not line.startswith("#")] == [
        "SwitchName=rack1 Nodes=gb[001-002]", "SwitchName=rack2 Nodes=gb003",
        "SwitchName=nvlink-domains Switches=rack[1-2]"]


def _one_tray_of_each_rack_failed(state: Path) -> None:
    with StateStore(state) as store:
        trays = expand("gb[001-036]")
        store.register([(tray, "gb200-tray") for tray in trays], "r0")
        run = recorded_run(store, "apply")
        for tray in trays:
            store.transition(tray, NodeState.PROVISIONED, run_id=run)
            store.transition(tray, NodeState.BURNING_IN, run_id=run, stage="preflight")
            failed = tray in ("gb005", "gb020")  # one tray of each rack
            store.transition(tray, NodeState.QUARANTINED if failed else NodeState.ADMITTED, run_id=run,
                             stage="preflight" if failed else None, reason="gpu_fabric" if failed else "")


@pytest.mark.fast
def test_the_report_and_the_metrics_say_the_size_each_domain_has_left(tmp_path: Path) -> None:
    from provision.fleet.domains import DEGRADED, HELD, WHOLE, standings
    from provision.sinks.metrics import domain_families, exposition
    from provision.spec import load_spec

    _one_tray_of_each_rack_failed(tmp_path / "state")
    loaded = load_spec(EXAMPLE)
    assert [(one.name, one.standing, one.usable_gpus) for one in standings(loaded, None)] == [
        ("rack1", WHOLE, 72), ("rack2", WHOLE, 72)]  # as designed
    with StateStore(tmp_path / "state") as store:
        states = {record.name: record.state.value for record in store.nodes()}
        found = standings(loaded, states)
        text = exposition(domain_families(loaded, store, "gb200"))
    assert [(one.name, one.standing, one.usable_gpus, len(one.usable)) for one in found] == [
        ("rack1", DEGRADED, 68, 17), ("rack2", HELD, 0, 0)]
    assert found[0].states["gb005"] == "quarantined"
    lines = set(text.splitlines())
    assert 'provision_nvlink_domain_trays{cluster="gb200",domain="rack1",state="admitted"} 17' in lines
    assert 'provision_nvlink_domain_trays{cluster="gb200",domain="rack1",state="quarantined"} 1' in lines
    assert 'provision_nvlink_domain_usable_gpus{cluster="gb200",domain="rack2",standing="held"} 0' in lines
    assert 'provision_nvlink_domain_usable_gpus{cluster="gb200",domain="rack1",standing="degraded"} 68' in lines


def test_after_a_failed_tray_each_domains_policy_says_what_runs_jobs(tmp_path: Path) -> None:
    _one_tray_of_each_rack_failed(tmp_path / "state")
    result = run_cli("topology", "slurm", str(EXAMPLE), "--admitted", "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr
    assert "# rack1: degraded: 17 of 18 trays admitted, a domain of 68 GPUs" in result.stdout
    assert "BlockName=rack1 Nodes=gb[001-004,006-018]" in result.stdout
    assert "# rack2: 17 of 18 trays admitted, under the 18 its policy (hold) needs: no block" in result.stdout
    assert "BlockName=rack2" not in result.stdout and "BlockSizes=17" in result.stdout


@pytest.mark.fast
def test_a_spec_without_domains_keeps_its_fabrics_tree_and_refuses_blocks() -> None:
    result = run_cli("topology", "slurm", str(EXAMPLES / "sim-cluster.yaml"), "--plugin", "block")
    assert result.returncode == 2 and "this spec has no nvlink_domains" in result.stderr


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_a_real_slurmctld_accepts_the_domains_as_switches(tmp_path: Path) -> None:
    result = run_cli("topology", "slurm", str(EXAMPLE), "--plugin", "tree")
    assert result.returncode == 0, result.stderr
    with slurmcluster.running(tmp_path / "slurm", expand("gb[001-036]"), topology=result.stdout) as cluster:
        shown = cluster.scontrol("show", "topology").stdout
    assert "SwitchName=rack1" in shown and "Nodes=gb[001-018]" in shown
    assert "SwitchName=rack2" in shown and "Nodes=gb[019-036]" in shown
    assert "SwitchName=nvlink-domains" in shown and "Switches=rack[1-2]" in shown
