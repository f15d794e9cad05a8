"""The live view on a terminal: a row per host (phase, stage, current task or check, verdict so far, elapsed),
grouped by what the hosts are doing once there are more than fit on a screen (512 hosts read as a dozen rows).

:class:`Board` is pure: it folds the run's events into per-host rows and renders a table; the command line shows
it with ``rich.live`` and feeds it from the run's event stream. Totals count hosts, never steps, so a five-stage
burn-in of 16 hosts reads 16, not 80.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from topology import hostlist

#: Above this many hosts the board shows one row per group of hosts in the same place with the same verdict.
GROUP_ABOVE = 24


@dataclass
class HostRow:
    phase: str = ""
    stage: str = ""
    doing: str = ""  # the Ansible task or the burn-in check in progress, or why it failed
    verdict: str = "waiting"  # waiting | running | passed | failed | not finished
    since: float = 0.0


class Board:
    def __init__(self, hosts: list[str] | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.phase = ""
        self.rows: dict[str, HostRow] = {host: HostRow(since=self.started) for host in hosts or []}
        self.lock = threading.Lock()

    def _row(self, host: str) -> HostRow:
        if host not in self.rows:
            self.rows[host] = HostRow(since=self.clock())
        return self.rows[host]

    def _move(self, host: str, **changes: str) -> None:
        row = self._row(host)
        for key, value in changes.items():
            setattr(row, key, value)
        row.since = self.clock()

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one event of the run into the board (events arrive from worker threads too)."""
        name = event.get("event", "")
        with self.lock:
            if name == "phase.started":
                self.phase = event["phase"]
                for host in event.get("hosts", []):
                    row = self._row(host)
                    if row.verdict != "failed":
                        self._move(host, phase=self.phase, stage="", doing="", verdict="running")
            elif name == "task":
                row = self._row(event["host"])
                if row.verdict != "failed":
                    row.phase, row.doing, row.verdict = "provision", event.get("task", ""), "running"
            elif name == "provision.node":
                if event.get("passed"):
                    self._move(event["node"], phase="provision", doing="", verdict="passed")
                elif event.get("stopped"):
                    self._move(event["node"], phase="provision", doing=event.get("message") or "",
                               verdict="not finished")
                else:
                    self._move(event["node"], phase="provision", doing=str(event.get("failed_task") or ""),
                               verdict="failed")
            elif name == "burnin.stage.started":
                for host in event.get("nodes", []):
                    self._move(host, phase="burnin", stage=event["stage"], doing="", verdict="running")
            elif name == "burnin.node":
                if event.get("passed"):
                    self._move(event["node"], phase="burnin", stage=event["stage"], doing="", verdict="passed")
                else:
                    self._move(event["node"], phase="burnin", stage=event["stage"],
                               doing=str(event.get("check") or ""), verdict="failed")

    def totals(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for row in self.rows.values():
            counts[row.verdict] += 1
        return dict(counts)

    def render(self) -> Group:
        now = self.clock()
        with self.lock:
            rows = dict(self.rows)
            totals = self.totals()
        summary = Text(f"{len(rows)} host(s): " + ", ".join(
            f"{count} {verdict}" for verdict, count in sorted(totals.items())) +
            f"   phase {self.phase or '-'}   {now - self.started:.0f} s")
        if len(rows) <= GROUP_ABOVE:
            table = Table(box=None, pad_edge=False)
            for column in ("host", "phase", "stage", "now / failed at", "verdict", "for"):
                table.add_column(column, overflow="ellipsis", no_wrap=True)
            for host in sorted(rows):
                row = rows[host]
                table.add_row(host, row.phase, row.stage, row.doing[:60], _styled(row.verdict),
                              f"{now - row.since:.0f} s")
            return Group(summary, table)
        groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        for host, row in rows.items():
            groups[(row.phase, row.stage, row.verdict)].append(host)
        table = Table(box=None, pad_edge=False)
        for column in ("hosts", "count", "phase", "stage", "verdict"):
            table.add_column(column, overflow="ellipsis", no_wrap=True)
        for (phase, stage, verdict), hosts in sorted(groups.items(), key=lambda item: (item[0][2] != "failed",
                                                                                        item[0])):
            table.add_row(hostlist.compress(hosts)[:70], str(len(hosts)), phase, stage, _styled(verdict))
        return Group(summary, table)


def _styled(verdict: str) -> Text:
    colour = {"passed": "green", "failed": "bold red", "running": "yellow", "not finished": "magenta"}.get(verdict)
    return Text(verdict, style=colour or "")
