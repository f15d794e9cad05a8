"""``provision history NODE`` (a node's story) and ``provision runs`` (what ran, who ran it, how it ended)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from provision.cli.common import (
    emit_json,
    existing_store,
    json_option,
    out,
    spec_option,
    spec_or_state_dir,
    state_dir_option,
)
from provision.errors import EXIT_OK
from provision.fleet import history
from provision.state import StateStore


def _store(spec: Path | None, state_dir: Path | None) -> StateStore:
    return existing_store(spec_or_state_dir(spec, state_dir)[1])


def _evidence(evidence: dict[str, Any]) -> str:
    if not evidence:
        return ""
    keys = ("check", "failed_task", "remediation", "campaign", "operator", "returned", "quarantined_for",
            "changed_tasks")
    return "; ".join(f"{key}={evidence[key]}" for key in keys if key in evidence)


@click.command(name="history")
@click.argument("node")
@spec_option
@state_dir_option
@json_option
def history_command(node: str, spec: Path | None, state_dir: Path | None, as_json: bool) -> int:
    """NODE's story: every lifecycle move with its stage, reason, evidence and run."""
    with _store(spec, state_dir) as store:
        story = history.node_story(store, node)
    if as_json:
        emit_json(story)
        return EXIT_OK
    out.print(f"{node}: {story['state']}" + (f" at {story['stage']}" if story["stage"] else "")
              + (f" ({story['reason']})" if story["reason"] else ""), markup=False)
    table = Table(title=f"{len(story['moves'])} move(s)", title_justify="left")
    for column in ("when", "move", "stage", "by", "reason", "evidence", "run"):
        table.add_column(column, overflow="fold")
    for move in story["moves"]:
        table.add_row(move["at"], f"{move['from'] or '-'} -> {move['to']}", move["stage"] or "", move["by"],
                      move["reason"], _evidence(move["evidence"]),
                      f"{move['command'] or ''} {move['run_id'] or ''}".strip())
    out.print(table)
    return EXIT_OK


@click.command(name="runs")
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many, newest first.")
@json_option
def runs_command(spec: Path | None, state_dir: Path | None, limit: int, as_json: bool) -> int:
    """Recent runs: command, who, outcome, and where each one's record is."""
    with _store(spec, state_dir) as store:
        rows = history.recent_runs(store, limit)
    if as_json:
        emit_json({"runs": rows})
        return EXIT_OK
    table = Table(title=f"{len(rows)} recent run(s)", title_justify="left")
    for column in ("started", "command", "user", "outcome", "record"):
        table.add_column(column, overflow="fold")
    for row in rows:
        outcome = f"{row['status']} ({row['exit_code']})" if row["exit_code"] is not None else row["status"]
        table.add_row(row["started_at"], row["command"], row["user"] or "", outcome, row["record"])
    out.print(table)
    return EXIT_OK
