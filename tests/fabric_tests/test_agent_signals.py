"""The agent's SIGTERM (the controller gave up) takes every worker it forked down with it, even one that a signal
arriving mid-fork would otherwise have orphaned: Python runs a signal's handler after the call it arrived in, so
without the mask the handler ran between the fork and the agent keeping the new worker's pid.

The agent runs in its own interpreter (its handler ends that process); its ``os.fork`` is wrapped so the SIGTERM
arrives during the first fork, every time, and each worker's pid is written down so the test can look for it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.simhelpers import free_loopback_port

ROOT = Path(__file__).resolve().parents[2]

AGENT = """
import os, signal, sys
from fabric_tests import agent

forked = open(sys.argv[1], "w")
real_fork = os.fork

def fork():
    pid = real_fork()
    if pid:
        forked.write(f"{pid}\\n")
        forked.flush()
        if not getattr(fork, "sent", False):
            fork.sent = True
            os.kill(os.getpid(), signal.SIGTERM)  # the controller gives up while the agent forks
    return pid

os.fork = fork
sys.exit(agent.main(sys.argv[2:]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_sigterm_during_the_workers_fork_takes_every_worker_down(tmp_path: Path) -> None:
    forked = tmp_path / "forked"
    # two nodes' world, this the first: the workers would wait at the rendezvous for the 30 s they are given
    agent = subprocess.run(
        [sys.executable, "-c", AGENT, str(forked), "--test", "node", "--nproc", "3", "--nnodes", "2",
         "--master", f"127.0.0.1:{free_loopback_port()}", "--deadline", "60", "--params", '{"timeout_s": 30}'],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert agent.returncode == 128 + 15, agent.stderr
    workers = [int(line) for line in forked.read_text().split()]
    assert len(workers) == 3, "every worker forked before the SIGTERM was handled"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in workers if _alive(pid)]
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"workers outlived their agent: {left}"


def _load_checkpoint() -> None:
    raise RuntimeError("Timed out waiting 10000ms for send operation to complete")


@pytest.mark.fast
def test_an_error_record_keeps_the_frames_it_was_raised_in() -> None:
    """Every rank failing at once says the same few words; where the first one was (a checkpoint's load, a
    barrier) is in its frames, innermost last."""
    from fabric_tests.agent import WHERE_FRAMES, where

    try:
        _load_checkpoint()
    except RuntimeError as error:
        frames = where(error)
    assert frames[-1].endswith("in _load_checkpoint") and "test_agent_signals.py:" in frames[-1]
    assert 1 <= len(frames) <= WHERE_FRAMES
