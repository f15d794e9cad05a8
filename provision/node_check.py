"""``provision node-check``: the preflight checks on the node itself, between burn-ins, in seconds.

What the node must be comes from a compact check file the provisioning playbook writes to every node
(``/etc/provision/node-check.json``: the same expectations the controller's preflight judges against, derived from
the spec); the checks are the same facts and the same pure judgements, run through a local session. No
controller, no state store: so it can be Slurm's ``HealthCheckProgram`` or a job prolog — the "self-check at job
start, eject the node" flow.

It speaks Nagios: exit 0 OK, 1 WARNING, 2 CRITICAL (a check failed), 3 UNKNOWN (a check could not read, or there
is no check file), one summary line first. With ``--drain`` a CRITICAL node drains itself in Slurm with the
check's reason, prefixed ``provision node-check:`` — not ``provision:``, so a later sync of the store (where the
node is still admitted) leaves that drain alone, as it leaves an administrator's, until someone looks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provision.checks import preflight
from provision.checks.outcome import CheckResult, Outcome
from provision.observe import LocalSession
from provision.spec import LoadedSpec

CHECK_FILE = "/etc/provision/node-check.json"
FORMAT = 1
NAGIOS = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}
DRAIN_PREFIX = "provision node-check:"


def check_file(loaded: LoadedSpec, node_name: str) -> dict[str, Any]:
    """The check file of one node: what it must be, no timestamp (an unchanged spec rewrites nothing)."""
    node = next(node for node in loaded.nodes if node.name == node_name)
    expect = preflight.expectations(loaded, node)
    fields = asdict(expect)
    fields["gpu_pcie"], fields["hca_pcie"] = list(expect.gpu_pcie), list(expect.hca_pcie)
    fields["rail_hcas"] = list(expect.rail_hcas)
    fields["rails"] = [list(pair) for pair in expect.rails]
    fields["uuid_blocklist"] = sorted(expect.uuid_blocklist)
    fields["allowlist"] = [pattern.pattern for pattern in expect.allowlist]
    return {"format": FORMAT, "node": node_name, "cluster": loaded.spec.cluster.name, "spec_sha256": loaded.sha256,
            "expectations": fields}


def write_check_files(loaded: LoadedSpec, directory: Path) -> Path:
    """One check file per node under ``directory`` (``<node>.json``): what the node_check role copies."""
    directory.mkdir(parents=True, exist_ok=True)
    for node in loaded.nodes:
        (directory / f"{node.name}.json").write_text(json.dumps(check_file(loaded, node.name), indent=1,
                                                                sort_keys=True) + "\n")
    return directory


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


def run(path: Path, *, timeout_s: float = 8.0, drain: bool = False) -> NodeCheck:
    try:
        node, expect = read_check_file(path)
    except CheckFileError as error:
        return NodeCheck(os.environ.get("SLURMD_NODENAME", "?"), "UNKNOWN", str(error), [])
    session = LocalSession(node)
    check = verdict(node, preflight.run(session, expect, timeout_s))
    if drain and check.status == "CRITICAL":
        name = os.environ.get("SLURMD_NODENAME") or node
        try:
            done = subprocess.run(["scontrol", "update", f"nodename={name}", "state=drain",
                                   f"reason={drain_reason(check)}"], capture_output=True, text=True, timeout=10)
            check.drained = (f"drained {name} in Slurm" if done.returncode == 0
                             else f"could not drain {name}: {(done.stderr or done.stdout).strip()}")
        except (OSError, subprocess.TimeoutExpired) as error:
            check.drained = f"could not drain {name}: {error}"
    return check
