"""Every mutating command runs inside the one run lifecycle: a crash or an interrupt inside it leaves the run
recorded failed (exit 3) or interrupted (130), in the store and in the run record, and the cluster lock free.

Each case breaks the command at the service call it makes inside the run (the phase, the store write, the
simulator, the session), so what is checked is the lifecycle around it, not the service.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision import pipeline
from provision.cli import main
from provision.repairs import cables as cable_repairs
from provision.sim import cluster as sim_cluster
from provision.state import ClusterLock, NodeState, StateStore
from tests.stores import recorded_run

pytestmark = pytest.mark.fast  # pure: part of make test-fast

CABLE = "leaf-su01-r1/5"  # a leaf-spine cable of the example's design


class Boom(RuntimeError):
    pass


def _raise(error: BaseException):
    def explode(*_args, **_kwargs):
        raise error
    return explode


def _prepare(spec: Path) -> Path:
    """The example's nodes registered (and two provisioned, for a recheck), no host built."""
    assert main(["apply", str(spec), "--phases", "register"]) == 0
    state = spec.parent / ".provision" / "sim16"
    with StateStore(state) as store:
        setup = recorded_run(store, "apply")
        for name in ("sim01", "sim02"):
            store.transition(name, NodeState.PROVISIONED, run_id=setup, evidence={})
    return state


def _break(monkeypatch: pytest.MonkeyPatch, where: str, error: BaseException) -> None:
    explode = _raise(error)
    targets = {
        "apply": (pipeline.RegisterPhase, "run"),
        "burnin": (pipeline.SimulatePhase, "run"),
        "admit": (StateStore, "transition"),
        "quarantine": (StateStore, "transition"),
        "drain": (StateStore, "transition"),
        "sim up": (sim_cluster, "up"),
        "sim down": (sim_cluster, "down"),
        "repaired": (StateStore, "record_cable"),
        "recheck": (cable_repairs, "recheck_cables"),
        "disable-ports": (cable_repairs, "open_session"),
    }
    owner, name = targets[where]
    monkeypatch.setattr(owner, name, explode)


def _argv(command: str, spec: Path, tmp_path: Path) -> list[str]:
    from provision.network.view import view_of_spec
    from provision.sim.ufm import EventWriter
    from provision.spec import load_fabric_spec

    events = tmp_path / "event.log"  # one flap: evidence the reader understands, and below any policy
    fabric = view_of_spec(load_fabric_spec(spec)).fabric
    writer = EventWriter([])
    writer.link_down(fabric, 1_790_000_000.0, next(iter(fabric.cables())))
    events.write_text(writer.text())
    return {
        "apply": ["apply", str(spec), "--phases", "register"],
        "burnin": ["burnin", str(spec)],
        "admit": ["admit", "sim03", "--reason", "checked by hand", "--spec", str(spec)],
        "quarantine": ["quarantine", "sim03", "--reason", "fan noise", "--spec", str(spec)],
        "drain": ["drain", "sim03", "--reason", "bios update", "--spec", str(spec)],
        "sim up": ["sim", "up", str(spec)],
        "sim down": ["sim", "down", str(spec)],
        "repaired": ["topology", "repaired", str(spec), CABLE, "--action", "reseat"],
        "recheck": ["topology", "recheck", str(spec), CABLE],
        "disable-ports": ["topology", "flaps", str(spec), "--events", str(events), "--actions",
                          str(tmp_path / "actions"), "--execute"],
    }[command]


@pytest.mark.parametrize("error, status, code", [(Boom("a bug"), "failed", 3),
                                                 (KeyboardInterrupt(), "interrupted", 130)],
                         ids=["crash", "interrupt"])
@pytest.mark.parametrize("command", ["apply", "burnin", "admit", "quarantine", "drain", "sim up", "sim down",
                                     "repaired", "recheck", "disable-ports"])
def test_a_failure_inside_any_mutating_command_is_recorded_and_frees_the_lock(
        command: str, error: BaseException, status: str, code: int, sim_spec: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    state = _prepare(sim_spec)
    (state / "sim").mkdir(exist_ok=True)  # so `sim down` has something to remove
    before = {row["id"] for row in StateStore(state).runs(limit=1000)}
    _break(monkeypatch, command, error)
    assert main(_argv(command, sim_spec, tmp_path)) == code
    capsys.readouterr()
    with StateStore(state) as store:
        runs = [row for row in store.runs(limit=1000) if row["id"] not in before]
    assert len(runs) == 1, runs
    run = runs[0]
    assert (run["status"], run["exit_code"]) == (status, code)
    assert run["spec_sha256"], "every run names the spec it acted on"
    manifest = json.loads((Path(run["run_dir"]) / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_code"]) == (status, code)
    with ClusterLock(state, "test"):  # free: taken at once, no wait
        pass


def test_an_operator_move_without_a_spec_names_the_last_applied_spec(sim_spec: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    state = _prepare(sim_spec)
    assert main(["drain", "sim04", "--reason", "bios update", "--state-dir", str(state)]) == 0
    with StateStore(state) as store:
        last, applied = store.runs(limit=2)
    assert last["command"] == "drain" and last["status"] == "succeeded"
    assert (last["spec_path"], last["spec_sha256"]) == (applied["spec_path"], applied["spec_sha256"])
    assert applied["spec_sha256"]


def _tree(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder with its size and mtime; SQLite's reader files (``-shm``/``-wal`` beside the
    database, which any reader of a WAL database creates and which hold no data of ours) left out."""
    return {str(path.relative_to(directory)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in sorted(directory.rglob("*")) if not path.name.endswith(("-shm", "-wal"))}


def test_plan_writes_nothing(sim_spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``plan`` is read-only: no store row, no run, no simulated host built (it used to build them)."""
    assert main(["sim", "up", str(sim_spec)]) == 0
    state = sim_spec.parent / ".provision" / "sim16"
    before = _tree(state)
    assert main(["plan", str(sim_spec)]) == 0
    assert "would converge 16 host(s) (not built yet: run apply)" in capsys.readouterr().out
    assert _tree(state) == before
