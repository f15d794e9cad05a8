"""kill -9 of the controller in the middle of a burn-in: nothing admitted by the killed run, no test process
left behind on any simulated node, and the next `provision apply` continues the same campaign from the state
store — it runs only the stages not yet passed and then admits — and leaves alone the node the killed run had
quarantined (issue 55: it used to re-provision and re-test it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from provision.state import StateStore
from tests.conftest import ROOT, run_cli
from tests.simhelpers import processes_of, provision, shrink_to_four_gpus, write_spec

STAGES = ["preflight", "node", "collectives"]


def _events(runs: Path, command: str) -> list[dict]:
    for manifest in sorted(runs.glob("*/manifest.json")):
        if json.loads(manifest.read_text()).get("command") == command:
            path = manifest.parent / "events.jsonl"
            if path.exists():
                return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return []


def _wait_for(predicate, what: str, timeout_s: float, process: subprocess.Popen | None = None,
              left=lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the burn-in ended before {what}: {process.communicate()[1][-3000:]}")
        time.sleep(0.2)
    if process is not None:
        process.kill()
    raise AssertionError(f"timed out waiting for {what} {left()}")


def test_kill_9_mid_burn_in_then_the_next_burn_in_continues_the_campaign(tmp_path: Path) -> None:
    xid = {"kind": "xid", "node": "sim04", "target": "gpu2", "params": {"code": 79}}
    spec = shrink_to_four_gpus(write_spec(tmp_path, [xid], hosts="sim[01-04]", stages=STAGES))
    provision(spec)
    runs = tmp_path / ".provision" / "sim16" / "runs"

    controller = subprocess.Popen([sys.executable, "-m", "provision", "burnin", str(spec), "--json"], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    def collectives_started() -> bool:
        return any(event.get("event") == "burnin.stage.started" and event.get("stage") == "collectives"
                   for event in _events(runs, "burnin"))

    _wait_for(collectives_started, "the collectives stage", 300, controller)
    agents_and_workers = 3 * (1 + 2)  # an agent per node, and the two workers it forks
    _wait_for(lambda: sum("fabric_tests.agent" in line for line in processes_of(tmp_path)) >= agents_and_workers,
              "the collectives workers", 60, controller)
    os.kill(controller.pid, signal.SIGKILL)  # the controller alone, as an OOM kill or a lost laptop would
    controller.communicate(timeout=30)
    assert controller.returncode == -signal.SIGKILL

    # the agents notice that nobody will read their results and take their workers down with them
    _wait_for(lambda: not processes_of(tmp_path), "every test process of the killed run to be gone", 10,
              left=lambda: processes_of(tmp_path))

    status = json.loads(run_cli("status", "--json", str(spec)).stdout)
    states = {node["name"]: node["state"] for node in status["nodes"] if node["in_spec"]}
    assert states == {"sim01": "burning-in", "sim02": "burning-in", "sim03": "burning-in", "sim04": "quarantined"}, \
        "the killed run admitted nobody"
    with StateStore(tmp_path / ".provision" / "sim16") as store:
        held = store.history("sim04")
    assert held[-1]["stage"] == "preflight" and "79" in held[-1]["reason"], held[-1]

    planned = run_cli("plan", str(spec), "--json", timeout=600)  # plan = apply: the same hosts and nodes
    plan = {phase["phase"]: phase for phase in json.loads(planned.stdout)["phases"]}
    assert not plan["provision"].get("hosts") and sorted(plan["burnin"]["nodes"]) == ["sim01", "sim02", "sim03"]

    resumed = run_cli("apply", str(spec), "--json", timeout=600)
    assert resumed.returncode == 1, resumed.stderr  # 1: sim04 stays quarantined
    payload = json.loads(resumed.stdout)
    phases = {phase["phase"]: phase for phase in payload["phases"]}
    assert phases["provision"]["summary"] == "no host to provision", phases["provision"]
    assert sorted(phases["burnin"]["admitted"]) == ["sim01", "sim02", "sim03"]
    assert sorted(phases["burnin"]["nodes"]) == sorted(plan["burnin"]["nodes"])
    with StateStore(tmp_path / ".provision" / "sim16") as store:
        assert store.history("sim04") == held, "the apply moved the node the killed run had quarantined"
    events = [json.loads(line) for line in (Path(payload["run_dir"]) / "events.jsonl").read_text().splitlines()]
    campaign = next(event for event in events if event.get("event") == "burnin.campaign")
    assert campaign["resumed"] is True
    ran = [event["stage"] for event in events if event.get("event") == "burnin.stage.started"]
    assert ran == ["collectives"], "the stages passed before the kill are carried by the campaign, not re-run"

    with StateStore(tmp_path / ".provision" / "sim16") as store:
        burn_ins = [(run["command"], run["status"]) for run in store.runs() if run["command"] in ("burnin", "apply")]
    assert ("burnin", "interrupted") in burn_ins and ("apply", "problems-found") in burn_ins, burn_ins
    assert not processes_of(tmp_path)
