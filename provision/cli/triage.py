"""``provision triage --logs DIR | --job ID``: the node that killed a failed job, from its logs or from what Slurm and
its nodes hold of it (reading only; ``--drain`` takes the blamed nodes out of service through the lifecycle)."""

from __future__ import annotations

import ipaddress
import tempfile
from pathlib import Path

import click

from provision.cli.common import argv, emit_json, json_option, out, spec_option, state_dir_of, state_dir_option
from provision.errors import EXIT_OK, EXIT_PROBLEMS, UsageProblem
from provision.evidence import read_text
from provision.spec import load_spec
from provision.triage.signals import is_hostname
from provision.triage.verdict import Triage, triage_directory


def _addresses(path: Path | None) -> dict[str, str]:
    """``/etc/hosts``' form: an address, then its names; the first name is the host."""
    if path is None:
        return {}
    found = {}
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            ipaddress.ip_address(words[0])
        except ValueError:
            words = []
        if len(words) < 2 or not is_hostname(words[1]):
            raise UsageProblem(f"{path}:{number}: expected '<address> <host>' as /etc/hosts has it, got "
                               f"{line.strip()[:80]!r}")
        found[words[0]] = words[1].split(".")[0]
    if not found:
        raise UsageProblem(f"{path}: no '<address> <host>' line")
    return found


@click.command(name="triage")
@click.option("--logs", "logs", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="A folder of the failed job's output: Slurm's, torchrun's, NCCL's, the nodes' kernel logs.")
@click.option("--job", "job_id", help="A Slurm job id: its output files and its nodes' kernel logs over its window "
              "are gathered (needs --spec).")
@spec_option
@click.option("--hosts", "hosts", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Address -> host, in /etc/hosts' form: NCCL names its peers by address.")
@click.option("--drain", is_flag=True, help="Quarantine the nodes the job's evidence blames strongly (stage job, "
              "the job's id and the evidence in their history); Slurm follows.")
@state_dir_option
@json_option
def triage_command(logs: Path | None, job_id: str | None, spec: Path | None, hosts: Path | None, drain: bool,
                   state_dir: Path | None, as_json: bool) -> int:
    """Name the node to drain before the requeue, from the job's own logs (exit 1 when nothing in them is
    conclusive: that is not a clean bill of health)."""
    if (logs is None) == (job_id is None):
        raise UsageProblem("give the job's logs (--logs DIR) or its Slurm id (--job ID), one of them")
    if job_id is not None and spec is None:
        raise UsageProblem("--job needs --spec: the cluster's Slurm, nodes and state store")
    if drain and job_id is None:
        raise UsageProblem("--drain needs --job: a node is drained for a job Slurm ran, with its id")
    if job_id is None:
        assert logs is not None
        result = triage_directory(logs, _addresses(hosts))
        if result.files == 0:
            raise UsageProblem(f"{logs}: no readable file" + (f" ({'; '.join(result.unreadable)})"
                                                               if result.unreadable else ""))
        return _show(result, {}, None, as_json)
    assert spec is not None
    from provision.fleet.operator import drain_for_job
    from provision.hosts.remote import open_session
    from provision.hosts.slurmctl import reader_for
    from provision.triage.job import addresses_of, triage_job

    loaded = load_spec(spec)
    directory = state_dir_of(loaded, state_dir)
    with tempfile.TemporaryDirectory(prefix=f"triage-{job_id}-") as folder:
        evidence, result = triage_job(loaded, reader_for(loaded), job_id, Path(folder),
                                      lambda node: open_session(loaded, node, directory))
        if hosts is not None:  # the operator's own names for addresses the spec does not hold
            result = triage_directory(Path(folder), {**addresses_of(loaded), **_addresses(hosts)})
        gathered = evidence.as_dict()
        gathered.pop("folder")
        drained = None
        if drain:
            blamed = {culprit.who: culprit.why for culprit in result.culprits if culprit.strength == "strong"}
            drained = drain_for_job(directory, job_id, blamed, argv=argv(), spec=loaded, evidence=Path(folder))
    return _show(result, gathered, drained, as_json)


def _show(result: Triage, gathered: dict[str, object], drained: object, as_json: bool) -> int:
    from provision.fleet.operator import JobDrain

    done = drained if isinstance(drained, JobDrain) else None
    if as_json:
        emit_json({**result.as_dict(), **({"job": gathered} if gathered else {}),
                   "drained": done.as_dict() if done else None, "requeue": requeue_line(result, done)})
        return EXIT_OK if result.conclusive else EXIT_PROBLEMS
    missing = gathered.get("missing", [])
    for line in missing if isinstance(missing, list) else []:
        out.print(f"not gathered: {line}", markup=False)
    for culprit in result.culprits:
        verb = "drain" if culprit.strength == "strong" else "suspect"
        out.print(f"{verb} {culprit.who}: {culprit.why[0]}" + (f" (+{len(culprit.why) - 1} more)"
                                                               if len(culprit.why) > 1 else ""), markup=False)
    for link in result.links:
        out.print(f"no node to blame: {link}", markup=False)
    for why in result.nobody:
        out.print(f"no node to blame: {why}", markup=False)
    for failure in result.unattributed[:5]:
        out.print(f"on a host the logs do not name: {failure}", markup=False)
    if result.unattributed and not result.culprits:
        out.print("The failure is there but not its host: keep each node's output apart (srun --label, torchrun's "
                  "--log-dir or --tee) or add the nodes' kernel logs named after their hosts.", markup=False)
    for name in result.unreadable:
        out.print(f"not read: {name}", markup=False)
    if not result.conclusive and not result.unattributed:
        out.print(f"Inconclusive: no failure signature in {result.lines} lines of {result.files} file(s); the job's "
                  "nodes are not known to be healthy.", markup=False)
    if done is not None:
        if done.drained:
            out.print(f"drained (quarantined, stage job): {', '.join(done.drained)} (run {done.run_id})",
                      markup=False)
        for node, why in sorted(done.left.items()):
            out.print(f"not drained: {node}: {why}", markup=False)
    out.print(requeue_line(result, done), markup=False)
    return EXIT_OK if result.conclusive else EXIT_PROBLEMS


def requeue_line(result: Triage, drained: object) -> str:
    """Whether to requeue from the last checkpoint, and on what: the line an operator acts on."""
    from provision.fleet.operator import JobDrain

    strong = [culprit.who for culprit in result.culprits if culprit.strength == "strong"]
    likely = [culprit.who for culprit in result.culprits if culprit.strength != "strong"]
    out_now = set(drained.drained) | set(drained.left) if isinstance(drained, JobDrain) else set()
    if strong:
        done = sorted(name for name in strong if name in out_now)
        waiting = [name for name in strong if name not in out_now]
        parts = ([f"{', '.join(done)} out of service"] if done else []) + (
            [f"drain {', '.join(waiting)} first (--drain)"] if waiting else [])
        return "Requeue from the last checkpoint: " + "; ".join(parts)
    if likely:
        return (f"Requeue from the last checkpoint excluding {', '.join(likely)} (srun/sbatch --exclude); the "
                "evidence is not enough to drain them")
    if result.links:
        return ("Requeue from the last checkpoint, on another placement if the link fails again: no node is to "
                "blame, the fabric between them is")
    if result.nobody:
        return ("Do not requeue as it is: every rank stopped at one collective and no node is to blame; check the "
                "fabric (provision topology flaps) and the job's own code first")
    return "Do not requeue blindly: nothing in the evidence names a cause; the same failure may come back"
