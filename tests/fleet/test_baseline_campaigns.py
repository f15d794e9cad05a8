"""Two deliveries on the simulated cluster, the second judged against the first's baseline, and a node that comes
back from repair.

The first delivery (sim[01-04], healthy) builds the baseline: its 16 GPUs' figures, kept when its campaign ends.
It is exported and imported into the second delivery's state (another cluster's state directory; a copied
simulated cluster keeps its hosts' names), where one GPU computes at 0.85 of its node-mates: inside the node-mate
band the simulated cluster is judged by (0.7), so only the baseline can catch it. It is quarantined for it; then
its GPU is replaced, the operator returns it, and the next apply burns it in again, alone, every stage, and admits
it. A healthy second delivery passes against the same baseline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provision.sim import cluster
from provision.sim.host import replace_gpu
from tests.conftest import run_cli
from tests.simhelpers import provision, shrink_to_four_gpus, write_spec

STAGES = ["preflight", "node"]
#: 15% slow: inside the 0.7 node-mate band, and below the baseline's 5% margin by more than this machine's noise
#: (beside the other test worker's load it measured 0.826-0.842 of its mates, who spread within 2%)
SLOW = {"kind": "slow_gpu", "node": "sim02", "target": "gpu2", "params": {"factor": 0.85}}


def _spec(directory: Path, hosts: str, faults: list[dict]) -> Path:
    directory.mkdir()
    # 1,000 windows, not the example's 100: healthy node-mates beside the other test worker then agree within ~2%
    # (measured: 0.983-1.013; at 100, 0.966-1.05: enough for the 0.7 node-mate band, close to the baseline's 5%)
    spec = shrink_to_four_gpus(write_spec(directory, faults, hosts=hosts, stages=STAGES), repeats=1000)
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["baseline"] = {"margin": 0.05, "min_samples": 16}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def _state(spec: Path) -> Path:
    return spec.parent / ".provision" / "sim16"


def _burn_in(spec: Path) -> dict:
    result = run_cli("burnin", str(spec), "--json", timeout=600)
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> dict:
    spec = _spec(tmp_path_factory.mktemp("first") / "delivery", "sim[01-04]", [])
    provision(spec)
    payload = _burn_in(spec)
    exported = spec.parent / "baseline.json"
    done = run_cli("baseline", "export", str(exported), "--spec", str(spec))
    assert done.returncode == 0, done.stderr
    return {"spec": spec, "payload": payload, "file": exported}


def _second(directory: Path, first: dict, faults: list[dict]) -> tuple[Path, dict]:
    spec = _spec(directory, "sim[01-04]", faults)
    provision(spec)
    imported = run_cli("baseline", "import", str(first["file"]), "--spec", str(spec), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["added"] == json.loads(first["file"].read_text())["samples"].__len__()
    return spec, _burn_in(spec)


def test_the_first_delivery_builds_the_baseline(first: dict) -> None:
    assert first["payload"]["exit_code"] == 0, first["payload"]
    shown = run_cli("baseline", "show", "--spec", str(first["spec"]), "--json")
    profiles = json.loads(shown.stdout)["profiles"]
    assert [(entry["profile"], entry["hardware"]) for entry in profiles] == [
        ("hgx-h100", "H100-SXM-80GB x4, 4 rails, CPU workers")]
    ratio = profiles[0]["figures"]["matmul_ratio"]
    assert ratio["count"] == 16 and abs(ratio["median"] - 1) < 0.02
    assert set(profiles[0]["figures"]) >= {"matmul_tflops", "memory_gbps", "intranode_busbw_gbps"}


def test_a_gpu_inside_the_node_mate_band_is_caught_against_the_baseline_then_returns(
        first: dict, tmp_path: Path) -> None:
    spec, payload = _second(tmp_path / "second", first, [SLOW])
    nodes = {row["node"]: row for row in payload["nodes"]}
    assert nodes["sim02"]["state"] == "quarantined" and nodes["sim02"]["check"] == "baseline", nodes["sim02"]
    assert "GPU 2: matmul_ratio 0." in nodes["sim02"]["reason"], nodes["sim02"]["reason"]
    assert "confirmed on a repeat" in nodes["sim02"]["reason"]
    assert all(nodes[name]["state"] == "admitted" for name in ("sim01", "sim03", "sim04")), nodes
    workers = json.loads((Path(payload["run_dir"]) / "burnin-node.json").read_text())
    passing = {verdict["node"]: verdict for verdict in workers if verdict["passed"]}
    assert all(any(result["check"] == "baseline" and result["outcome"] == "ok" for result in verdict["results"])
               for verdict in passing.values()), "the healthy nodes were judged against the baseline, not silenced"

    state = _state(spec)
    assert replace_gpu(cluster.node_paths(state, "sim02").root.parent, 2) == 1
    returned = run_cli("return", "sim02", "--reason", "RMA: GPU 2 replaced", "--spec", str(spec))
    assert returned.returncode == 0, returned.stderr
    refused = run_cli("return", "sim01", "--reason", "nothing wrong", "--spec", str(spec))
    assert refused.returncode == 2 and "not quarantined" in refused.stderr
    data = yaml.safe_load(spec.read_text())  # the collectives too: a node alone runs them beside partners
    data["burnin"]["stages"] = [*STAGES, "collectives"]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    again = run_cli("apply", str(spec), "--phases", "simulate,register,burnin", "--json", timeout=600)
    applied = json.loads(again.stdout)
    burnin = next(phase for phase in applied["phases"] if phase["phase"] == "burnin")
    assert burnin["admitted"] == ["sim02"], burnin
    assert set(burnin["skipped"]) == {"sim01", "sim03", "sim04"}
    assert burnin["partners"] == ["sim01", "sim03", "sim04"], "admitted nodes lent to the collectives"
    kept = json.loads(run_cli("baseline", "show", "--spec", str(spec), "--json").stdout)["profiles"][0]["figures"]
    assert "busbw_gbps.all_reduce.65536" in kept, "the collectives' figures kept too, per (op, size)"
    judged = json.loads((Path(applied["run_dir"]) / "burnin-collectives.json").read_text())
    assert [verdict["node"] for verdict in judged] == ["sim02"], "a partner is judged by nobody"
    lent = [json.loads(line) for line in (Path(applied["run_dir"]) / "events.jsonl").read_text().splitlines()
            if '"burnin.partners"' in line]
    assert [verdict["node"] for verdict in lent[0]["partners"]] == ["sim01", "sim03", "sim04"]
    status = json.loads(run_cli("status", str(spec), "--json").stdout)
    assert {row["name"]: row["state"] for row in status["nodes"] if row["in_spec"]} == dict.fromkeys(
        ["sim01", "sim02", "sim03", "sim04"], "admitted")
    assert [entry["node"] for entry in burnin["returned"]] == ["sim02"]
    story = burnin["returned"][0]
    assert story["before"]["stage"] == "node" and story["after"] == "admitted"
    assert story["figures"]["matmul_ratio"]["before"] < 0.95 < story["figures"]["matmul_ratio"]["after"]

    report = json.loads(run_cli("report", str(spec), "--json").stdout)
    page = Path(report["report"]).read_text()
    assert "Nodes back from repair" in page and "RMA: GPU 2 replaced" in page
    assert "matmul_ratio against the hgx-h100 baseline (28 samples)" in page, "16 imported, 12 of this delivery's"
    data = json.loads(Path(report["report"]).with_suffix(".json").read_text())
    assert [row["node"] for row in data["returned"]] == ["sim02"]
    assert not any(point["below"] for row in data["baseline"] for point in row["points"])

    history = json.loads(run_cli("history", "sim02", "--spec", str(spec), "--json").stdout)
    moves = [(move["to"], move["stage"], move["by"]) for move in history["moves"]]
    quarantined = moves.index(("quarantined", "node", "pipeline"))
    assert moves[quarantined + 1:] == [("provisioned", None, "operator"), ("burning-in", "preflight", "pipeline"),
                                       ("burning-in", "node", "pipeline"), ("burning-in", "collectives", "pipeline"),
                                       ("admitted", None, "pipeline")], moves
    assert history["moves"][quarantined + 1]["reason"] == "RMA: GPU 2 replaced"
    assert history["moves"][quarantined + 1]["evidence"]["quarantined_in"] == "node"

def test_a_healthy_second_delivery_passes_against_the_baseline(first: dict, tmp_path: Path) -> None:
    _spec_path, payload = _second(tmp_path / "healthy", first, [])
    assert payload["exit_code"] == 0, payload
    assert {row["state"] for row in payload["nodes"]} == {"admitted"}
    verdicts = json.loads((Path(payload["run_dir"]) / "burnin-node.json").read_text())
    outcomes = {result["outcome"] for verdict in verdicts for result in verdict["results"]
                if result["check"] == "baseline"}
    assert outcomes == {"ok"}
