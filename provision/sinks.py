"""What other systems see follows from the state store: after every mutating run, the sinks the spec names are
rewritten from the store (today the Prometheus textfile; Slurm's node states are the next sink).

A sink that fails does not fail the run whose verdicts are already stored: the failure is an event in the run
record and a warning, and the next run rewrites the sink whole.
"""

from __future__ import annotations

from pathlib import Path

from provision import metrics
from provision.runs import RunRecord
from provision.spec import SpecError, load_spec
from provision.state import StateStore


def after_run(store: StateStore, spec_path: Path, record: RunRecord) -> None:
    """Rewrite every sink the run's spec names. Never raises: a sink's failure is recorded, not fatal."""
    try:
        loaded = load_spec(spec_path)
    except (SpecError, OSError):
        return  # no readable spec (an operator's move on a cluster whose spec moved): no sink is named
    directory = metrics.textfile_dir(loaded)
    if directory is None:
        return
    try:
        written = metrics.write_textfile(loaded, store, store.state_dir, directory)
    except Exception as error:
        record.event("sink.failed", sink="metrics", error=f"{type(error).__name__}: {error}"[:500])
        return
    record.event("sink.written", sink="metrics", path=str(written))
