"""The node lifecycle: the one state machine every phase and operator command goes through.

``new → provisioned → burning-in(stage) → admitted | quarantined(reason)``, with
``drained`` set by hand. Keeping the allowed moves in one table means a phase
cannot, say, admit a node that never burned in: the store refuses the move.
"""

from __future__ import annotations

from enum import StrEnum

from provision.errors import Refusal


class NodeState(StrEnum):
    NEW = "new"
    PROVISIONED = "provisioned"
    BURNING_IN = "burning-in"
    ADMITTED = "admitted"
    QUARANTINED = "quarantined"
    DRAINED = "drained"


_ANY = frozenset(NodeState)

#: state → the states a pipeline phase may move it to.
PIPELINE_MOVES: dict[NodeState, frozenset[NodeState]] = {
    NodeState.NEW: frozenset({NodeState.PROVISIONED, NodeState.QUARANTINED}),
    NodeState.PROVISIONED: frozenset({NodeState.PROVISIONED, NodeState.BURNING_IN, NodeState.QUARANTINED}),
    NodeState.BURNING_IN: frozenset({NodeState.BURNING_IN, NodeState.ADMITTED, NodeState.QUARANTINED}),
    # Re-applying a changed spec re-provisions admitted nodes; burn-in may re-run.
    NodeState.ADMITTED: frozenset({NodeState.PROVISIONED, NodeState.BURNING_IN, NodeState.QUARANTINED}),
    # After repair a quarantined node re-enters at provisioning or at the stage it failed.
    NodeState.QUARANTINED: frozenset({NodeState.PROVISIONED, NodeState.BURNING_IN, NodeState.QUARANTINED}),
    # A drained node is out of the pipeline until an operator returns it.
    NodeState.DRAINED: frozenset(),
}

#: Operators (``provision admit|quarantine|drain``) may move any node anywhere
#: except back to ``new`` or into the middle of a burn-in, which only runs create.
OPERATOR_MOVES: dict[NodeState, frozenset[NodeState]] = {
    state: _ANY - {NodeState.NEW, NodeState.BURNING_IN} for state in NodeState
}


class TransitionError(Refusal, ValueError):
    """A move the lifecycle does not allow."""


def check_move(current: NodeState, target: NodeState, *, by_operator: bool, stage: str | None, reason: str) -> None:
    allowed = (OPERATOR_MOVES if by_operator else PIPELINE_MOVES)[current]
    if target not in allowed:
        who = "an operator" if by_operator else "the pipeline"
        raise TransitionError(f"{who} cannot move a node from {current} to {target}")
    if target is NodeState.BURNING_IN and not stage:
        raise TransitionError("burning-in needs the stage the node is in")
    if target in (NodeState.QUARANTINED, NodeState.DRAINED) and not reason.strip():
        raise TransitionError(f"{target} needs a reason")
