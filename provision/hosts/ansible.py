"""Running the playbooks through ansible-runner and turning its event stream into per-host results.

Every run gets a fresh private data directory outside the run record (ansible-runner keeps state there: one
``--check`` run would leave later runs in check mode) and it is deleted afterwards, so nothing Ansible wrote
(including any secret a task saw) lands in the run directory; the run directory gets our own summary.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


class PlaybookError(RuntimeError):
    """The playbook could not run at all (syntax error, missing role): no host result to report."""


@dataclass
class HostOutcome:
    host: str
    ok: int = 0
    changed: int = 0
    failed_task: str | None = None
    message: str = ""
    unreachable: bool = False
    changes: list[dict[str, Any]] = field(default_factory=list)  # task, diff/changes (check mode: would change)
    #: the play ended before this host finished it, though none of its tasks failed: the failure budget
    #: (max_fail_percentage) stopped the play because of other hosts. It proves nothing about this host.
    stopped: bool = False

    @property
    def succeeded(self) -> bool:
        return self.failed_task is None and not self.unreachable and not self.stopped

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "ok": self.ok, "changed": self.changed, "failed_task": self.failed_task,
                "message": self.message, "unreachable": self.unreachable, "stopped": self.stopped,
                "changes": self.changes}


@dataclass
class PlaybookResult:
    status: str
    rc: int
    hosts: dict[str, HostOutcome]


def settings(work: Path) -> dict[str, str]:
    """The Ansible environment every run gets: its own scratch under ``work``, pipelining, host keys checked,
    dropped connections retried, no compression, and this interpreter's ``ansible-playbook`` first on PATH.

    Ansible's own ``ssh_args`` add ``-C``: zlib over every byte sent, on the controller's CPU, for every host. What
    a play sends the most of is the node runtime's wheelhouse, wheels that are zip files already (a CUDA torch
    and its libraries: gigabytes a host), over a datacenter network faster than zlib (~25 MB/s a core here): the
    controller's CPU spent for nothing, times hundreds of hosts. The connection sharing is Ansible's default."""
    return {
        "ANSIBLE_HOME": str(work / "home"), "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp"), "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s",
        "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_RETRY_FILES_ENABLED": "False",
        # a connection sshd dropped (a bastion's MaxStartups, a restart) is ours: ssh's exit 255 tried again
        "ANSIBLE_SSH_RETRIES": "3",
        "ANSIBLE_NOCOLOR": "True", "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def run_playbook(inventory: Path, hosts: list[str], *, forks: int, check: bool = False,
                 on_task: Callable[[str, str, str], None] = lambda host, task, outcome: None,
                 playbook: str = "site.yml", extravars: dict[str, Any] | None = None) -> PlaybookResult:
    import ansible_runner  # imported here: it is slow to import and only provisioning needs it

    outcomes = {host: HostOutcome(host) for host in hosts}
    work = Path(tempfile.mkdtemp(prefix="provision-ansible-"))
    os.chmod(work, 0o700)

    def handle(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        host = data.get("host")
        kind = event.get("event", "")
        if kind == "playbook_on_no_hosts_remaining":  # the play was cut short: no host left to run it on
            for outcome in outcomes.values():
                if outcome.failed_task is None and not outcome.unreachable:
                    outcome.stopped = True
                    outcome.message = "the play stopped before this host finished: other hosts' failures " \
                                      "exceeded the provisioning failure budget"
            return True
        if host not in outcomes:
            return True
        outcome = outcomes[host]
        task = data.get("task", "")
        result = data.get("res", {}) or {}
        if kind == "runner_on_ok":
            outcome.ok += 1
            if result.get("changed"):
                outcome.changed += 1
                outcome.changes.append({"task": task, "diff": _diff_text(result), "changes": result.get("changes")})
            on_task(host, task, "changed" if result.get("changed") else "ok")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            outcome.failed_task, outcome.message = task, _message(result)
            on_task(host, task, "failed")
        elif kind == "runner_on_unreachable":
            outcome.unreachable, outcome.failed_task, outcome.message = True, task, _message(result)
            on_task(host, task, "unreachable")
        return True

    try:
        runner = ansible_runner.run(
            private_data_dir=str(work), project_dir=str(PLAYBOOKS), playbook=playbook,
            inventory=str(inventory), limit=",".join(hosts), forks=forks, quiet=True, event_handler=handle,
            cmdline="--check --diff" if check else None, extravars=extravars or {},
            envvars=settings(work),
        )
        _rescue_bookkeeping(runner, outcomes)
        if runner.rc != 0 and not any(o.ok or o.failed_task for o in outcomes.values()):
            tail = runner.stdout.read().strip().splitlines()[-15:] if runner.stdout else []
            raise PlaybookError(f"ansible-playbook {playbook} failed before any host ran a task (rc {runner.rc}):\n"
                                + "\n".join(tail))
        return PlaybookResult(runner.status, runner.rc, outcomes)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _message(result: dict[str, Any]) -> str:
    text = result.get("msg") or result.get("stderr") or result.get("module_stderr") or ""
    return str(text).strip().splitlines()[-1][:500] if str(text).strip() else "failed"


def _diff_text(result: dict[str, Any]) -> str:
    diff = result.get("diff")
    diffs = diff if isinstance(diff, list) else [diff] if diff else []
    parts = []
    for item in diffs:
        if isinstance(item, dict):
            if item.get("prepared"):
                parts.append(str(item["prepared"]))
            elif "before" in item or "after" in item:
                before, after = str(item.get("before", "")), str(item.get("after", ""))
                parts.extend(line for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                                   lineterm="", n=0)
                             if not line.startswith(("---", "+++", "@@")))
    return "\n".join(parts)


def _rescue_bookkeeping(runner: Any, outcomes: dict[str, HostOutcome]) -> None:
    """A task that failed inside a block whose rescue then succeeded did not fail the host: trust the stats."""
    stats = runner.stats or {}
    failures, dark, rescued = stats.get("failures", {}), stats.get("dark", {}), stats.get("rescued", {})
    for host, outcome in outcomes.items():
        if outcome.failed_task and not failures.get(host) and not dark.get(host) and rescued.get(host):
            outcome.failed_task, outcome.message = None, ""
