"""``provision triage --logs DIR``: the node that killed a failed job, from its logs (reading only)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import click

from provision.cli.common import emit_json, json_option, out
from provision.errors import EXIT_OK, EXIT_PROBLEMS, UsageProblem
from provision.evidence import read_text
from provision.triage.signals import is_hostname
from provision.triage.verdict import triage_directory


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
@click.option("--logs", "logs", required=True, type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="A folder of the failed job's output: Slurm's, torchrun's, NCCL's, the nodes' kernel logs.")
@click.option("--hosts", "hosts", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Address -> host, in /etc/hosts' form: NCCL names its peers by address.")
@json_option
def triage_command(logs: Path, hosts: Path | None, as_json: bool) -> int:
    """Name the node to drain before the requeue, from the job's own logs (exit 1 when nothing in them is
    conclusive: that is not a clean bill of health)."""
    result = triage_directory(logs, _addresses(hosts))
    if result.files == 0:
        raise UsageProblem(f"{logs}: no readable file" + (f" ({'; '.join(result.unreadable)})"
                                                           if result.unreadable else ""))
    if as_json:
        emit_json(result.as_dict())
        return EXIT_OK if result.conclusive else EXIT_PROBLEMS
    for culprit in result.culprits:
        verb = "drain" if culprit.strength == "strong" else "suspect"
        out.print(f"{verb} {culprit.who}: {culprit.why[0]}" + (f" (+{len(culprit.why) - 1} more)"
                                                               if len(culprit.why) > 1 else ""), markup=False)
    for link in result.links:
        out.print(f"no node to blame: {link}", markup=False)
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
    return EXIT_OK if result.conclusive else EXIT_PROBLEMS
