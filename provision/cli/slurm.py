"""``provision slurm sync``: show and repair the drift between the state store and Slurm's node states."""

from __future__ import annotations

from pathlib import Path

import click

from provision.cli.common import (
    argv,
    emit_json,
    existing_store,
    json_option,
    out,
    spec_argument,
    state_dir_of,
    state_dir_option,
)
from provision.errors import EXIT_OK, EXIT_PROBLEMS
from provision.run.context import SpecIdentity, mutating_run
from provision.sinks import slurm
from provision.spec import load_spec


@click.group(name="slurm")
def slurm_group() -> None:
    """Slurm follows the state store: drains, resumes, features."""


@slurm_group.command(name="sync")
@spec_argument
@click.option("--dry-run", is_flag=True, help="Show the drift and what would be done; change nothing.")
@state_dir_option
@json_option
def slurm_sync(spec: Path, dry_run: bool, state_dir: Path | None, as_json: bool) -> int:
    """Drain every node that is not admitted (reason `provision: ...`), resume admitted nodes we drained, keep
    the features; a node an administrator drained for another reason stays drained. Exit 1 when Slurm is
    unreachable (the sync stays pending)."""
    loaded = load_spec(spec)
    directory = state_dir_of(loaded, state_dir)
    if dry_run:
        with existing_store(directory) as store:
            result = slurm.sync(loaded, store, dry_run=True)
    else:
        with mutating_run(directory, "slurm-sync", argv(), spec=SpecIdentity(loaded.path.resolve(), loaded.sha256)
                          ) as run:
            result = slurm.sync(loaded, run.store, run_id=run.id)
            run.note("slurm-sync", result.as_dict())
            run.conclude(EXIT_PROBLEMS if result.pending else EXIT_OK)
    if as_json:
        emit_json({"dry_run": dry_run, **result.as_dict()})
        return EXIT_PROBLEMS if result.pending else EXIT_OK
    if result.pending:
        out.print(f"Slurm unreachable: {result.error}; the store keeps its verdicts and the sync stays pending "
                  "(the next run retries it)", markup=False)
        return EXIT_PROBLEMS
    verb = "would" if dry_run else "did"
    if not result.plan.actions:
        out.print("Slurm agrees with the store.", markup=False)
    for action in result.plan.actions:
        detail = action.reason or ",".join(action.features)
        out.print(f"{verb} {action.kind} {action.node}: {detail}", markup=False)
    for node, reason in sorted(result.plan.held_by_admin.items()):
        out.print(f"{node}: admitted, but drained by an administrator ({reason}): left drained", markup=False)
    return EXIT_OK
