"""What other systems see follows from the state store: after every mutating run, the sinks the spec names are
brought in line with the store — the Prometheus textfile (``metrics:``) and Slurm's node states (``slurm:``).

A sink that fails does not fail the run whose verdicts are already stored: the failure is an event in the run
record (and, for Slurm, a pending mark that ``provision status`` shows), and the next run brings the sink in line
whole.
"""

from __future__ import annotations

from pathlib import Path

from provision.errors import Refusal
from provision.run.record import RunRecord
from provision.sinks import metrics, slurm
from provision.spec import LoadedSpec, SpecError, load_spec
from provision.state import StateStore

#: Commands whose body is the sync itself: the sink does not run it a second time.
SYNCS_ITSELF = {"slurm-sync"}


def after_run(store: StateStore, spec_path: Path, record: RunRecord) -> None:
    """Bring every sink the run's spec names in line with the store. Never raises."""
    try:
        loaded = load_spec(spec_path)
    except (SpecError, OSError):
        return  # no readable spec (an operator's move on a cluster whose spec moved): no sink is named
    _metrics(loaded, store, record)
    if loaded.spec.slurm is not None and record.command not in SYNCS_ITSELF:
        _slurm(loaded, store, record)


def _metrics(loaded: LoadedSpec, store: StateStore, record: RunRecord) -> None:
    directory = metrics.textfile_dir(loaded)
    if directory is None:
        return
    try:
        written = metrics.write_textfile(loaded, store, store.state_dir, directory)
    except Exception as error:  # any failure of a sink is recorded, never fatal
        record.event("sink.failed", sink="metrics", error=f"{type(error).__name__}: {error}"[:500])
        return
    record.event("sink.written", sink="metrics", path=str(written))


def _slurm(loaded: LoadedSpec, store: StateStore, record: RunRecord) -> None:
    try:
        result = slurm.sync(loaded, store, run_id=record.id)
    except Refusal as error:  # the names differ: nothing was changed in Slurm
        store.set_sink_status(slurm.SINK, pending=True, detail={"error": str(error)}, run_id=record.id)
        record.event("sink.slurm", pending=True, error=str(error)[:1000], actions=[], held_by_admin={})
        return
    except Exception as error:  # any failure of a sink is recorded, never fatal
        store.set_sink_status(slurm.SINK, pending=True, detail={"error": f"{type(error).__name__}: {error}"},
                              run_id=record.id)
        record.event("sink.failed", sink="slurm", error=f"{type(error).__name__}: {error}"[:500])
        return
    record.event("sink.slurm", pending=result.pending, error=result.error,
                 actions=[action.as_dict() for action in result.plan.actions],
                 held_by_admin=result.plan.held_by_admin)
