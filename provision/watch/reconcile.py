"""Slurm read back into the store (issue 56, item 2): what node-check and the administrators did in Slurm since the
last pass becomes the store's, so what Slurm and every sink see keeps following the one state machine.

Three things are read, each only where the store and Slurm disagree about an admitted node:
- a node ``provision node-check --drain`` drained (its reason ``provision node-check: <node>: <check>: ...``) is
  quarantined at stage ``node-check`` with the check and Slurm's reason as evidence: the node failed its own check;
- a node an administrator drained for a reason of their own is recorded as the operator's drain, with their words
  and their user;
- a node the store holds out of service (quarantined or drained) that an administrator resumed in Slurm is recorded
  as the operator's admit, so the next sync does not drain it again behind their back.

Nothing else is touched: a node drained by our own sync (``provision: ...``), one Slurm has down without a drain,
and every node while a sync is pending (Slurm may simply not have been told yet) are left as they are. The watch's
own quarantines go through its circuit breaker (:mod:`provision.watch.breaker`): tripped, they are held and listed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from provision.facts.slurm import SlurmNode
from provision.hosts.slurmctl import SlurmUnreachable
from provision.node_check.on_node import DRAIN_PREFIX
from provision.sinks import slurm
from provision.sinks.slurm import PREFIX as SYNC_PREFIX
from provision.spec import LoadedSpec
from provision.state import NodeState, StateStore
from provision.state.lifecycle import ADMIT, DRAIN
from provision.state.store import NodeRecord
from provision.watch import breaker

#: node-check's summary after its prefix: ``<node>: <check>: <message>`` (``on_node.verdict``).
_CHECK = re.compile(r"^\S+: (?P<check>[a-z0-9_]+): (?P<message>.*)$")
#: The stage of a quarantine the watch reads back from a node-check drain.
NODE_CHECK_STAGE = "node-check"
#: The stage of a quarantine the watch makes for a node its fabric cut off (its rail's only cable down or
#: disabled): :mod:`provision.watch.cables`.
FABRIC_STAGE = "fabric"
#: The stages of the watch's own quarantines, which its breaker counts.
WATCH_STAGES = (NODE_CHECK_STAGE, FABRIC_STAGE)
#: Slurm's states in which a resumed node can take work again.
_SERVING = frozenset({"idle", "allocated", "mixed", "completing"})


@dataclass(frozen=True)
class Move:
    """One move of the store the watch makes: to ``target``, with the stage, reason and evidence kept in the
    node's history; ``seen_operator`` when it records an administrator's own move."""

    node: str
    target: NodeState
    reason: str
    stage: str | None = None
    seen_operator: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "to": str(self.target), "stage": self.stage, "reason": self.reason,
                "by": f"operator ({self.seen_operator}, seen in Slurm)" if self.seen_operator else "watch",
                "evidence": self.evidence}


def node_check_failure(reason: str) -> tuple[str, str] | None:
    """The check and message of a drain node-check made, or None for any other reason."""
    if not reason.startswith(DRAIN_PREFIX):
        return None
    match = _CHECK.match(reason[len(DRAIN_PREFIX):].strip())
    return (match.group("check"), match.group("message")) if match else ("node_check", reason[len(DRAIN_PREFIX):])


def plan_reconcile(records: Sequence[NodeRecord], slurm_nodes: dict[str, SlurmNode], *,
                   sync_pending: bool) -> list[Move]:
    """The moves that bring the store up to what happened in Slurm (pure: tested on recorded ``scontrol`` output).
    While a sync is pending nothing is read back: Slurm's states may be ours not yet applied."""
    if sync_pending:
        return []
    moves = []
    for record in records:
        node = slurm_nodes.get(record.name)
        if not record.in_spec or node is None:
            continue
        seen = {"slurm_state": node.state, "slurm_flags": sorted(node.flags), "slurm_reason": node.reason,
                "slurm_reason_user": node.reason_user}
        if record.state is NodeState.ADMITTED and node.drained:
            failed = node_check_failure(node.reason)
            if failed is not None:
                check, message = failed
                moves.append(Move(record.name, NodeState.QUARANTINED, f"node-check/{check}: {message}",
                                  stage=NODE_CHECK_STAGE, evidence=seen))
            elif not node.reason.startswith(SYNC_PREFIX):
                who = f" by {node.reason_user}" if node.reason_user else ""
                moves.append(Move(record.name, NodeState.DRAINED, f"drained in Slurm{who}: {node.reason or '-'}",
                                  seen_operator=DRAIN, evidence=seen))
        elif record.state in (NodeState.QUARANTINED, NodeState.DRAINED) and not node.drained \
                and node.state in _SERVING:
            moves.append(Move(record.name, NodeState.ADMITTED,
                              f"resumed in Slurm while {record.state}: {record.reason}", seen_operator=ADMIT,
                              evidence=seen))
    return moves


@dataclass
class ReconcileResult:
    moves: list[Move]
    unreachable: str = ""  # slurmctld did not answer: nothing read back this pass
    pending: bool = False  # a sync of ours is pending: nothing read back until it went through
    held: list[Move] = field(default_factory=list)  # the watch's own moves the breaker held back
    breaker: str = ""  # why the breaker is tripped (empty: it is not)

    def as_dict(self) -> dict[str, Any]:
        return {"moves": [move.as_dict() for move in self.moves], "slurm_unreachable": self.unreachable,
                "sync_pending": self.pending, "held_by_breaker": [move.as_dict() for move in self.held],
                "breaker": self.breaker}


def reconcile(loaded: LoadedSpec, store: StateStore, *, run_id: str, now: float | None = None) -> ReconcileResult:
    """One pass: Slurm's nodes read, the moves planned and made by the watch's run ``run_id``, each in the node's
    history with Slurm's state and reason as evidence; ``now``: the pass's clock (None: the wall clock), where the
    breaker's window ends."""
    pending = bool(store.sink_status().get(slurm.SINK, {}).get("pending"))
    try:
        nodes = slurm.client_for(loaded).nodes()
    except SlurmUnreachable as error:
        return ReconcileResult([], unreachable=str(error), pending=pending)
    moves = plan_reconcile(store.nodes(), nodes, sync_pending=pending)
    moves, held, why = make_moves(loaded, store, moves, run_id=run_id, now=now)
    return ReconcileResult(moves, pending=pending, held=held, breaker=why)


def make_moves(loaded: LoadedSpec, store: StateStore, moves: list[Move], *,
               run_id: str, now: float | None = None) -> tuple[list[Move], list[Move], str]:
    """The watch's moves made through its breaker, each in the node's history: those made, those held, and why
    the breaker is tripped (empty: it is not)."""
    made, held, why = _through_breaker(loaded, store, store.nodes(), moves, run_id=run_id, now=now)
    for move in made:
        store.transition(move.node, move.target, run_id=run_id, stage=move.stage, reason=move.reason,
                         evidence=move.evidence, seen_operator=move.seen_operator)
    return made, held, why


def _through_breaker(loaded: LoadedSpec, store: StateStore, records: Sequence[NodeRecord], moves: list[Move], *,
                     run_id: str, now: float | None = None) -> tuple[list[Move], list[Move], str]:
    """The moves this pass may make, the watch's own it must hold, and why the breaker is tripped (empty: it is
    not). What an administrator did in Slurm is recorded whatever the breaker says: it is their decision, seen."""
    own = [move for move in moves if move.seen_operator is None]
    seen = [move for move in moves if move.seen_operator is not None]
    state = store.breaker()
    if state is not None and state["tripped"]:
        detail = state["detail"]
        known = {entry["node"] for entry in detail.get("held", [])}
        detail["held"] = [*detail.get("held", []), *(move.as_dict() for move in own if move.node not in known)]
        store.set_breaker(tripped=True, detail=detail, run_id=state["run_id"])
        return seen, own, str(detail.get("why", "tripped"))
    policy = loaded.spec.watch.breaker
    # the window ends at the pass's clock: a pass judged at another hour (a replay, the simulator's week) counts
    # the moves of its own window, never those of the wall clock's
    end = datetime.fromtimestamp(now, UTC) if now is not None else datetime.now(UTC)
    since = (end - timedelta(minutes=policy.window_minutes)).isoformat(timespec="milliseconds")
    acted = sum(len(store.moves_since(NodeState.QUARANTINED, stage, since)) for stage in WATCH_STAGES)
    fleet = sum(1 for record in records if record.in_spec and record.state is NodeState.ADMITTED)
    decision = breaker.judge(policy, fleet=fleet, acted=acted, proposed=len(own))
    if not decision.tripped:
        return moves, [], ""
    store.set_breaker(tripped=True, detail={"why": decision.why, "limit": decision.limit, "acted": decision.acted,
                                            "held": [move.as_dict() for move in own]}, run_id=run_id)
    return seen, own, decision.why
