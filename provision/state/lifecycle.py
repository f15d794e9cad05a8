"""The node lifecycle: the one state machine every phase and operator command goes through.

``new → provisioned → burning-in(stage) → admitted | quarantined(reason)``, with ``drained`` set by hand.

One table, :data:`MOVES`, says which command may make each move: a move is made by a recorded run, and the store
looks up that run's command, so a phase cannot, say, admit a node that never burned in, and a plain ``apply``
cannot take back a node the burn-in quarantined. A quarantine holds until a repair (``provision return``), an
operator's re-test (``provision burnin``) or the operator's own move; only a node that *provisioning* quarantined
(a failed task, an unreachable host) is retried by provisioning, because what failed there was the convergence,
which the next ``apply`` does again.
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


#: The commands that move nodes (their run's ``command`` in the store).
APPLY, BURNIN = "apply", "burnin"
ADMIT, QUARANTINE, DRAIN, RETURN = "admit", "quarantine", "drain", "return"
#: The fleet's watch (``provision watch``): what node-check drained in Slurm, read back into the store.
WATCH = "watch"
#: ``provision triage --drain``: an operator's decision on a failed job's evidence, out of service at stage ``job``.
TRIAGE = "triage"
#: The stage of a node drained for a failed job (the triage's evidence and the job's id in its history).
JOB_STAGE = "job"
#: An operator's own moves: recorded as the operator's in the node's history.
OPERATOR_COMMANDS = frozenset({ADMIT, QUARANTINE, DRAIN, RETURN})

#: Where a node stands for the table: its state, with a quarantine that provisioning made told apart (it is the
#: only one ``apply`` retries).
QUARANTINED_IN_PROVISIONING = "quarantined in provisioning"
#: A node the watch took out of service (node-check's drain read back, a cable that cut its rail, a revalidation it
#: failed): the watch's repair ladder works on it; nothing else of ours does (``apply`` leaves it, as any quarantine).
QUARANTINED_BY_WATCH = "quarantined by the watch"
#: A node the watch is re-validating after a step of its ladder: burning-in at the watch's own stage.
REVALIDATING = "revalidating"
#: The stages of the quarantines the watch makes and may take back: node-check's, a cut rail's, a failed
#: revalidation's. ``rma`` is the watch's too, but a node sent to RMA is held until ``provision return``.
WATCH_QUARANTINE_STAGES = frozenset({"node-check", "fabric", "revalidate"})
#: The burn-in stage of a node the watch re-validates.
REVALIDATE_STAGE = "revalidate"


def standing(state: NodeState, stage: str | None, by_operator: bool) -> str:
    """The row of :data:`MOVES` a node is on: a quarantine made by the provision phase (stage ``provision``, not by
    an operator) is :data:`QUARANTINED_IN_PROVISIONING`; one the watch made is :data:`QUARANTINED_BY_WATCH`; a
    node the watch re-validates is :data:`REVALIDATING`; every other state is itself."""
    if state is NodeState.QUARANTINED and stage == "provision" and not by_operator:
        return QUARANTINED_IN_PROVISIONING
    if state is NodeState.QUARANTINED and stage in WATCH_QUARANTINE_STAGES and not by_operator:
        return QUARANTINED_BY_WATCH
    if state is NodeState.BURNING_IN and stage == REVALIDATE_STAGE:
        return REVALIDATING
    return state.value


def retried_by_provisioning(state: NodeState, stage: str | None, by_operator: bool) -> bool:
    """Whether ``apply``'s provision phase takes the node: never one the burn-in or an operator holds."""
    return NodeState.PROVISIONED in _targets(standing(state, stage, by_operator), APPLY)


_HELD = NodeState.QUARANTINED.value  # a quarantine the burn-in or an operator made
_EVERY_STANDING = (*(state.value for state in NodeState), QUARANTINED_IN_PROVISIONING, QUARANTINED_BY_WATCH,
                   REVALIDATING)


def _moves() -> dict[tuple[str, NodeState], frozenset[str]]:
    table: dict[tuple[str, NodeState], set[str]] = {}

    def allow(commands: set[str], sources: tuple[str, ...], *targets: NodeState) -> None:
        for source in sources:
            for target in targets:
                table.setdefault((source, target), set()).update(commands)

    new, provisioned, burning, admitted = (NodeState.NEW.value, NodeState.PROVISIONED.value,
                                           NodeState.BURNING_IN.value, NodeState.ADMITTED.value)
    PROVISIONED, BURNING_IN, ADMITTED, QUARANTINED, DRAINED = (
        NodeState.PROVISIONED, NodeState.BURNING_IN, NodeState.ADMITTED, NodeState.QUARANTINED, NodeState.DRAINED)
    # apply's provision phase: converged, or quarantined with the failing task; an admitted node is provisioned
    # again only when a changed spec changed it
    allow({APPLY}, (new, provisioned, admitted, QUARANTINED_IN_PROVISIONING), PROVISIONED, QUARANTINED)
    # the burn-in (in apply, or `provision burnin`): into a stage, through the stages, admitted or quarantined
    allow({APPLY, BURNIN}, (provisioned, burning), BURNING_IN)
    allow({APPLY, BURNIN}, (burning,), ADMITTED, QUARANTINED)
    # an operator's re-test takes a node the burn-in (or the watch) held back in at the stage it failed; failing
    # again holds it
    allow({BURNIN}, (_HELD, QUARANTINED_BY_WATCH), BURNING_IN, QUARANTINED)
    # the operator's own moves, from anywhere; a return from repair only from a quarantine
    allow({ADMIT}, _EVERY_STANDING, ADMITTED)
    allow({QUARANTINE}, _EVERY_STANDING, QUARANTINED)
    allow({DRAIN}, _EVERY_STANDING, DRAINED)
    allow({RETURN}, (_HELD, QUARANTINED_IN_PROVISIONING, QUARANTINED_BY_WATCH), PROVISIONED)
    # the watch: an admitted node node-check drained in Slurm, or whose rail a cable cut, is quarantined with the
    # reason (what an administrator did in Slurm the watch records as that administrator's own move: the
    # operator's rows above); its repair ladder re-validates a node it quarantined after each step, returns it on
    # its own measurements or holds it (at the next rung, or for RMA, which only `provision return` ends)
    allow({WATCH}, (admitted,), QUARANTINED)
    # a failed job's triage, asked to drain (`provision triage --drain`): an admitted node it blames is quarantined
    # at stage `job`; from there it is any quarantine's: re-tested by `provision burnin`, or back from repair
    allow({TRIAGE}, (admitted,), QUARANTINED)
    allow({WATCH}, (QUARANTINED_BY_WATCH,), BURNING_IN, QUARANTINED)
    # its ladder's `reburnin` rung hands the node back to the burn-in (every stage, partners and all): provisioned
    allow({WATCH}, (QUARANTINED_BY_WATCH,), PROVISIONED)
    allow({WATCH}, (REVALIDATING,), ADMITTED, QUARANTINED)
    return {key: frozenset(commands) for key, commands in table.items()}


#: (where the node stands, where it goes) → the commands that may make that move; a move on no row is refused.
MOVES: dict[tuple[str, NodeState], frozenset[str]] = _moves()


def _targets(source: str, command: str) -> set[NodeState]:
    return {target for (origin, target), commands in MOVES.items() if origin == source and command in commands}


class TransitionError(Refusal, ValueError):
    """A move the lifecycle does not allow."""


def check_move(current: NodeState, target: NodeState, *, command: str, stage: str | None, reason: str,
               current_stage: str | None = None, current_by_operator: bool = False) -> None:
    """Refuse a move the table does not give ``command``; a stage and a reason where the target needs them."""
    source = standing(current, current_stage, current_by_operator)
    allowed = MOVES.get((source, target), frozenset())
    if command not in allowed:
        hint = f" (only {', '.join(f'`provision {name}`' for name in sorted(allowed))} may)" if allowed else ""
        raise TransitionError(f"`provision {command}` cannot move a node from {source} to {target}{hint}")
    if target is NodeState.BURNING_IN and not stage:
        raise TransitionError("burning-in needs the stage the node is in")
    if target is NodeState.BURNING_IN and (command == WATCH) != (stage == REVALIDATE_STAGE):
        raise TransitionError(f"stage {REVALIDATE_STAGE} is the watch's re-validation, and the watch's only "
                              "burn-in stage")
    if target in (NodeState.QUARANTINED, NodeState.DRAINED) and not reason.strip():
        raise TransitionError(f"{target} needs a reason")
