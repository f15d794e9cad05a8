"""Stores built by hand for tests of what reads them: a node is moved only by a run the store recorded (its command
is what the table of moves is asked about), so a test that sets nodes up starts that run first."""

from __future__ import annotations

from pathlib import Path

from provision.state import StateStore


def recorded_run(store: StateStore, command: str, run_id: str | None = None) -> str:
    """A run of ``command`` in ``store`` (``apply``, ``burnin``, ``admit``, ``quarantine``, ``drain``, ``return``);
    its id, for ``store.transition(..., run_id=...)``."""
    run_id = run_id or f"test-{command}-{len(store.runs(limit=100_000))}"
    store.start_run(run_id, command, store.state_dir / "runs" / run_id, Path("spec.yaml"), "0" * 64)
    store.finish_run(run_id, "succeeded", 0)  # ended: a store's check for abandoned runs does not see it
    return run_id
