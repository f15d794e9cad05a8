"""The state store: lifecycle rules, migrations, permissions, the cluster lock."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.state import ClusterLock, LockHeld, NodeState, StateStore, StoreError, TransitionError, lifecycle
from provision.state.migrations import MIGRATIONS
from tests.stores import recorded_run


@pytest.fixture
def store(tmp_path: Path):
    with StateStore(tmp_path / "state") as opened:
        opened.register([("n1", "g"), ("n2", "g"), ("n3", "g")], "run-1")
        recorded_run(opened, "apply", "run-2")
        recorded_run(opened, "apply", "r")
        yield opened


def test_nodes_walk_the_lifecycle_and_every_move_is_recorded(store: StateStore) -> None:
    store.transition("n1", NodeState.PROVISIONED, run_id="run-2")
    store.transition("n1", NodeState.BURNING_IN, run_id="run-2", stage="preflight")
    store.transition("n1", NodeState.BURNING_IN, run_id="run-2", stage="node")
    store.transition("n1", NodeState.ADMITTED, run_id="run-2", evidence={"stages": 2})
    history = store.history("n1")
    assert [(row["from_state"], row["to_state"], row["stage"]) for row in history] == [
        (None, "new", None), ("new", "provisioned", None), ("provisioned", "burning-in", "preflight"),
        ("burning-in", "burning-in", "node"), ("burning-in", "admitted", None)]
    assert history[-1]["evidence"] == {"stages": 2}
    assert store.counts()["admitted"] == 1


@pytest.mark.parametrize(
    ("moves", "error"),
    [
        ([(NodeState.ADMITTED, {})], "cannot move a node from new to admitted"),
        ([(NodeState.PROVISIONED, {}), (NodeState.BURNING_IN, {})], "needs the stage"),
        ([(NodeState.QUARANTINED, {})], "needs a reason"),
        ([(NodeState.DRAINED, {})], "cannot move a node from new to drained"),  # only operators drain
    ],
)
def test_the_pipeline_cannot_skip_the_gate(store: StateStore, moves, error: str) -> None:
    with pytest.raises(TransitionError, match=error):
        for target, extra in moves:
            store.transition("n2", target, run_id="r", **extra)


def test_a_refused_move_leaves_no_trace(store: StateStore) -> None:
    before = store.history("n3")
    with pytest.raises(TransitionError):
        store.transition("n3", NodeState.ADMITTED, run_id="r")
    assert store.history("n3") == before
    assert store.node("n3").state is NodeState.NEW


def test_operators_drain_and_the_pipeline_leaves_drained_nodes_alone(store: StateStore) -> None:
    store.transition("n1", NodeState.DRAINED, run_id=recorded_run(store, "drain"), reason="PSU swap")
    with pytest.raises(TransitionError, match="cannot move a node from drained to provisioned"):
        store.transition("n1", NodeState.PROVISIONED, run_id="r")
    store.transition("n1", NodeState.ADMITTED, run_id=recorded_run(store, "admit"), reason="PSU replaced")
    assert store.node("n1").state is NodeState.ADMITTED
    assert [row["by_operator"] for row in store.history("n1")[-2:]] == [1, 1]


def test_a_move_needs_a_recorded_run(store: StateStore) -> None:
    with pytest.raises(TransitionError, match="no recorded run 'nobody'"):
        store.transition("n1", NodeState.PROVISIONED, run_id="nobody")
    assert store.node("n1").state is NodeState.NEW


def _bring(store: StateStore, name: str, standing: str) -> None:
    """Register ``name`` and move it, by the commands that make those moves, to ``standing``."""
    store.register([(name, "g")], "run-1")
    apply, held = "walk-apply", "failed"
    path = {"new": [], "provisioned": [(NodeState.PROVISIONED, None)],
            "burning-in": [(NodeState.PROVISIONED, None), (NodeState.BURNING_IN, "node")],
            "admitted": [(NodeState.PROVISIONED, None), (NodeState.BURNING_IN, "node"), (NodeState.ADMITTED, None)],
            "quarantined": [(NodeState.PROVISIONED, None), (NodeState.BURNING_IN, "node"),
                            (NodeState.QUARANTINED, "node")],
            lifecycle.QUARANTINED_IN_PROVISIONING: [(NodeState.QUARANTINED, "provision")],
            lifecycle.QUARANTINED_BY_WATCH: [(NodeState.PROVISIONED, None), (NodeState.BURNING_IN, "node"),
                                             (NodeState.ADMITTED, None), (NodeState.QUARANTINED, "node-check")],
            lifecycle.REVALIDATING: [(NodeState.PROVISIONED, None), (NodeState.BURNING_IN, "node"),
                                     (NodeState.ADMITTED, None), (NodeState.QUARANTINED, "node-check"),
                                     (NodeState.BURNING_IN, "revalidate")],
            "drained": []}[standing]
    watch = recorded_run(store, "watch", "walk-watch") if store.db.execute(
        "SELECT 1 FROM runs WHERE id = 'walk-watch'").fetchone() is None else "walk-watch"
    for target, stage in path:
        by_watch = stage in ("node-check", "revalidate")  # the watch's own moves
        store.transition(name, target, run_id=watch if by_watch else apply, stage=stage, reason=held)
    if standing == "drained":
        store.transition(name, NodeState.DRAINED, run_id=recorded_run(store, "drain"), reason="by hand")


def test_every_move_is_made_only_by_the_commands_the_table_names(tmp_path: Path) -> None:
    """The walk of the table: from every standing, to every state, by every command that moves nodes; the store
    allows exactly the moves :data:`lifecycle.MOVES` gives that command, and a refused move leaves no trace."""
    commands = ["apply", "burnin", "admit", "quarantine", "drain", "return", "watch"]
    standings = [*(state.value for state in NodeState), lifecycle.QUARANTINED_IN_PROVISIONING,
                 lifecycle.QUARANTINED_BY_WATCH, lifecycle.REVALIDATING]
    with StateStore(tmp_path / "state") as store:
        store.db.execute("PRAGMA synchronous=OFF")  # a thousand small transactions: the walk, not the disk
        recorded_run(store, "apply", "walk-apply")
        runs = {command: recorded_run(store, command) for command in commands}
        allowed, refused = 0, 0
        for i, standing in enumerate(standings):
            for target in NodeState:
                for command in commands:
                    name = f"n{i}-{target.value}-{command}"
                    _bring(store, name, standing)
                    before = store.history(name)
                    expected = command in lifecycle.MOVES.get((standing, target), frozenset())
                    stage = lifecycle.REVALIDATE_STAGE if command == "watch" else "node"  # the watch's own stage
                    try:
                        store.transition(name, target, run_id=runs[command], stage=stage, reason="walk")
                    except TransitionError as refusal:
                        assert not expected, f"{command}: {standing} -> {target} refused: {refusal}"
                        assert store.history(name) == before
                        refused += 1
                    else:
                        assert expected, f"{command} moved a node from {standing} to {target}"
                        assert store.history(name)[-1]["by_operator"] == (command in lifecycle.OPERATOR_COMMANDS)
                        allowed += 1
    assert allowed and refused


def test_a_quarantine_the_burn_in_made_holds_until_a_repair_or_a_retest() -> None:
    """What the table says of the quarantine (issue 55): apply never takes a node the burn-in or an operator
    quarantined; it retries one that provisioning quarantined; a repair (return) and a re-test (burnin) may."""
    held, failed_task = "quarantined", lifecycle.QUARANTINED_IN_PROVISIONING
    assert not [target for (origin, target), commands in lifecycle.MOVES.items()
                if origin == held and "apply" in commands]
    assert "apply" in lifecycle.MOVES[(failed_task, NodeState.PROVISIONED)]
    assert lifecycle.MOVES[(held, NodeState.PROVISIONED)] == {"return"}
    assert lifecycle.MOVES[(held, NodeState.BURNING_IN)] == {"burnin"}
    assert not lifecycle.retried_by_provisioning(NodeState.QUARANTINED, "collectives", False)
    assert not lifecycle.retried_by_provisioning(NodeState.QUARANTINED, "provision", True), "an operator's holds"
    assert lifecycle.retried_by_provisioning(NodeState.QUARANTINED, "provision", False)
    assert not lifecycle.retried_by_provisioning(NodeState.BURNING_IN, "node", False)
    assert not [target for (origin, target), commands in lifecycle.MOVES.items()
                if origin in (lifecycle.QUARANTINED_BY_WATCH, lifecycle.REVALIDATING) and "apply" in commands]
    by_watch = lifecycle.QUARANTINED_BY_WATCH
    assert lifecycle.MOVES[(by_watch, NodeState.BURNING_IN)] == {"burnin", "watch"}
    assert "watch" not in lifecycle.MOVES.get((by_watch, NodeState.ADMITTED), frozenset()), "only re-validated"
    assert lifecycle.MOVES[(lifecycle.REVALIDATING, NodeState.ADMITTED)] == {"watch", "admit"}
    assert "watch" not in lifecycle.MOVES.get((held, NodeState.BURNING_IN), frozenset()), "the burn-in's holds"
    assert lifecycle.standing(NodeState.QUARANTINED, "rma", False) == held, "RMA: held until a return"
    assert lifecycle.retried_by_provisioning(NodeState.ADMITTED, None, False)


def test_nodes_leaving_the_spec_keep_their_history(store: StateStore) -> None:
    store.transition("n3", NodeState.QUARANTINED, run_id=recorded_run(store, "quarantine"), reason="xid 79")
    change = store.register([("n1", "g"), ("n2", "g")], "run-3")
    assert change.removed == ["n3"]
    record = store.node("n3")
    assert not record.in_spec and record.state is NodeState.QUARANTINED
    assert sum(store.counts().values()) == 2
    back = store.register([("n1", "g"), ("n2", "g"), ("n3", "g")], "run-4")
    assert back.returning == ["n3"] and store.node("n3").reason == "xid 79"


def test_files_are_private(tmp_path: Path) -> None:
    with StateStore(tmp_path / "state") as opened:
        opened.register([("n1", "g")], "r")
        for name in os.listdir(tmp_path / "state"):
            mode = stat.S_IMODE((tmp_path / "state" / name).stat().st_mode)
            assert mode == 0o600, (name, oct(mode))
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700


def test_migrations_upgrade_in_order_and_newer_stores_are_refused(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    with StateStore(directory) as old:
        old.register([("n1", "g")], "r")
        assert old.schema_version == len(MIGRATIONS)
    upgraded = (*MIGRATIONS, "ALTER TABLE nodes ADD COLUMN rack TEXT; CREATE INDEX nodes_rack ON nodes(rack)")
    with StateStore(directory, migrations=upgraded) as new:
        assert new.schema_version == len(MIGRATIONS) + 1
        assert new.node("n1") is not None  # data survived
        columns = [row[1] for row in new.db.execute("PRAGMA table_info(nodes)")]
        assert "rack" in columns
    with pytest.raises(StoreError, match="written by a newer release"):
        StateStore(directory)
    with pytest.raises(StoreError, match="schema version"):
        StateStore.open_readonly(directory)


def test_a_failing_migration_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    StateStore(directory).close()
    broken = (*MIGRATIONS, "ALTER TABLE nodes ADD COLUMN rack TEXT; THIS IS NOT SQL")
    with pytest.raises(StoreError):
        StateStore(directory, migrations=broken)
    with StateStore(directory) as again:
        assert again.schema_version == len(MIGRATIONS)
        assert "rack" not in [row[1] for row in again.db.execute("PRAGMA table_info(nodes)")]


def test_read_only_open_creates_nothing(tmp_path: Path) -> None:
    assert StateStore.open_readonly(tmp_path / "absent") is None
    assert not (tmp_path / "absent").exists()


def test_read_only_commands_read_an_older_store_upgraded_in_memory(tmp_path: Path) -> None:
    with StateStore(tmp_path, migrations=MIGRATIONS[:3]) as old:
        old.record_cable("leaf-a/1 - spine-b/2", "finding", {"class": "degraded"}, run_id="r1")
    before = (tmp_path / "state.db").read_bytes()
    reader = StateStore.open_readonly(tmp_path)
    assert reader is not None
    with reader:
        assert reader.schema_version == len(MIGRATIONS)
        assert [row["kind"] for row in reader.cable_history("leaf-a/1 - spine-b/2")] == ["finding"]
    assert (tmp_path / "state.db").read_bytes() == before, "the file is upgraded only by a mutating command"
    newer = (*MIGRATIONS, "ALTER TABLE nodes ADD COLUMN rack TEXT")
    with StateStore(tmp_path, migrations=newer):
        pass
    with pytest.raises(StoreError, match="newer release"):
        StateStore.open_readonly(tmp_path)


def test_garbage_instead_of_a_database(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    (directory / "state.db").write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable state store"):
        StateStore(directory)


def test_runs_left_running_by_a_dead_controller_are_closed(store: StateStore, tmp_path: Path) -> None:
    store.start_run("r-dead", "apply", tmp_path, tmp_path / "spec.yaml", "0" * 64)
    assert store.close_abandoned_runs() == ["r-dead"]
    assert store.runs()[0]["status"] == "interrupted"


HOLDER = """
import sys, time
from pathlib import Path
from provision.state import ClusterLock
with ClusterLock(Path(sys.argv[1]), "apply"):
    print("locked", flush=True)
    time.sleep(30)
"""


def _hold_lock(directory: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_writer_is_told_who_holds_the_lock(tmp_path: Path) -> None:
    holder = _hold_lock(tmp_path)
    try:
        with pytest.raises(LockHeld) as caught, ClusterLock(tmp_path, "apply"):
            pass
        assert f"another `provision apply` (pid {holder.pid}, started " in str(caught.value)
        started = time.monotonic()
        with pytest.raises(LockHeld, match=r"after waiting 0\.5 s"), ClusterLock(tmp_path, "apply", wait_s=0.5):
            pass
        assert time.monotonic() - started >= 0.5
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    holder = _hold_lock(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with ClusterLock(tmp_path, "apply", wait_s=5):
        pass


def test_waiting_for_the_lock_succeeds_once_it_is_released(tmp_path: Path) -> None:
    holder = _hold_lock(tmp_path)
    subprocess.Popen(["sh", "-c", f"sleep 0.5; kill {holder.pid}"])
    try:
        with ClusterLock(tmp_path, "apply", wait_s=10):
            pass
    finally:
        holder.wait()


def test_the_cable_history_migration_keeps_every_row_and_takes_rechecks(tmp_path: Path) -> None:
    with StateStore(tmp_path, migrations=MIGRATIONS[:3]) as old:
        old.record_cable("leaf-a/1 - spine-b/2", "finding", {"class": "degraded"}, run_id="r1")
        old.record_cable("leaf-a/1 - spine-b/2", "repair", {"action": "reseat"}, run_id="r2")
    with StateStore(tmp_path) as new:
        assert new.schema_version == len(MIGRATIONS)
        new.record_cable("leaf-a/1 - spine-b/2", "recheck", {"verdict": "healthy"}, run_id="r3")
        history = new.cable_history("leaf-a/1 - spine-b/2")
    assert [row["kind"] for row in history] == ["finding", "repair", "recheck"]
    assert history[0]["detail"] == {"class": "degraded"}
