"""``provision node-check``: the preflight checks on the node itself, between burn-ins, in seconds.

What the node must be comes from a compact check file the provisioning playbook writes to every node
(``/etc/provision/node-check.json``: the same expectations the controller's preflight judges against, derived from
the spec); the checks are the same facts and the same pure judgements, run through a local session. No
controller, no state store: so it can be Slurm's ``HealthCheckProgram`` or a job prolog — the "self-check at job
start, eject the node" flow.

It speaks Nagios: exit 0 OK, 1 WARNING, 2 CRITICAL (a check failed), 3 UNKNOWN (a check could not read, or there
is no check file), one summary line first. With ``--drain`` a CRITICAL node drains itself in Slurm with the
check's reason, prefixed ``provision node-check:`` — not ``provision:``, so a later sync of the store (where the
node is still admitted) leaves that drain alone, as it leaves an administrator's, until someone looks; and a node
already drained, for any reason, is not drained again over it (:func:`drained_already`).

This module runs on the node from the burn-in's runtime, where the controller's package is absent: standard
library only, Python 3.10 (``python -m provision.node_check``, what the node_runtime role's
``/usr/local/sbin/provision-node-check`` runs). The controller writes the check file
(:mod:`provision.node_check.check_file`) and offers the same run as ``provision node-check``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provision.checks import preflight
from provision.checks.outcome import CheckResult, Outcome
from provision.facts.session import LocalSession

CHECK_FILE = "/etc/provision/node-check.json"
FORMAT = 1
NAGIOS = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}
DRAIN_PREFIX = "provision node-check:"


class CheckFileError(ValueError):
    """No usable check file: the node was not provisioned by this tool, or the file is damaged."""


def read_check_file(path: Path) -> tuple[str, preflight.Expectations]:
    try:
        content = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckFileError(f"no check file at {path}: provision this node first (the node_check role writes it)"
                             ) from None
    except (OSError, ValueError) as error:
        raise CheckFileError(f"{path}: cannot be read: {error}") from None
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise CheckFileError(f"{path}: not a check file of format {FORMAT}")
    try:
        fields = dict(content["expectations"])
        fields["gpu_pcie"], fields["hca_pcie"] = tuple(fields["gpu_pcie"]), tuple(fields["hca_pcie"])
        fields["rail_hcas"] = tuple(fields["rail_hcas"])
        fields["rails"] = tuple((str(hca), int(gpu)) for hca, gpu in fields.get("rails", []))
        fields["uuid_blocklist"] = frozenset(fields["uuid_blocklist"])
        fields["allowlist"] = tuple(re.compile(pattern) for pattern in fields["allowlist"])
        fields["imex_peers"] = tuple(fields.get("imex_peers", ()))
        return str(content["node"]), preflight.Expectations(**fields)
    except (KeyError, TypeError, re.error) as error:
        raise CheckFileError(f"{path}: damaged: {error}") from None


@dataclass
class NodeCheck:
    node: str
    status: str  # OK | WARNING | CRITICAL | UNKNOWN
    summary: str
    results: list[CheckResult]
    drained: str = ""  # what scontrol said when --drain drained the node

    @property
    def exit_code(self) -> int:
        return NAGIOS[self.status]

    def lines(self) -> list[str]:
        detail = [f"{result.check}: {result.outcome}: {result.message}" for result in self.results
                  if result.outcome is not Outcome.OK]
        return [f"{self.status}: {self.summary}", *detail, *([self.drained] if self.drained else [])]


def verdict(node: str, results: list[CheckResult]) -> NodeCheck:
    """Nagios status and summary line from the check results (pure)."""
    failed = [result for result in results if result.outcome is Outcome.FAILED]
    unknown = [result for result in results if result.outcome is Outcome.UNKNOWN]
    warned = [result for result in results if result.outcome is Outcome.WARNING]
    if failed:
        first = failed[0]
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return NodeCheck(node, "CRITICAL", f"{node}: {first.check}: {first.message}{more}", results)
    if unknown:
        return NodeCheck(node, "UNKNOWN", f"{node}: {unknown[0].check} could not be checked: {unknown[0].message}",
                         results)
    if warned:
        return NodeCheck(node, "WARNING", f"{node}: {warned[0].check}: {warned[0].message}", results)
    return NodeCheck(node, "OK", f"{node}: {len(results)} checks passed", results)


def drain_reason(check: NodeCheck) -> str:
    return " ".join(f"{DRAIN_PREFIX} {check.summary}".split())[:240]


_STATE = re.compile(r"(?:^|\s)State=(\S+)")
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s+\[[^\]]*\])?(?:\s+\w+=|$)")


def drained_already(name: str) -> str | None:
    """The reason the node is drained (or draining) with in Slurm now, or None when it is not, or Slurm could not
    say. As Slurm's HealthCheckProgram this runs every interval while a check keeps failing: draining again would
    write over whatever reason holds the node now (an administrator's ticket, the store's ``provision:`` reason
    once the watch made the drain its own), so a node already out is left as it is. Unreadable: drain anyway,
    since a node that failed its check must not stay in service on a read that went wrong."""
    try:
        done = subprocess.run(["scontrol", "-o", "show", "node", name], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return drain_reason_of(done.stdout) if done.returncode == 0 else None


def drain_reason_of(line: str) -> str | None:
    """From one node's ``scontrol -o show node`` line: its drain reason (``""`` when it gives none) if its state
    carries DRAIN (``IDLE+DRAIN``, ``MIXED+DRAIN``, ``DOWN+DRAIN``), else None."""
    state = _STATE.search(line)
    if state is None or "DRAIN" not in state.group(1).upper():
        return None
    reason = _REASON.search(line)
    return reason.group(1).strip() if reason else ""


def run(path: Path, *, timeout_s: float = 8.0, drain: bool = False) -> NodeCheck:
    try:
        node, expect = read_check_file(path)
    except CheckFileError as error:
        return NodeCheck(os.environ.get("SLURMD_NODENAME", "?"), "UNKNOWN", str(error), [])
    session = LocalSession(node)
    check = verdict(node, preflight.run(session, expect, timeout_s))
    if drain and check.status == "CRITICAL":
        name = os.environ.get("SLURMD_NODENAME") or node
        held = drained_already(name)
        if held is not None:
            check.drained = f"{name} is drained in Slurm already ({held or 'no reason'}): left as it is"
            return check
        try:
            done = subprocess.run(["scontrol", "update", f"nodename={name}", "state=drain",
                                   f"reason={drain_reason(check)}"], capture_output=True, text=True, timeout=10)
            check.drained = (f"drained {name} in Slurm" if done.returncode == 0
                             else f"could not drain {name}: {(done.stderr or done.stdout).strip()}")
        except (OSError, subprocess.TimeoutExpired) as error:
            check.drained = f"could not drain {name}: {error}"
    return check


def report(check: NodeCheck, *, as_json: bool) -> str:
    """What the command prints: the Nagios lines, or the results as JSON."""
    if as_json:
        return json.dumps({"node": check.node, "status": check.status, "summary": check.summary,
                           "drained": check.drained, "results": [result.as_dict() for result in check.results]},
                          indent=2) + "\n"
    return "\n".join(check.lines()) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m provision.node_check``: the node's own entry (no click there); the exit code is Nagios's."""
    parser = argparse.ArgumentParser(prog="provision-node-check", description="Check this node against its check "
                                     "file; Nagios exit codes (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).")
    parser.add_argument("--file", dest="path", type=Path, default=Path(CHECK_FILE),
                        help=f"the check file the provisioning playbook wrote (default {CHECK_FILE})")
    parser.add_argument("--drain", action="store_true", help="on CRITICAL, drain this node in Slurm")
    parser.add_argument("--timeout", dest="timeout_s", type=float, default=8.0, help="bound on each probe (s)")
    parser.add_argument("--json", dest="as_json", action="store_true", help="the results as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stopped:  # argparse's usage error is 2, CRITICAL to Nagios: a bad call is UNKNOWN
        return NAGIOS["UNKNOWN"] if stopped.code else 0
    if not 0.5 <= args.timeout_s <= 60:
        sys.stderr.write("provision-node-check: --timeout must be between 0.5 and 60 seconds\n")
        return NAGIOS["UNKNOWN"]
    check = run(args.path, timeout_s=args.timeout_s, drain=args.drain)
    sys.stdout.write(report(check, as_json=args.as_json))
    return check.exit_code


if __name__ == "__main__":
    sys.exit(main())
