"""The revalidation of idle admitted nodes carried out at each pass (issue 56, item 4; ``watch.revalidate``).

Each pass reads how the watch's revalidation jobs ended (:func:`provision.watch.revalidate.read_ends` over
``scontrol -o show job``), keeps each end in the store, and submits a job for each node that is due: admitted,
idle in Slurm, none of its revalidations underway, not known good within ``every`` (since its admission or its last
revalidation that passed), at most ``per_pass`` a pass. The job runs node-check in the low-tier partition, which a
user's job preempts. Its verdict reaches the lifecycle the way any node-check's does: a CRITICAL node-check with
``--drain`` drains its node in Slurm, and the watch's reconcile reads that drain back and quarantines the node with
its check (through the breaker), the repair ladder taking it from there. What is no verdict (preempted,
cancelled, lost, an UNKNOWN check) leaves the node due again; an end that is an error of the job's or ours is a
problem of the pass, said. While the breaker is tripped no job is submitted: a systemic state is not the moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from provision.hosts.slurmctl import SlurmUnreachable
from provision.run.context import ActiveRun
from provision.sinks.slurm import SlurmClient
from provision.spec import LoadedSpec
from provision.state import NodeState
from provision.watch import revalidate

#: Slurm node flags that make a node not idle for a revalidation, whatever its base state says.
NOT_FREE = frozenset({"drain", "draining", "drained", "maint", "reserved", "not_responding", "powered_down",
                      "powering_down", "powering_up", "reboot_requested", "completing"})


@dataclass
class RevalidationPass:
    ended: list[revalidate.JobEnd] = field(default_factory=list)
    submitted: dict[str, str] = field(default_factory=dict)  # node -> job id
    problems: list[str] = field(default_factory=list)
    held: str = ""  # why no job was submitted (the breaker)

    def as_dict(self) -> dict[str, Any]:
        return {"ended": [{"node": end.node, "job_id": end.job_id, "verdict": end.verdict, "detail": end.detail}
                          for end in self.ended], "submitted": self.submitted, "problems": self.problems,
                "held": self.held}


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return float("-inf")


def job_argv(policy_partition: str, node: str, minutes: int, command: str) -> list[str]:
    """``sbatch`` for one node's revalidation: its partition, that node only, named so the watch finds it, bounded
    in time; its output on the node's /tmp (node-check's summary line, for whoever looks there)."""
    return ["sbatch", "--parsable", "-p", policy_partition, "-w", node, "-N", "1", "-J", revalidate.job_name(node),
            "-t", str(minutes), "--chdir=/tmp", "--output=/tmp/provision-revalidate-%j.out", "--wrap", command]


def revalidation_pass(loaded: LoadedSpec, run: ActiveRun, client: SlurmClient, *, now: float) -> RevalidationPass:
    result = RevalidationPass()
    policy = loaded.spec.watch.revalidate
    if policy is None:
        return result
    store = run.store
    try:
        jobs, slurm_nodes = client.jobs(), client.nodes()
    except SlurmUnreachable as error:
        result.problems.append(f"revalidation: {error}")
        return result
    for end in revalidate.read_ends(jobs, store.revalidations_underway()):
        if not end.ended:
            continue
        store.end_revalidation(end.job_id, end.verdict, end.detail, at=now)
        result.ended.append(end)
        if end.verdict == revalidate.ERROR:
            result.problems.append(f"revalidation of {end.node} (job {end.job_id}): {end.detail}")
        elif end.verdict == revalidate.FAILED and not (slurm_nodes.get(end.node) and
                                                       {"drain", "drained", "draining"} & slurm_nodes[end.node].flags):
            result.problems.append(f"revalidation of {end.node} (job {end.job_id}) failed ({end.detail}) but left "
                                   "the node in service: give node-check --drain in watch.revalidate.command")
    state = store.breaker()
    if state is not None and state["tripped"]:
        result.held = f"breaker tripped: {state['detail'].get('why', 'tripped')}"
        return result
    records = [record for record in store.nodes() if record.in_spec and record.state is NodeState.ADMITTED]
    passed = store.last_revalidated()
    last = {record.name: max(passed.get(record.name, float("-inf")), _epoch(record.updated_at)) for record in records}
    idle = {name for name, node in slurm_nodes.items() if node.state == "idle" and not node.flags & NOT_FREE}
    underway = set(store.revalidations_underway().values())
    for node in revalidate.due([record.name for record in records], last, idle=idle, underway=underway, now=now,
                               every_s=policy.every_seconds, limit=policy.per_pass):
        try:
            job_id = client.submit(job_argv(policy.partition, node, policy.time_limit_minutes, policy.command))
        except SlurmUnreachable as error:
            result.problems.append(f"revalidation of {node} not submitted: {error}")
            break
        store.add_revalidation(node, job_id, at=now, run_id=run.id)
        result.submitted[node] = job_id
    return result
