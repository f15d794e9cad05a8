"""Admission reaches Slurm: the store decides, Slurm follows.

Only admitted nodes take jobs. Every other node of the spec is drained with a reason that starts ``provision:``
— ``provision: <stage>/<check>: ... (run <id>)`` for a quarantined one — and an admitted node is resumed only
when the drain is ours: a node an administrator drained for something else stays drained, and the sync says so.
Features follow too (GPU model, rail count, ``burnin_ok`` on admitted nodes), leaving every other feature alone.

The plan is a pure function of the store's records and Slurm's (``plan_sync``); applying it is a handful of
``scontrol update`` calls. The sync runs after every run (:mod:`provision.sinks.dispatch`) and on demand
(``provision slurm sync``); when slurmctld cannot be reached the store keeps its verdicts, the sync is marked
pending, and the next run retries it whole.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from provision.errors import Refusal
from provision.facts.slurm import SlurmNode
from provision.hosts.slurmctl import SlurmReader, SlurmUnreachable, reader_settings
from provision.spec import LoadedSpec
from provision.state import NodeRecord, NodeState, StateStore
from topology import hostlist

PREFIX = "provision:"
#: node-check's drain (``provision.node_check.on_node.DRAIN_PREFIX``): named here, as the words are what the sync
#: compares, and tied to node-check's by a test.
NODE_CHECK_DRAIN = "provision node-check:"
SINK = "slurm"
BURNIN_OK = "burnin_ok"
MAX_REASON = 240


class SlurmNamesDiffer(Refusal, ValueError):
    """The spec names nodes Slurm does not know: nothing is changed until the names agree."""


@dataclass(frozen=True)
class Action:
    node: str
    kind: str  # drain | resume | features
    reason: str = ""
    features: tuple[str, ...] = ()
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "action": self.kind, "reason": self.reason, "features": list(self.features),
                "why": self.why}


@dataclass
class SyncPlan:
    actions: list[Action] = field(default_factory=list)
    held_by_admin: dict[str, str] = field(default_factory=dict)  # admitted here, drained there for another reason
    unreachable_nodes: dict[str, str] = field(default_factory=dict)  # admitted, but Slurm has the node down

    def as_dict(self) -> dict[str, Any]:
        return {"actions": [action.as_dict() for action in self.actions], "held_by_admin": self.held_by_admin,
                "down_in_slurm": self.unreachable_nodes}


def ours(node: SlurmNode) -> bool:
    return node.reason.startswith(PREFIX)


def read_back(record: NodeRecord, node: SlurmNode) -> bool:
    """node-check's own drain of a node the store holds quarantined: the watch read it back, so it is the store's
    decision now and the sync rewrites it as ours. Left as node-check's, it would hold a node the watch's repair
    ladder later re-validates and returns (our sync resumes only our drains), and the next pass would read the
    same drain back as a new failure. Any stage: the pass that reads the drain back also takes the ladder's first
    rung, which moves the node to stage ``revalidate`` before the sync runs (a GPU reset, then its Xid still in
    the log: held there), and that drain was left as node-check's for good (stop 63's clean clone)."""
    return record.state is NodeState.QUARANTINED and node.reason.startswith(NODE_CHECK_DRAIN)


def wanted_reason(record: NodeRecord) -> str:
    """The drain reason Slurm should show for a node that is not admitted (one line, bounded)."""
    run = f" (run {record.run_id})" if record.run_id else ""
    if record.state is NodeState.QUARANTINED:
        text = record.reason if record.stage else f"quarantined by an operator: {record.reason}"
    elif record.state is NodeState.DRAINED:
        text = f"drained: {record.reason}"
    else:
        text = f"not admitted yet: {record.state}" + (f" {record.stage}" if record.stage else "")
    text = " ".join(f"{PREFIX} {text}".split())
    if len(text) + len(run) > MAX_REASON:
        text = text[:MAX_REASON - len(run) - 3] + "..."
    return text + run


def node_features(loaded: LoadedSpec) -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    """Each node's own features (GPU model, rails) and every feature this tool manages."""
    own: dict[str, tuple[str, ...]] = {}
    for node in loaded.nodes:
        profile = loaded.spec.hardware[node.hardware]
        own[node.name] = (profile.gpu.model.lower(), f"rails{len(profile.rails)}")
    managed = frozenset({BURNIN_OK, *(feature for features in own.values() for feature in features)})
    return own, managed


def plan_sync(records: Sequence[NodeRecord], slurm: dict[str, SlurmNode], *, own_features: dict[str, tuple[str, ...]]
              | None = None, managed: frozenset[str] = frozenset()) -> SyncPlan:
    """What Slurm must be told so that it agrees with the store (pure: tested on recorded scontrol output)."""
    plan = SyncPlan()
    for record in records:
        if not record.in_spec or record.name not in slurm:
            continue
        node = slurm[record.name]
        admitted = record.state is NodeState.ADMITTED
        if admitted:
            if node.drained and ours(node):
                plan.actions.append(Action(record.name, "resume", why="admitted"))
            elif node.drained:
                plan.held_by_admin[record.name] = node.reason
            if node.state == "down" or "not_responding" in node.flags:
                plan.unreachable_nodes[record.name] = node.reason or node.state
        else:
            reason = wanted_reason(record)
            if not node.drained:
                plan.actions.append(Action(record.name, "drain", reason, why=str(record.state)))
            elif ours(node) and node.reason != reason:
                plan.actions.append(Action(record.name, "drain", reason, why="reason changed"))
            elif read_back(record, node):
                plan.actions.append(Action(record.name, "drain", reason, why="node-check's drain, read back"))
        if own_features is not None:
            wanted = set(own_features.get(record.name, ())) | ({BURNIN_OK} if admitted else set())
            current = set(node.available_features)
            target = (current - managed) | wanted
            if target != current:
                plan.actions.append(Action(record.name, "features", features=tuple(sorted(target)),
                                           why="features follow the store"))
    return plan


class SlurmClient(SlurmReader):
    """``scontrol`` with the spec's slurm.conf, reading (:class:`SlurmReader`) and applying a sync plan."""

    def submit(self, argv: list[str]) -> str:
        """``sbatch --parsable ...``: the new job's id (``--parsable`` prints ``id`` or ``id;cluster``)."""
        said = self.run(argv).strip()
        job_id = said.split(";", 1)[0]
        if not job_id.isdigit():
            raise SlurmUnreachable(f"sbatch gave no job id: {said[:200]!r}")
        return job_id

    def apply(self, plan: SyncPlan) -> None:
        resumes = [action.node for action in plan.actions if action.kind == "resume"]
        if resumes:
            self.run(["scontrol", "update", f"nodename={hostlist.compress(resumes)}", "state=resume"])
        for action in plan.actions:
            if action.kind == "drain":
                self.run(["scontrol", "update", f"nodename={action.node}", "state=drain", f"reason={action.reason}"])
            elif action.kind == "features":
                listed = ",".join(action.features)
                self.run(["scontrol", "update", f"nodename={action.node}", f"AvailableFeatures={listed}",
                           f"ActiveFeatures={listed}"])


def client_for(loaded: LoadedSpec) -> SlurmClient:
    return SlurmClient(*reader_settings(loaded))


def check_names(loaded: LoadedSpec, slurm: dict[str, SlurmNode]) -> None:
    """Every node of the spec must be a Slurm node: a located error listing the differences otherwise."""
    missing = [name for name in loaded.node_names if name not in slurm]
    if not missing:
        return
    extra = sorted(set(slurm) - set(loaded.node_names))
    where = loaded.source.locate(("nodes",), prefer_key=True)
    raise SlurmNamesDiffer(
        f"{where}: nodes: {len(missing)} node(s) of the spec are not Slurm nodes: "
        f"{hostlist.compress(missing)}" + (f"; Slurm has {len(extra)} node(s) the spec does not name: "
                                            f"{hostlist.compress(extra)}" if extra else "")
        + ". Nothing was changed in Slurm; make the names agree (the spec's node names are Slurm's NodeName).")


@dataclass
class SyncResult:
    plan: SyncPlan
    applied: bool
    pending: bool = False
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**self.plan.as_dict(), "applied": self.applied, "pending": self.pending, "error": self.error}


def sync(loaded: LoadedSpec, store: StateStore, *, dry_run: bool = False, run_id: str | None = None) -> SyncResult:
    """Bring Slurm in line with the store; record whether it worked (``pending`` when slurmctld is unreachable)."""
    client = client_for(loaded)
    features = loaded.spec.slurm.features if loaded.spec.slurm else False
    own, managed = node_features(loaded) if features else ({}, frozenset())
    try:
        slurm = client.nodes()
        check_names(loaded, slurm)
        plan = plan_sync(store.nodes(), slurm, own_features=own if features else None, managed=managed)
        if dry_run:
            return SyncResult(plan, applied=False)
        client.apply(plan)
    except SlurmUnreachable as error:
        if not dry_run:
            store.set_sink_status(SINK, pending=True, detail={"error": str(error)}, run_id=run_id)
        return SyncResult(SyncPlan(), applied=False, pending=True, error=str(error))
    store.set_sink_status(SINK, pending=False, detail={"actions": len(plan.actions),
                                                       "held_by_admin": plan.held_by_admin}, run_id=run_id)
    return SyncResult(plan, applied=True)


class SlurmWindowRefused(Refusal, ValueError):
    """The burn-in cannot have its nodes in Slurm (an administrator's drain on a candidate)."""


_window: list[str] = []  # the maintenance reservation of the burn-in in progress, for the srun launcher


def active_reservation() -> str | None:
    return _window[-1] if _window else None


def idle_nodes(loaded: LoadedSpec, names: Sequence[str]) -> list[str]:
    """Which of ``names`` Slurm has idle and in service (no job, not drained, responding): the admitted nodes a
    small burn-in may borrow as partners without taking them from under a job."""
    return idle_in(client_for(loaded).nodes(), names)


def idle_in(known: Mapping[str, SlurmNode], names: Sequence[str]) -> list[str]:
    """``idle_nodes`` on a listing already read. Not responding counts as out of service: Slurm also marks a node
    so right after ``state=resume``, until its slurmd answers the ping the resume sends."""
    return [name for name in names if name in known and known[name].state == "idle" and not known[name].drained
            and "not_responding" not in known[name].flags]


@contextmanager
def burnin_window(loaded: LoadedSpec, store: StateStore, run_id: str, nodes: Sequence[str]) -> Iterator[str]:
    """The candidates in a maintenance reservation of their own, our drains lifted inside it, for the length of
    the burn-in; after it, Slurm is synced with the verdicts first and the reservation removed last, so no
    other job lands on a node between its verdict and its drain."""
    client = client_for(loaded)
    known = client.nodes()
    check_names(loaded, known)
    held = {name: known[name].reason for name in nodes if known[name].drained and not ours(known[name])}
    if held:
        raise SlurmWindowRefused("the slurm launcher cannot use nodes an administrator drained: " + "; ".join(
            f"{name} ({reason})" for name, reason in sorted(held.items())) + ": resume them in Slurm or leave "
            "them out with --limit")
    name = f"provision-burnin-{run_id}"
    client.run(["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now",
                "Duration=UNLIMITED", f"Users={getpass.getuser()}", "Flags=MAINT,IGNORE_JOBS",
                f"Nodes={hostlist.compress(list(nodes))}"])
    _window.append(name)
    try:
        drained = [node for node in nodes if known[node].drained]
        if drained:
            client.run(["scontrol", "update", f"nodename={hostlist.compress(drained)}", "state=resume"])
        yield name
    finally:
        _window.remove(name)
        try:
            sync(loaded, store, run_id=run_id)
        finally:
            client.run(["scontrol", "delete", f"reservation={name}"])
