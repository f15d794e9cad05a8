"""One run lifecycle for every mutating command.

Every command that changes anything does the same dance, written here once:
take the cluster lock, open the state store, close runs a killed controller
left "running", open a run record on disk and a run row in the store, and end
both as ``succeeded``, ``problems-found``, ``failed`` or ``interrupted`` with
the exit code the command returns — on an exception and on Ctrl-C too, after
which the lock is free. A command body is then: parse, ``with mutating_run(...)
as run:``, one service call, ``run.conclude(code)``, render.

The run in flight is also published as :func:`current`, so the command line's
error handler can name the run directory of a crash without each command
remembering to tell it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import EXIT_OK, exit_code_for
from provision.run.record import RunRecord
from provision.state import ClusterLock, StateStore

_latest: list[RunRecord] = []
_listeners: list[Callable[[dict[str, Any]], None]] = []
_run_end_hooks: list[Callable[[StateStore, Path, RunRecord], None]] = []


def on_run_end(hook: Callable[[StateStore, Path, RunRecord], None]) -> None:
    """Call ``hook(store, spec_path, record)`` after every run ends, its outcome stored, the lock still held: the
    sinks that follow the store (``provision.sinks.dispatch``). A hook must not raise; it records its own failures."""
    _run_end_hooks.append(hook)


def _run_end_hooks_for(store: StateStore, spec_path: Path, record: RunRecord) -> None:
    for hook in _run_end_hooks:
        hook(store, spec_path, record)


def subscribe(listener: Callable[[dict[str, Any]], None]) -> None:
    """Hear every event of the runs this process starts from now on (the CLI's progress lines)."""
    _listeners.append(listener)


def latest() -> RunRecord | None:
    """The run record of the last mutating command started in this process (the error handler's lead)."""
    return _latest[-1] if _latest else None


def forget() -> None:
    """Start a new command with no run behind it, no listener and no run-end hook (``main`` calls this first)."""
    _latest.clear()
    _listeners.clear()
    _run_end_hooks.clear()


@dataclass(frozen=True)
class SpecIdentity:
    """Which spec a run acted on: its path and hash, both kept with the run."""

    path: Path
    sha256: str
    origin: str = "given"  # "given" on the command line, or "last apply" when the command took none


def last_applied_spec(store: StateStore, fallback: Path) -> SpecIdentity:
    """For a command run without a spec (an operator's move): the spec the cluster was last run with."""
    for row in store.runs(limit=200):
        if row.get("spec_sha256"):
            return SpecIdentity(Path(row["spec_path"]), row["spec_sha256"], "last apply")
    return SpecIdentity(fallback, "", "none: no run of this cluster has named a spec yet")


class ActiveRun:
    """The run in flight: its record on disk, the open store, and how it will end."""

    def __init__(self, record: RunRecord, store: StateStore, abandoned: list[str]) -> None:
        self.record = record
        self.store = store
        self.abandoned = abandoned
        self.exit_code = EXIT_OK
        self.status = "succeeded"

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def path(self) -> Path:
        return self.record.path

    def note(self, key: str, value: Any) -> None:
        self.record.note(key, value)

    def conclude(self, exit_code: int, status: str | None = None) -> None:
        """How the run ends if the body returns normally: 0 succeeded, anything else problems-found."""
        self.exit_code = exit_code
        self.status = status or ("succeeded" if exit_code == EXIT_OK else "problems-found")


@contextmanager
def mutating_run(state_dir: Path, command: str, argv: list[str], *, spec: SpecIdentity | None = None,
                 wait_lock_s: float = 0.0) -> Iterator[ActiveRun]:
    """Hold the cluster lock and a recorded run for the body; always end the run, then free the lock.

    ``spec`` is the spec the command acted on; without one the run names the spec of the cluster's last
    run (``last_applied_spec``), so no run row carries an empty spec hash.
    """
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with ClusterLock(state_dir, command, wait_s=wait_lock_s), StateStore(state_dir) as store:
        abandoned = store.close_abandoned_runs()
        identity = spec or last_applied_spec(store, state_dir)
        record = RunRecord(state_dir / "runs", command, argv)
        record.listeners.extend(_listeners)
        _latest[:] = [record]
        run = ActiveRun(record, store, abandoned)
        if abandoned:
            record.event("runs.interrupted_before", run_ids=abandoned)
        if spec is None:
            record.note("spec_origin", {"path": str(identity.path), "sha256": identity.sha256,
                                        "origin": identity.origin})
        store.start_run(record.id, command, record.path, identity.path, identity.sha256)
        try:
            yield run
        except BaseException as error:
            code = exit_code_for(error)
            status = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
            record.event("run.error", error=repr(error)[:2000])
            store.finish_run(record.id, status, code)
            _run_end_hooks_for(store, identity.path, record)
            record.finish(status, code)
            raise
        store.finish_run(record.id, run.status, run.exit_code)
        _run_end_hooks_for(store, identity.path, record)
        record.finish(run.status, run.exit_code)
