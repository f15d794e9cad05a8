"""Active checks on idle admitted nodes (issue 56, item 4): which nodes are due, and how their jobs ended.

The watch re-validates each admitted node at least once per period with a short job in a low-tier Slurm partition
over the same nodes, which a user's job preempts (``PreemptType=preempt/partition_prio``, ``PreemptMode=CANCEL``:
measured on this machine's Slurm in docs/watch.md). Pure here: the choice of nodes and the reading of the jobs'
ends from ``scontrol -o show job`` (:data:`provision.facts.slurm.SLURM_JOBS`); the pass submits and records.

A job's end is a verdict on its node only when the job ran its checks to the end, read as node-check's Nagios exit
code: 0 and 1 (a warning) passed, 2 failed, 3 (a check could not read) no verdict. ``preempted`` (a user's job took
the node) and ``cancelled`` (someone cancelled it) are not verdicts: the node is due again. ``timeout``,
``node_fail`` and the other ends where the checks did not finish are errors, the job's or ours, and the node is
tried again; a job slurmctld no longer knows (it forgets an ended job after ``MinJobAge``, 300 s by default) is
``lost``: never taken as passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from provision.facts.slurm import SlurmJob

#: The revalidation jobs' names: the prefix and the node, so the watch finds its own among a cluster's jobs.
JOB_PREFIX = "provision-revalidate-"
#: Job states whose checks have not ended yet.
UNDERWAY = frozenset({"pending", "configuring", "running", "completing", "suspended", "requeued", "resizing"})
#: Verdicts on the node, and ends that are none.
PASSED, FAILED, PREEMPTED, CANCELLED, ERROR, RUNNING, LOST = (
    "passed", "failed", "preempted", "cancelled", "error", "running", "lost")


#: The job runs ``provision-node-check``, which speaks Nagios: its exit code is the verdict (WARNING passes, as
#: preflight's warnings do; UNKNOWN is no verdict: a check could not read, and the node is tried again).
NAGIOS = {0: (PASSED, "OK"), 1: (PASSED, "WARNING: passed with a warning"), 2: (FAILED, "CRITICAL: a check failed"),
          3: (ERROR, "UNKNOWN: a check could not read; no verdict on the node")}


def job_name(node: str) -> str:
    return f"{JOB_PREFIX}{node}"


@dataclass(frozen=True)
class JobEnd:
    """How a revalidation job stands: its node, its id, the verdict (or why there is none) and Slurm's words."""

    node: str
    job_id: str
    verdict: str
    detail: str

    @property
    def ended(self) -> bool:
        return self.verdict != RUNNING

    @property
    def judged(self) -> bool:
        """A verdict on the node itself (passed or failed), not an end that says nothing of it."""
        return self.verdict in (PASSED, FAILED)


def read_ends(jobs: Iterable[SlurmJob], submitted: dict[str, str]) -> list[JobEnd]:
    """``submitted``: job id -> node, the jobs the watch started and has not judged yet."""
    by_id = {job.job_id: job for job in jobs}
    ends = []
    for job_id, node in submitted.items():
        job = by_id.get(job_id)
        if job is None:
            ends.append(JobEnd(node, job_id, LOST, "slurmctld no longer knows the job (it forgets ended jobs after "
                                                   "MinJobAge): how it ended is unknown"))
        elif job.name != job_name(node) or (job.nodes and job.nodes != (node,)):
            ends.append(JobEnd(node, job_id, ERROR, f"job {job_id} is {job.name} on {','.join(job.nodes)}, not this "
                                                    f"node's revalidation"))
        elif job.state in UNDERWAY:
            ends.append(JobEnd(node, job_id, RUNNING, f"{job.state} ({job.reason})"))
        elif job.state == "completed" and job.exit_code == 0:
            ends.append(JobEnd(node, job_id, PASSED, "completed, exit 0"))
        elif job.state in ("failed", "completed") and job.exit_code in NAGIOS:
            verdict, meaning = NAGIOS[job.exit_code]
            ends.append(JobEnd(node, job_id, verdict, f"exit {job.exit_code}: {meaning}"))
        elif job.state in ("failed", "completed"):
            ends.append(JobEnd(node, job_id, ERROR, f"exit {job.exit_code}: not node-check's (its command did not "
                                                    "run, or was killed): no verdict on the node"))
        elif job.state == "preempted":
            ends.append(JobEnd(node, job_id, PREEMPTED, f"preempted at {job.ended or '?'} (a user's job took the "
                                                        "node): not a verdict"))
        elif job.state == "cancelled":
            ends.append(JobEnd(node, job_id, CANCELLED, "cancelled: not a verdict"))
        else:
            ends.append(JobEnd(node, job_id, ERROR, f"{job.state} ({job.reason}): its checks did not finish"))
    return ends


def due(admitted: Sequence[str], last: dict[str, float], *, idle: set[str], underway: set[str], now: float,
        every_s: float, limit: int) -> list[str]:
    """The admitted nodes to re-validate now: idle in Slurm, no revalidation of theirs underway, and not
    re-validated (or admitted) within ``every_s``; the longest waiting first, at most ``limit`` (the pass's share
    of the fleet: every node within the period without taking many nodes from users at once)."""
    waiting = [node for node in admitted if node in idle and node not in underway
               and now - last.get(node, float("-inf")) >= every_s]
    waiting.sort(key=lambda node: (last.get(node, float("-inf")), node))
    return waiting[:max(0, limit)]
