"""The repair ladder carried out, one action per held node per pass (issue 56, item 5).

For each node the watch holds (quarantined by it, or left re-validating by a pass that was stopped) the pass asks
:func:`provision.watch.ladder.next_action` and does it:

- a rung (``revalidate``, ``gpu_reset``, ``power_cycle``): the attempt is recorded first, the step done
  (each GPU's ``nvidia-smi -r -i N`` on the node, the persistence daemon stopped around it; the BMC's power
  cycle, waited on until the host answers with a new boot id), the node moved to the watch's ``revalidate`` stage
  and judged on its own preflight checks (the controller's session, the spec's expectations: the same judgements
  as the burn-in's preflight); a node whose every check is ok (or a
  warning) returns to service, any other is held at stage ``revalidate`` for the next rung;
- ``reburnin``: the node is handed back to the burn-in (``provisioned``): the next ``provision burnin`` or
  ``apply`` runs every stage on it, pairs and collectives with partners included, and its verdict is the burn-in's;
- ``rma``: the evidence bundle written into the pass's run directory, the node held at stage ``rma`` until
  ``provision return``.

A step that could not be done (the BMC did not answer, the host did not come back) fails its attempt with why;
the node stays held and the next pass moves on to the next rung. Every move is the watch's run's, in the node's
history with the attempt's detail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from provision.checks.outcome import CheckResult, Outcome
from provision.facts.kernel_log import KERNEL_LOG
from provision.facts.session import HostSession
from provision.run.context import ActiveRun
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.state import NodeState
from provision.state.lifecycle import (
    QUARANTINED_BY_WATCH,
    REVALIDATE_STAGE,
    REVALIDATING,
    standing,
)
from provision.watch import ladder, rma
from provision.watch.reconcile import FABRIC_STAGE

#: How long ``nvidia-smi -r`` may take (it waits for the GPUs to come back).
GPU_RESET_TIMEOUT_S = 120.0
#: The outcomes of a re-validation that return a node to service.
PASSING = (Outcome.OK, Outcome.SILENCED, Outcome.WARNING)


#: What holds a GPU open between jobs, and so refuses its reset ("In use by another client", NVIDIA/NVSentinel
#: #1690): stopped for the reset and started again after, whatever the reset did.
PERSISTENCE_UNIT = "nvidia-persistenced"


def reset_gpus(session: HostSession) -> tuple[bool, str]:
    """Every GPU of the node reset, one by one (``nvidia-smi -r -i N``): the persistence daemon stopped first and
    started again after if it ran (the NVSentinel fix of #1690); a GPU a process still holds is refused by the tool
    and the step fails with its words. Done: every GPU said it was reset."""
    listed = session.run(["nvidia-smi", "-L"], 30.0)
    indices = [line.split(":", 1)[0].removeprefix("GPU ").strip() for line in listed.stdout.splitlines()
               if line.startswith("GPU ")]
    if not listed.ok or not indices:
        return False, f"nvidia-smi -L listed no GPU to reset ({listed.problem() if not listed.ok else 'none'})"
    was_active = session.run(["systemctl", "is-active", PERSISTENCE_UNIT], 30.0).stdout.strip() == "active"
    said: list[str] = []
    ok = True
    try:
        if was_active:
            stopped = session.run(["systemctl", "stop", PERSISTENCE_UNIT], 60.0, become=True)
            if not stopped.ok:
                return False, f"{PERSISTENCE_UNIT} could not be stopped for the reset: {stopped.problem()}"
        for index in indices:
            result = session.run(["nvidia-smi", "-r", "-i", index], GPU_RESET_TIMEOUT_S, become=True)
            words = " ".join(line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip())
            said.append(words[:200] or f"GPU {index}: exit {result.rc}")
            ok = ok and result.ok
    finally:
        if was_active:
            started = session.run(["systemctl", "start", PERSISTENCE_UNIT], 60.0, become=True)
            if not started.ok:
                said.append(f"{PERSISTENCE_UNIT} did not start again: {started.problem()}")
                ok = False
    return ok, " / ".join(said)[-600:]


def kernel_log_position(session: HostSession) -> float | None:
    """The stamp of the node's last kernel record (seconds since boot), or None when it could not be read: a GPU
    reset leaves the Xid that began the episode in the ring, and on a real node NVIDIA's remedy for Xid 48, 63, 94
    or 95 is that reset, so the re-validation after it judges only what the kernel logged after this point."""
    read = session.run(KERNEL_LOG.argv, 30.0, become=KERNEL_LOG.needs_root)
    if not read.ok:
        return None
    try:
        stamps = [line.seconds for line in KERNEL_LOG.parse(read.stdout) if line.seconds is not None]
    except ValueError:
        return None
    return max(stamps) if stamps else None


class Steps(Protocol):
    """What the ladder does to a node (the hosts, their BMCs); :class:`HostSteps` on real and simulated hosts."""

    def perform(self, node: ResolvedNode, step: str) -> tuple[bool, str]: ...

    def revalidate(self, node: ResolvedNode) -> list[CheckResult]: ...

    def bmc_log(self, node: ResolvedNode) -> list[dict[str, Any]] | str: ...


@dataclass
class HostSteps:
    """The steps through the hosts' sessions and BMCs, as the inventory and the spec's ``bmc:`` reach them."""

    loaded: LoadedSpec
    state_dir: Path
    #: Where each node's kernel log stood (seconds since boot) when its GPU reset began: its re-validation judges
    #: what was logged after. Held for the step's own pass only: a pass stopped between the step and its
    #: judgement judges the whole log next time (the episode's Xid again: held, never returned on less).
    kernel_marks: dict[str, float] = field(default_factory=dict)

    def perform(self, node: ResolvedNode, step: str) -> tuple[bool, str]:
        if step == "revalidate":
            return True, "re-validated as it is"
        if step == "gpu_reset":
            from provision.hosts.remote import open_session

            try:
                session = open_session(self.loaded, node, self.state_dir)
            except Exception as error:  # unreachable: the step was not done
                return False, f"{node.name} unreachable: {type(error).__name__}: {error}"
            try:
                mark = kernel_log_position(session)
                if mark is not None:
                    self.kernel_marks[node.name] = mark
                return reset_gpus(session)
            finally:
                session.close()
        if step == "power_cycle":
            from provision.hosts.recovery import power_cycle_hung

            recovery = power_cycle_hung(self.loaded, self.state_dir, [node.name])
            if node.name in recovery.back:
                steps = recovery.cycles.get(node.name, {}).get("steps", [])
                return True, "power-cycled through its BMC and back with a new boot id (" + "; ".join(steps) + ")"
            return False, recovery.still_down.get(node.name, "not power-cycled")
        return False, f"{step} is not a step the watch carries out on the host"

    def revalidate(self, node: ResolvedNode) -> list[CheckResult]:
        from provision.burnin.preflight import check_node

        return check_node(self.loaded, node, self.state_dir, kernel_after_s=self.kernel_marks.pop(node.name, None))

    def bmc_log(self, node: ResolvedNode) -> list[dict[str, Any]] | str:
        if self.loaded.spec.bmc is None:
            return "the spec has no bmc: section"
        return "the BMC's log service is not read by this version (the power state and cycles are)"


@dataclass
class Climbed:
    """What the pass did for one held node."""

    node: str
    action: str
    step: str
    why: str
    outcome: str = ""  # returned | held | rma | handed to the burn-in | step failed
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "action": self.action, "step": self.step, "why": self.why,
                "outcome": self.outcome, "detail": self.detail}


def held_nodes(run: ActiveRun) -> list[str]:
    """The nodes the ladder works on: quarantined by the watch, or left re-validating by a stopped pass."""
    return [record.name for record in run.store.nodes() if record.in_spec and standing(
        record.state, record.stage, record.by_operator) in (QUARANTINED_BY_WATCH, REVALIDATING)]


def _episode_row(run: ActiveRun, node: str, episode: int) -> dict[str, Any]:
    return next((row for row in run.store.history(node) if row["id"] == episode), {})


def _episode_evidence(run: ActiveRun, node: str, episode: int) -> dict[str, Any]:
    return dict(_episode_row(run, node, episode).get("evidence") or {})


def _episode_at(run: ActiveRun, node: str, episode: int) -> str:
    return str(_episode_row(run, node, episode).get("at", ""))


def check_of(run: ActiveRun, node: str, episode: int) -> str:
    """The check whose failure began the episode: ``node-check/<check>: ...`` read back, ``fabric`` for a cut
    rail."""
    row = _episode_row(run, node, episode)
    if not row:
        return "unknown"
    if row["stage"] == FABRIC_STAGE:
        return "fabric"
    reason = str(row["reason"])
    return reason.split("/", 1)[1].split(":", 1)[0] if reason.startswith("node-check/") else "unknown"


def climb(loaded: LoadedSpec, run: ActiveRun, *, now: float, steps: Steps) -> list[Climbed]:
    """One action for each node the watch holds."""
    policy = loaded.spec.watch.ladder
    nodes = {node.name: node for node in loaded.nodes}
    done = []
    for name in held_nodes(run):
        episode = run.store.watch_episode(name)
        if episode is None or name not in nodes:
            continue
        rows = run.store.attempts(name, episode)
        attempts = [ladder.Attempt(row["step"], row["outcome"], 0.0) for row in rows]
        check = check_of(run, name, episode)
        since = (datetime.fromtimestamp(now, UTC) - timedelta(days=policy.rma_window_days)).isoformat()
        action = ladder.next_action(policy, check, attempts,
                                    quarantines_in_window=run.store.watch_quarantines_since(name, since))
        record = run.store.node(name)
        assert record is not None
        if check == "fabric":  # its rail's cable was cut: the node waits for the cable, not for a ladder of its own
            cable = _episode_evidence(run, name, episode).get("cable", "")
            repaired = [entry for entry in run.store.cable_history(cable) if entry["kind"] == "repair"
                        and entry["at"] >= _episode_at(run, name, episode)]
            if not repaired and not rows:
                done.append(Climbed(name, "wait", "", f"its rail's cable {cable} has no repair recorded since "
                                    "(provision topology repaired)", "held"))
                continue
            action = ladder.Action("revalidate" if rows and rows[-1]["outcome"] == ladder.STARTED else "step",
                                   "revalidate", f"cable {cable} repaired")
        if action.kind == "rma":
            done.append(_rma(loaded, run, nodes[name], action, steps))
            continue
        if action.kind == "revalidate":  # a step started by a pass that was stopped: judge, do not repeat
            attempt = int(rows[-1]["id"])
            done.append(_judge(run, nodes[name], action, attempt, steps, "the step's outcome was not recorded"))
            continue
        if action.step == "reburnin":
            attempt = run.store.start_attempt(name, episode, action.step, run_id=run.id)
            run.store.finish_attempt(attempt, ladder.PASSED, {"handed": "to the burn-in"})
            run.store.transition(name, NodeState.PROVISIONED, run_id=run.id, reason=f"watch: {action.why}: "
                                 "handed back to the burn-in (every stage)")
            done.append(Climbed(name, action.kind, action.step, action.why, "handed to the burn-in"))
            continue
        attempt = run.store.start_attempt(name, episode, action.step, run_id=run.id)
        ok, said = steps.perform(nodes[name], action.step)
        if not ok:
            run.store.finish_attempt(attempt, ladder.FAILED, {"step": said})
            if record.state is NodeState.BURNING_IN:
                run.store.transition(name, NodeState.QUARANTINED, run_id=run.id, stage=REVALIDATE_STAGE,
                                     reason=f"watch: {action.step} could not be done: {said}")
            done.append(Climbed(name, action.kind, action.step, action.why, "step failed", {"step": said}))
            continue
        done.append(_judge(run, nodes[name], action, attempt, steps, said))
    return done


def _judge(run: ActiveRun, node: ResolvedNode, action: ladder.Action, attempt: int, steps: Steps,
           said: str) -> Climbed:
    """Re-validate on the node's own checks: returned to service, or held for the next rung."""
    record = run.store.node(node.name)
    assert record is not None
    if record.state is not NodeState.BURNING_IN:
        run.store.transition(node.name, NodeState.BURNING_IN, run_id=run.id, stage=REVALIDATE_STAGE,
                             reason=f"re-validating after {action.step}")
    results = steps.revalidate(node)
    failing = [result for result in results if result.outcome not in PASSING]
    detail = {"step": said, "results": [result.as_dict() for result in results]}
    if results and not failing:
        run.store.finish_attempt(attempt, ladder.PASSED, detail)
        run.store.transition(node.name, NodeState.ADMITTED, run_id=run.id,
                             reason=f"re-validated after {action.step}: {len(results)} check(s) ok",
                             evidence={"attempt": attempt})
        return Climbed(node.name, action.kind, action.step, action.why, "returned", detail)
    first = failing[0] if failing else CheckResult("revalidate", Outcome.UNKNOWN, "no check reported")
    run.store.finish_attempt(attempt, ladder.FAILED, detail)
    run.store.transition(node.name, NodeState.QUARANTINED, run_id=run.id, stage=REVALIDATE_STAGE,
                         reason=f"revalidate/{first.check}: {first.message}", evidence={"attempt": attempt})
    return Climbed(node.name, action.kind, action.step, action.why, "held", detail)


def _rma(loaded: LoadedSpec, run: ActiveRun, node: ResolvedNode, action: ladder.Action, steps: Steps) -> Climbed:
    bundle = rma.write_bundle(run.store, node.name, run.path / "rma", cluster=loaded.spec.cluster.name,
                              why=action.why, bmc=steps.bmc_log(node))
    run.store.transition(node.name, NodeState.QUARANTINED, run_id=run.id, stage="rma",
                         reason=f"rma: {action.why}", evidence={"bundle": str(bundle.path)})
    return Climbed(node.name, action.kind, "rma", action.why, "rma", {"bundle": str(bundle.path)})
