"""``provision node-check``: run on a node, the preflight checks against its check file; Nagios exit codes.

Its exit codes are Nagios's, not the rest of the tool's: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (including "no
check file"), as Slurm's HealthCheckProgram, prologs and monitoring systems expect.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from provision.node_check import on_node as node_check


@click.command(name="node-check")
@click.option("--file", "path", type=click.Path(path_type=Path, dir_okay=False), default=Path(node_check.CHECK_FILE),
              show_default=True, help="The check file the provisioning playbook wrote.")
@click.option("--drain", is_flag=True, help="On CRITICAL, drain this node in Slurm (SLURMD_NODENAME, else the "
                                           "check file's node) with the check's reason.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.5, max=60), default=8.0, show_default=True,
              help="Bound on each probe.")
@click.option("--json", "as_json", is_flag=True, help="The results as JSON (the exit code stays Nagios's).")
def node_check_command(path: Path, drain: bool, timeout_s: float, as_json: bool) -> int:
    """Check this node now: GPUs, driver, ECC, row remaps, Xids, kernel log, PCIe links, peermem, ACS, IB ports,
    NVLink, throttling, disks. For Slurm: HealthCheckProgram or a prolog, with --drain."""
    check = node_check.run(path, timeout_s=timeout_s, drain=drain)
    sys.stdout.write(node_check.report(check, as_json=as_json))
    return check.exit_code
