"""``provision triage --job ID``: a failed Slurm job's evidence gathered and read as ``--logs`` reads a folder.

What Slurm holds of the job (``scontrol -o show job ID``: its nodes, its start and end, how it ended, its output
files), those output files (their last 8 MiB each), and each of its nodes' kernel log over the job's window
(``dmesg --time-format=iso`` over SSH, as root: an Xid has a wall-clock time to be matched against the job's)
are written into one folder, each node's log named after the node so its lines are attributed to it. Then the
folder is judged as any job's logs are (:func:`provision.triage.verdict.triage_directory`).

Reading only: nothing here changes a host or Slurm (``--drain`` is the CLI's, through the lifecycle). Slurm keeps a
finished job only ``MinJobAge`` (300 s by default); a job it no longer holds is refused with what to do instead,
never triaged from nothing. Times: Slurm prints the controller's local time and the nodes' logs carry their zone;
the window is widened by :data:`WINDOW_MARGIN_S` each side for clocks that differ by that much.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from provision.errors import UsageProblem
from provision.facts import kernel_log
from provision.facts.session import HostSession
from provision.facts.slurm import SlurmJob, SlurmOutputError, parse_jobs
from provision.hosts.slurmctl import SlurmReader, SlurmUnreachable
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.triage.verdict import TAIL_BYTES, Triage, triage_directory

#: How far before the job's start and after its end a kernel line still belongs to it (clock skew, a GPU that
#: failed while the job's processes were being started or torn down).
WINDOW_MARGIN_S = 120.0
#: Jobs not yet ended: nothing to triage (their failure, if any, is still to come).
NOT_ENDED = frozenset({"pending", "running", "configuring", "completing", "suspended", "requeued", "resizing"})
COMMAND_TIMEOUT_S = 60.0


@dataclass
class JobEvidence:
    """The job as Slurm held it, the folder its evidence was gathered into, and what could not be gathered."""

    job: SlurmJob
    folder: Path
    gathered: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"job": self.job.as_dict(), "folder": str(self.folder), "gathered": self.gathered,
                "missing": self.missing}


def find_job(client: SlurmReader, job_id: str) -> SlurmJob:
    """The job as slurmctld holds it; a job it does not hold, or one not yet ended, is the user's to correct."""
    if not job_id.isdigit() and "_" not in job_id:
        raise UsageProblem(f"--job {job_id!r}: a Slurm job id is a number (an array task: 1234_5)")
    try:
        text = client.run(["scontrol", "-o", "show", "job", job_id])
    except SlurmUnreachable as error:
        if "Invalid job id" in str(error):
            raise UsageProblem(f"Slurm does not hold job {job_id}: slurmctld keeps a finished job only MinJobAge "
                               "(300 s by default). Gather its output and its nodes' kernel logs into a folder and "
                               "run `provision triage --logs DIR`") from None
        raise
    try:
        jobs = [job for job in parse_jobs(text) if job.job_id == job_id]
    except SlurmOutputError as error:
        raise SlurmUnreachable(f"scontrol's job could not be read: {error}") from None
    if not jobs:
        raise UsageProblem(f"Slurm does not hold job {job_id}")
    job = jobs[0]
    if job.state in NOT_ENDED:
        raise UsageProblem(f"job {job_id} is {job.state}: triage reads a job that has ended")
    return job


def window(job: SlurmJob) -> tuple[datetime, datetime] | None:
    """The job's start and end as aware times (Slurm's are the controller's local time), widened by the margin."""
    try:
        start, end = datetime.fromisoformat(job.started), datetime.fromisoformat(job.ended)
    except ValueError:
        return None
    margin = timedelta(seconds=WINDOW_MARGIN_S)
    return start.astimezone() - margin, end.astimezone() + margin


def in_window(text: str, span: tuple[datetime, datetime] | None) -> tuple[str, int]:
    """The lines of a ``dmesg --time-format=iso`` log inside the span (continuation lines follow their record),
    and how many lines had no time this could read (kept: a line we cannot place is not a line we may drop)."""
    if span is None:
        return text, 0
    kept: list[str] = []
    unplaced = 0
    keep = True
    for raw in text.splitlines():
        stamp = raw.split(" ", 1)[0]
        if raw[:1].isspace():  # a record's further line: with its record
            if keep:
                kept.append(raw)
            continue
        try:
            at = datetime.fromisoformat(stamp.replace(",", "."))
        except ValueError:
            unplaced += 1
            keep = True
            kept.append(raw)
            continue
        keep = span[0] <= (at if at.tzinfo else at.astimezone()) <= span[1]
        if keep:
            kept.append(raw)
    return "\n".join(kept) + ("\n" if kept else ""), unplaced


def _tail(path: Path) -> bytes:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - TAIL_BYTES))
        return handle.read()


#: Opens a session on a node: handed in by the command (the composition point), so this reader imports nothing
#: able to change a host and runs nothing on one but the kernel log's read.
OpenSession = Callable[[ResolvedNode], HostSession]


def gather(loaded: LoadedSpec, job: SlurmJob, folder: Path, open_node: OpenSession) -> JobEvidence:
    """The job's output files and its nodes' kernel logs over its window, written into ``folder``."""
    evidence = JobEvidence(job, folder)
    folder.mkdir(parents=True, exist_ok=True)
    for path in dict.fromkeys(name for name in (job.stdout, job.stderr) if name and name != "/dev/null"):
        source = Path(path)
        try:
            (folder / source.name).write_bytes(_tail(source))
            evidence.gathered.append(path)
        except OSError as error:  # output on a node's local disk, or gone: said, never taken for a clean run
            evidence.missing.append(f"{path}: {error.strerror or error}")
    span = window(job)
    nodes = {node.name: node for node in loaded.nodes}
    known = [name for name in job.nodes if name in nodes]
    evidence.missing += [f"{name}: not in the spec, its kernel log not read" for name in job.nodes
                         if name not in nodes]

    def read(name: str) -> tuple[str, str | None, str]:
        session: HostSession | None = None
        try:
            session = open_node(nodes[name])
            done = session.run(kernel_log.KERNEL_LOG_ISO.argv, COMMAND_TIMEOUT_S,
                               become=kernel_log.KERNEL_LOG_ISO.needs_root)
            return (name, done.stdout, "") if done.ok else (name, None, done.problem())
        except Exception as error:  # a node that cannot be reached is a gap in the evidence, said
            return name, None, f"{type(error).__name__}: {error}"
        finally:
            if session is not None:
                session.close()

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(known)))) as pool:
        for name, text, problem in pool.map(read, known):
            if text is None:
                evidence.missing.append(f"{name}: kernel log not read: {problem}")
                continue
            kept, unplaced = in_window(text, span)
            (folder / f"{name}.kernel.log").write_text(kept)
            evidence.gathered.append(f"{name}: kernel log, {len(kept.splitlines())} line(s) in the job's window"
                                     + (f" ({unplaced} without a time, kept)" if unplaced else ""))
    return evidence


def addresses_of(loaded: LoadedSpec) -> dict[str, str]:
    """Each node's address -> its name: NCCL names its peers by address."""
    return {node.address: node.name for node in loaded.nodes}


def triage_job(loaded: LoadedSpec, client: SlurmReader, job_id: str, folder: Path,
               open_node: OpenSession) -> tuple[JobEvidence, Triage]:
    job = find_job(client, job_id)
    evidence = gather(loaded, job, folder, open_node)
    return evidence, triage_directory(folder, addresses_of(loaded))
