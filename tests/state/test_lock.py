"""The cluster lock: one mutating command per state directory; the holder is named, and a dead holder frees it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.state.lock import ClusterLock, LockHeld


def test_a_second_command_is_refused_with_the_holder_named(tmp_path: Path) -> None:
    with ClusterLock(tmp_path, "apply"):
        holder = json.loads((tmp_path / "cluster.lock").read_text())
        assert holder["command"] == "apply"
        with pytest.raises(LockHeld, match="apply") as refused:
            ClusterLock(tmp_path, "burnin").acquire()
        assert "--wait-lock" in str(refused.value)
    with ClusterLock(tmp_path, "burnin"):  # released on leaving: the next one takes it
        pass
    assert (tmp_path / "cluster.lock").read_text() == "", "the holder's record leaves with it"


def test_waiting_for_the_lock_says_how_long_it_waited(tmp_path: Path) -> None:
    with ClusterLock(tmp_path, "apply"):
        started = time.monotonic()
        with pytest.raises(LockHeld, match=r"after waiting 0\.3 s"):
            ClusterLock(tmp_path, "status", wait_s=0.3).acquire()
        assert time.monotonic() - started >= 0.3


def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from provision.state.lock import ClusterLock\n"
        f"ClusterLock(Path({str(tmp_path)!r}), 'apply').acquire(); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld):
            ClusterLock(tmp_path, "burnin").acquire()
    finally:
        holder.kill()
        holder.wait(timeout=10)
    with ClusterLock(tmp_path, "burnin"):
        assert json.loads((tmp_path / "cluster.lock").read_text())["command"] == "burnin"
