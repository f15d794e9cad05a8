"""What happened, read back from the state store and the run records: a node's story, the recent runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provision.errors import UsageProblem
from provision.state import StateStore


def _manifest(run_dir: str) -> dict[str, Any]:
    try:
        return json.loads((Path(run_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def recent_runs(store: StateStore, limit: int = 20) -> list[dict[str, Any]]:
    """The newest runs first: command, who ran it, how it ended, where its record is."""
    rows = []
    for row in store.runs(limit=limit):
        manifest = _manifest(row["run_dir"])
        rows.append({"run_id": row["id"], "command": row["command"], "argv": manifest.get("argv"),
                     "user": manifest.get("user"), "status": row["status"], "exit_code": row["exit_code"],
                     "started_at": row["started_at"], "finished_at": row["finished_at"],
                     "spec": row["spec_path"], "spec_sha256": row["spec_sha256"], "record": row["run_dir"]})
    return rows


def node_story(store: StateStore, name: str) -> dict[str, Any]:
    """Every lifecycle move of ``name`` with its stage, reason, evidence, who made it and in which run."""
    record = store.node(name)
    if record is None:
        known = [node.name for node in store.nodes()]
        raise UsageProblem(f"no node named {name!r} in the state store ({len(known)} node(s) known)")
    runs = {row["id"]: row for row in store.runs(limit=100_000)}
    moves = []
    for row in store.history(name):
        run = runs.get(row["run_id"] or "", {})
        moves.append({"at": row["at"], "from": row["from_state"], "to": row["to_state"], "stage": row["stage"],
                      "reason": row["reason"], "by": "operator" if row["by_operator"] else "pipeline",
                      "run_id": row["run_id"], "command": run.get("command"), "record": run.get("run_dir"),
                      "evidence": row["evidence"]})
    return {"node": name, "state": str(record.state), "stage": record.stage, "reason": record.reason,
            "in_spec": record.in_spec, "moves": moves}
