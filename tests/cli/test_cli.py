"""The provision CLI as users run it: separate processes, real exit codes, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision import cli, pipeline
from provision.state import StateStore
from tests.conftest import BROKEN, EXAMPLES, run_cli

LOCATED = r"^[^:]+:\d+:\d+: "


def test_validate_every_example() -> None:
    result = run_cli("validate", *[str(path) for path in sorted(EXAMPLES.glob("*.yaml"))])
    assert result.returncode == 0, result.stderr
    assert "cluster h100-4088, 511 nodes (4,088 GPUs), 3-tier fabric: 128 leaves, 128 spines, 64 cores" in result.stdout


def test_validate_broken_specs_prints_located_errors_and_exits_2() -> None:
    files = sorted(BROKEN.glob("*.yaml"))
    result = run_cli("validate", *[str(path) for path in files])
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    expected = sum(len(path.with_suffix(".expected").read_text().splitlines()) for path in files)
    assert len(lines) == expected
    assert all(line.split(":")[1].isdigit() and line.split(":")[2].isdigit() for line in lines)
    assert "Traceback" not in result.stderr


def test_validate_json_carries_issues_and_thresholds() -> None:
    result = run_cli("validate", "--json", str(EXAMPLES / "sim-cluster.yaml"), str(BROKEN / "rail_map.yaml"))
    assert result.returncode == 2
    payload = json.loads(result.stdout)
    good, bad = payload["files"]
    assert good["ok"] and good["thresholds"]["hgx-h100"]["ib_write_bw_gbps"]["value"] == 360
    assert not bad["ok"] and {issue["path"] for issue in bad["issues"]} >= {"hardware.hgx.rails.mlx5_3"}


def test_plan_apply_plan_status(sim_spec: Path) -> None:
    state = sim_spec.parent / ".provision" / "sim16"
    first = run_cli("plan", str(sim_spec))
    assert first.returncode == 0 and "would add 16 new node(s): sim[01-16]" in first.stdout
    assert not state.exists(), "plan must not write anything"

    applied = run_cli("apply", str(sim_spec), "--phases", "simulate,register")
    assert applied.returncode == 0, applied.stderr
    assert "add 16 new node(s)" in applied.stdout and "sim16: 16 nodes" in applied.stdout

    again = run_cli("plan", str(sim_spec), "--phases", "simulate,register")
    assert again.stdout.strip() == "No changes: sim16 (16 nodes) matches the spec."

    status = run_cli("status", "--json", str(sim_spec))
    assert status.returncode == 0
    payload = json.loads(status.stdout)
    assert [node["name"] for node in payload["nodes"]] == [f"sim{n:02d}" for n in range(1, 17)]
    assert all(node["state"] == "new" for node in payload["nodes"])
    assert payload["counts"]["new"] == 16 and payload["last_run"]["status"] == "succeeded"

    run_dir = Path(payload["last_run"]["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["spec"]["sha256"] == payload["last_run"]["spec_sha256"]
    assert manifest["hosts"] == manifest["rank_order"] == [node["name"] for node in payload["nodes"]]
    assert manifest["seeds"]["simulation"] == 7

    with StateStore(state) as store:  # per-host results of the run
        results = store.results(payload["last_run"]["id"])
    assert [(row["node"], row["outcome"]) for row in results][:2] == [("sim01", "added"), ("sim02", "added")]
    assert len(results) == 16 and results[0]["detail"]["address"] == "127.0.0.11"
    assert oct(run_dir.parent.stat().st_mode & 0o777) == "0o700"

    # status with no spec finds the only cluster under ./.provision
    bare = run_cli("status", cwd=sim_spec.parent)
    assert bare.returncode == 0 and "new" in bare.stdout and "sim[01-16]" in bare.stdout


def test_a_shrunk_spec_keeps_the_history_of_removed_nodes(sim_spec: Path) -> None:
    phases = ("--phases", "simulate,register")
    assert run_cli("apply", str(sim_spec), *phases).returncode == 0
    data = yaml.safe_load(sim_spec.read_text())
    data["nodes"]["groups"][0]["hosts"] = "sim[01-14]"
    data["simulation"]["faults"] = [fault for fault in data["simulation"]["faults"]
                                    if fault.get("node") not in ("sim15", "sim16")]  # faults of removed nodes go too
    sim_spec.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = run_cli("plan", str(sim_spec), *phases)
    assert "would mark 2 no longer in the spec (history kept): sim[15-16]" in plan.stdout
    assert run_cli("apply", str(sim_spec), *phases).returncode == 0
    status = run_cli("status", str(sim_spec))
    assert "not in the spec any more (history kept): sim[15-16]" in status.stdout
    payload = json.loads(run_cli("status", "--json", str(sim_spec)).stdout)
    assert sum(payload["counts"].values()) == 14
    assert {node["name"]: node["in_spec"] for node in payload["nodes"]}["sim16"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["apply", "{spec}", "--limit", "sim[17-18]"], "not in the spec: sim[17-18]"),
        (["apply", "{spec}", "--limit", "sim[9-1]"], "runs backwards"),
        (["apply", "{spec}", "--phases", "teleport"], "unknown phase(s) teleport"),
        (["apply", "{spec}", "--limit", "sim01", "--phases", "simulate,register,provision", "--forks", "0"],
         "Invalid value for '--forks'"),
        (["apply"], "Missing argument 'SPEC'"),
        (["frobnicate"], "No such command"),
        (["status", "--state-dir", "{tmp}/nothing"], "no state store"),
        (["apply", "{tmp}/absent.yaml"], "cannot read"),
    ],
)
def test_bad_usage_exits_2_without_touching_state(sim_spec: Path, args: list[str], message: str) -> None:
    filled = [arg.format(spec=sim_spec, tmp=sim_spec.parent) for arg in args]
    result = run_cli(*filled)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (sim_spec.parent / ".provision").exists()


def test_a_held_lock_names_the_holder(sim_spec: Path) -> None:
    state = sim_spec.parent / ".provision" / "sim16"
    state.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time\nfrom pathlib import Path\nfrom provision.state import ClusterLock\n"
         "with ClusterLock(Path(sys.argv[1]), 'apply'):\n    print('locked', flush=True); time.sleep(30)", str(state)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        result = run_cli("apply", str(sim_spec), "--phases", "simulate,register")
        assert result.returncode == 2
        assert f"another `provision apply` (pid {holder.pid}, started" in result.stderr
        assert not (state / "runs").exists(), "nothing may happen without the lock"
    finally:
        holder.kill()
        holder.wait()


def test_an_internal_error_exits_3_and_names_the_run_directory(sim_spec: Path, monkeypatch, capsys) -> None:
    def explode(self, context):
        raise RuntimeError("simulated bug in a phase")

    monkeypatch.setattr(pipeline.RegisterPhase, "run", explode)
    code = cli.main(["apply", str(sim_spec), "--phases", "register"])  # the phase that fails, alone
    assert code == 3
    stderr = capsys.readouterr().err
    assert "internal error: RuntimeError('simulated bug in a phase')" in stderr
    error_file = Path(stderr.split("details in ")[1].split()[0])
    assert "simulated bug in a phase" in error_file.read_text()
    manifest = json.loads((error_file.parent / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_code"]) == ("failed", 3)


def test_secrets_from_the_environment_reach_no_file(tmp_path: Path) -> None:
    from tests.simhelpers import shrink_to_four_gpus, write_spec

    canary = "canary-7f3e9a-never-store-me"
    # every phase, the playbooks included, and the stages that start workers with the NCCL environment
    spec = shrink_to_four_gpus(write_spec(tmp_path, [], hosts="sim[01-02]",
                                          stages=["preflight", "node", "collectives"]))
    spec.write_text(spec.read_text().replace("connection:\n", "connection:\n  become_password: {env: "
                                                              "PROVISION_BECOME_PASSWORD}\n"))
    missing = run_cli("apply", str(spec), "--phases", "simulate,register,provision")
    assert missing.returncode == 2
    assert "connection.become_password: environment variable PROVISION_BECOME_PASSWORD is not set" in missing.stderr
    assert not (tmp_path / ".provision").exists(), "a refused apply changes nothing"
    result = run_cli("apply", str(spec), timeout=600, env={
        "PROVISION_BECOME_PASSWORD": canary, "BMC_PASSWORD": canary, "NCCL_IB_TOKEN": canary,
        "NCCL_IB_HCA": "=mlx5_0,mlx5_3"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "provision: 2 host(s) converged" in result.stdout
    assert canary not in result.stdout + result.stderr
    state = tmp_path / ".provision"
    files = [path for path in state.rglob("*") if path.is_file() and "/sim/" not in str(path)]
    assert files
    for path in files:
        assert canary.encode() not in path.read_bytes(), path
    manifests = list(state.rglob("manifest.json"))
    assert json.loads(manifests[0].read_text())["environment"]["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3"


def test_hostlist_commands_match_scontrol() -> None:
    expanded = run_cli("hostlist", "expand", "gpu[001-003,009],spare01")
    assert expanded.stdout.split() == ["gpu001", "gpu002", "gpu003", "gpu009", "spare01"]
    compressed = run_cli("hostlist", "compress", "gpu003,gpu001", "gpu002", "spare01")
    assert compressed.stdout.strip() == "gpu[001-003],spare01"
    assert run_cli("hostlist", "expand", "gpu[9-1]").returncode == 2
