"""What happened, read back from the state store and the run records: a node's story, the recent runs, and the
nodes back from repair (``provision return``) with their before and after.

A returned node burns in again, every stage. What an operator asks of that run is whether the repair worked: the
stage, check and reason it was quarantined for, what it is now, and each figure it was quarantined with against
the same figure now (the worst item of each: the GPU that was slow, the port that was). The burn-in's summary and
the acceptance report both read it here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from provision.checks.baseline import figure_of
from provision.errors import UsageProblem
from provision.state import NodeState
from provision.state.views import NodeHistory


def _manifest(run_dir: str) -> dict[str, Any]:
    try:
        return cast(dict[str, Any], json.loads((Path(run_dir) / "manifest.json").read_text()))
    except (OSError, ValueError):
        return {}


def recent_runs(store: NodeHistory, limit: int = 20) -> list[dict[str, Any]]:
    """The newest runs first: command, who ran it, how it ended, where its record is."""
    rows = []
    for row in store.runs(limit=limit):
        manifest = _manifest(row["run_dir"])
        rows.append({"run_id": row["id"], "command": row["command"], "argv": manifest.get("argv"),
                     "user": manifest.get("user"), "status": row["status"], "exit_code": row["exit_code"],
                     "started_at": row["started_at"], "finished_at": row["finished_at"],
                     "spec": row["spec_path"], "spec_sha256": row["spec_sha256"], "record": row["run_dir"]})
    return rows


def node_story(store: NodeHistory, name: str) -> dict[str, Any]:
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


# -- nodes back from repair ------------------------------------------------------------------------------------


def last_return(store: NodeHistory, name: str) -> dict[str, Any] | None:
    """The node's last return from repair, the quarantine before it and the moves after it; ``None`` if never."""
    moves = store.history(name)
    index = next((index for index in range(len(moves) - 1, -1, -1) if moves[index]["evidence"].get("returned")),
                 None)
    if index is None:
        return None
    before = next((move for move in reversed(moves[:index]) if move["to_state"] == NodeState.QUARANTINED.value),
                  None)
    return {"returned": moves[index], "quarantined": before, "after": moves[index + 1:]}


def returned_nodes(store: NodeHistory, names: list[str]) -> dict[str, dict[str, Any]]:
    """node -> its return move and the quarantine before it, for each node whose last move is a return."""
    found = {}
    for name in names:
        record = store.node(name)
        if record is None or record.state is not NodeState.PROVISIONED:
            continue
        last = last_return(store, name)
        if last is not None and not last["after"]:
            found[name] = last
    return found


def _worst(name: str, items: Sequence[Sequence[Any]]) -> float:
    """The worst item's value (items as kept in a move's evidence: JSON lists of item and value)."""
    values = [float(value) for _item, value in items]
    return min(values) if figure_of(name).higher_is_better else max(values)


def story(name: str, returned: dict[str, Any], store: NodeHistory,
          figures_now: dict[str, list[tuple[str, float]]]) -> dict[str, Any]:
    """One returned node's before and after, as the phase report and the acceptance report show it."""
    record = store.node(name)
    quarantined = returned["quarantined"] or {}
    evidence = quarantined.get("evidence", {})
    before_figures = evidence.get("figures", {})
    figures = {figure: {"before": _worst(figure, items),
                        "after": _worst(figure, figures_now[figure]) if figures_now.get(figure) else None}
               for figure, items in sorted(before_figures.items()) if items}
    return {"node": name, "reason": returned["returned"]["reason"],
            "before": {"stage": quarantined.get("stage"), "check": evidence.get("check"),
                       "reason": quarantined.get("reason"), "run_id": quarantined.get("run_id")},
            "after": str(record.state) if record else None,
            "after_reason": record.reason if record else "", "figures": figures}
