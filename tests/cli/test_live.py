"""The live view on a terminal: a row per host while they fit, groups of hosts beyond, totals that count hosts."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from provision.cli.live import GROUP_ABOVE, Board
from topology import hostlist


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _burn_in(board: Board, hosts: list[str], failures: dict[str, tuple[str, str]]) -> None:
    board.apply({"event": "phase.started", "phase": "provision", "hosts": hosts})
    for host in hosts:
        board.apply({"event": "task", "host": host, "task": "Install the pinned driver", "outcome": "changed"})
        board.apply({"event": "provision.node", "node": host, "passed": True, "changed": 3})
    board.apply({"event": "phase.started", "phase": "burnin", "hosts": hosts})
    for stage in ("preflight", "node", "collectives", "pairs", "training"):
        due = [host for host in hosts if board.rows[host].verdict != "failed"]
        board.apply({"event": "burnin.stage.started", "stage": stage, "nodes": due})
        for host in due:
            failed = failures.get(host)
            if failed and failed[0] == stage:
                board.apply({"event": "burnin.node", "node": host, "stage": stage, "passed": False,
                             "check": failed[1], "reason": "..."})
            else:
                board.apply({"event": "burnin.node", "node": host, "stage": stage, "passed": True})


def _text(board: Board) -> str:
    console = Console(record=True, width=140, force_terminal=True, color_system=None)
    console.print(board.render())
    return console.export_text()


@pytest.mark.fast
def test_sixteen_hosts_one_row_each_and_totals_count_hosts_not_steps() -> None:
    clock = Clock()
    hosts = hostlist.expand("sim[01-16]")
    board = Board(hosts, clock=clock)
    _burn_in(board, hosts, {"sim07": ("preflight", "xid"), "sim14": ("training", "step_time")})
    clock.now += 42
    assert board.totals() == {"passed": 14, "failed": 2}
    text = _text(board)
    assert text.splitlines()[0].startswith("16 host(s): 2 failed, 14 passed")
    rows = [line for line in text.splitlines() if line.startswith("sim")]
    assert len(rows) == 16
    sim07 = next(line for line in rows if line.startswith("sim07"))
    assert "burnin" in sim07 and "preflight" in sim07 and "xid" in sim07 and "failed" in sim07


@pytest.mark.fast
def test_during_provisioning_a_row_shows_the_task_in_progress() -> None:
    board = Board(["sim01", "sim02"], clock=Clock())
    board.apply({"event": "phase.started", "phase": "provision", "hosts": ["sim01", "sim02"]})
    board.apply({"event": "task", "host": "sim02", "task": "Disable ACS on the GPU-HCA bridges", "outcome": "ok"})
    row = next(line for line in _text(board).splitlines() if line.startswith("sim02"))
    assert "provision" in row and "Disable ACS on the GPU-HCA bridges" in row and "running" in row


@pytest.mark.fast
def test_512_hosts_read_as_a_few_groups_failures_first() -> None:
    hosts = [f"gpu{index:03d}" for index in range(1, 513)]
    board = Board(hosts, clock=Clock())
    _burn_in(board, hosts[:400], {"gpu007": ("preflight", "xid"), "gpu300": ("node", "matmul")})
    board.apply({"event": "phase.started", "phase": "burnin", "hosts": hosts[400:]})
    board.apply({"event": "burnin.stage.started", "stage": "preflight", "nodes": hosts[400:]})
    assert sum(board.totals().values()) == 512
    lines = _text(board).splitlines()
    assert len(lines) <= 10 < GROUP_ABOVE, lines
    assert lines[0].startswith("512 host(s): 2 failed, 398 passed, 112 running")
    failed = lines[2:4]  # after the summary and the header: one row per place a host failed
    assert all("failed" in line for line in failed) and sorted(line.split()[0] for line in failed) == [
        "gpu007", "gpu300"]
    assert any("gpu[401-512]" in line and "preflight" in line and "running" in line for line in lines)


def test_apply_on_a_terminal_shows_the_board(sim_spec: Path) -> None:
    """Under a real pseudo-terminal, ``apply`` draws the board (the rows and the totals), not the bare lines."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "provision", "apply", str(sim_spec), "--phases",
                                "simulate,register"], stdin=terminal, stdout=terminal, stderr=terminal,
                               env={**os.environ, "COLUMNS": "160", "LINES": "60", "TERM": "xterm"}, close_fds=True)
    os.close(terminal)
    output = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    process.wait(timeout=30)
    os.close(controller)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text[-2000:]
    assert "16 host(s)" in text and "sim16" in text and "now / failed at" in text
    assert "  -  register  started" not in text  # the per-event lines are for logs, not terminals
