"""An operator's move of nodes (admit, quarantine, drain, return from repair): all or none, each kept in the node's
history."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from provision.errors import UsageProblem
from provision.run.context import SpecIdentity, mutating_run
from provision.spec import LoadedSpec
from provision.state import NodeRecord, NodeState, StateStore
from provision.state.lifecycle import JOB_STAGE, TRIAGE
from topology import hostlist

COMMANDS = {NodeState.ADMITTED: "admit", NodeState.QUARANTINED: "quarantine", NodeState.DRAINED: "drain"}
#: ``provision return``: quarantined nodes back from repair, to burn in again.
RETURN = "return"


@dataclass(frozen=True)
class Move:
    nodes: list[str]
    to: NodeState
    reason: str
    run_id: str
    record: Path

    def as_dict(self) -> dict[str, object]:
        return {"nodes": self.nodes, "to": self.to.value, "reason": self.reason, "run_id": self.run_id,
                "record": str(self.record)}


def move_nodes(directory: Path, target: NodeState, hosts: str, reason: str, *, argv: list[str],
               spec: LoadedSpec | None = None) -> Move:
    """Move every node of the HOSTLIST to ``target`` inside one recorded run, or none of them.

    Refused before anything changes: an empty reason, a bad hostlist, a node the store does not know, no store.
    A move the lifecycle forbids for any one node leaves every node as it was (one transaction).
    """
    def move(record: NodeRecord) -> tuple[str | None, dict[str, object]]:
        return record.stage if target is NodeState.QUARANTINED else None, {"operator": True}

    return _move(directory, COMMANDS[target], target, hosts, reason, move, argv=argv, spec=spec)


def return_nodes(directory: Path, hosts: str, reason: str, *, argv: list[str], spec: LoadedSpec | None = None) -> Move:
    """Quarantined nodes back from repair (an RMA, a reseat): to ``provisioned``, so the next ``apply`` runs every
    stage of the burn-in again on them (a repair touches hardware: no stage is carried), their history keeping what
    they failed and why they came back. Only a quarantined node returns; any other in the HOSTLIST refuses all."""
    def move(record: NodeRecord) -> tuple[str | None, dict[str, object]]:
        if record.state is not NodeState.QUARANTINED:
            raise UsageProblem(f"{record.name} is {record.state}, not quarantined: only a quarantined node comes "
                               "back from repair")
        return None, {"operator": True, "returned": True, "quarantined_in": record.stage,
                      "quarantined_for": record.reason, "quarantined_by": record.run_id}

    return _move(directory, RETURN, NodeState.PROVISIONED, hosts, reason, move, argv=argv, spec=spec)


def _move(directory: Path, command: str, target: NodeState, hosts: str, reason: str,
          move: Callable[[NodeRecord], tuple[str | None, dict[str, object]]], *, argv: list[str],
          spec: LoadedSpec | None) -> Move:
    if not reason.strip():
        raise UsageProblem("--reason must say why")
    try:
        names = hostlist.expand(hosts)
    except hostlist.HostlistError as error:
        raise UsageProblem(str(error)) from None
    if StateStore.open_readonly(directory) is None:
        raise UsageProblem(f"no state store in {directory}: run `provision apply` first")
    identity = SpecIdentity(spec.path.resolve(), spec.sha256) if spec is not None else None
    with mutating_run(directory, command, argv, spec=identity) as run:
        store = run.store
        unknown = [name for name in names if store.node(name) is None]
        if unknown:
            raise UsageProblem(f"not in the state store: {hostlist.compress(unknown)}")
        run.note("operator_move", {"to": target.value, "hosts": names, "reason": reason})
        with store.transaction():  # all or nothing: a refused move leaves every node as it was
            for name in names:
                record = store.node(name)
                assert record is not None
                stage, evidence = move(record)
                store.transition(name, target, run_id=run.id, reason=reason, stage=stage,
                                 evidence=evidence)
    return Move(names, target, reason, run.id, run.path)


@dataclass(frozen=True)
class JobDrain:
    """What ``provision triage --drain`` did: the nodes it took out of service, and the blamed ones it left (not
    admitted, or not in the store), each with why."""

    drained: list[str]
    left: dict[str, str]
    run_id: str
    record: Path

    def as_dict(self) -> dict[str, object]:
        return {"drained": self.drained, "left": self.left, "run_id": self.run_id, "record": str(self.record)}


def drain_for_job(directory: Path, job_id: str, blamed: dict[str, list[str]], *, argv: list[str],
                  spec: LoadedSpec | None = None, evidence: Path | None = None) -> JobDrain:
    """Quarantine the admitted nodes a failed job's triage blamed (``blamed``: node -> the evidence), at stage
    ``job`` with the job's id and the evidence in their history, inside one recorded run: Slurm follows the store
    as after any run. A blamed node that is not admitted is left as it is (already out of service, or never ours),
    and said so: the triage names it either way."""
    if StateStore.open_readonly(directory) is None:
        raise UsageProblem(f"no state store in {directory}: run `provision apply` first")
    identity = SpecIdentity(spec.path.resolve(), spec.sha256) if spec is not None else None
    drained: list[str] = []
    left: dict[str, str] = {}
    with mutating_run(directory, TRIAGE, argv, spec=identity) as run:
        store = run.store
        run.note("job_drain", {"job": job_id, "blamed": blamed})
        if evidence is not None:  # what the verdict was read from, kept with the run that acted on it
            shutil.copytree(evidence, run.path / "evidence", dirs_exist_ok=True)
        with store.transaction():
            for name, why in sorted(blamed.items()):
                record = store.node(name)
                if record is None:
                    left[name] = "not in the state store"
                elif record.state is not NodeState.ADMITTED:
                    left[name] = f"{record.state.value}, not admitted: left as it is"
                else:
                    store.transition(name, NodeState.QUARANTINED, run_id=run.id, stage=JOB_STAGE,
                                     reason=f"job {job_id}: {why[0] if why else 'blamed by its triage'}",
                                     evidence={"job": job_id, "triage": why})
                    drained.append(name)
    return JobDrain(drained, left, run.id, run.path)
