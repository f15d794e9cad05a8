"""The simulated node's warm interpreter (``provision.sim.zygote``): an agent started by the node's ``python3`` runs
as a fork of a process that has imported torch, and still behaves, to whoever started it and to ``/proc``, as the
agent a real node runs: its exit status and signals pass through its stand-in, it is seen with its own command line
and environment, and it goes (workers and all) when its stand-in is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from provision.sim import cluster
from tests.simhelpers import bring_up, free_loopback_port


def _agent(state_dir: Path, master: str, *, nnodes: int, params: dict) -> subprocess.Popen[str]:
    """An agent on sim01 through the node's own ``python3``, as a session starts one (its own process group)."""
    paths = cluster.node_paths(state_dir, "sim01")
    argv = [str(paths.bin / "python3"), "-m", "fabric_tests.agent", "--test", "collectives", "--nproc", "2",
            "--nnodes", str(nnodes), "--node-rank", "0", "--master", master, "--deadline", "60",
            "--params", json.dumps(params)]
    return subprocess.Popen(argv, env=cluster.environment(paths), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _wait_for(what: str, condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_an_agent_forked_by_the_zygote_is_seen_as_itself_and_goes_with_its_stand_in(tmp_path: Path) -> None:
    state_dir, _ = bring_up(tmp_path, [], hosts="sim01")
    # a world of two nodes of which one came: its workers wait in the rendezvous until killed
    client = _agent(state_dir, f"127.0.0.1:{free_loopback_port()}", nnodes=2, params={"timeout_s": 50})
    try:
        _wait_for("the agent and its two workers", lambda: len(_ours(tmp_path)) >= 3, 60)
        seen = _ours(tmp_path)
        forked = [pid for pid in seen if pid != client.pid and _parent_of(pid) != client.pid
                  and _parent_of(_parent_of(pid)) != client.pid]
        assert forked, "the agent is a fork of the zygote, not a child of the node's python3"
        os.killpg(client.pid, signal.SIGKILL)  # as a session's timeout takes its command's process group down
        client.wait(timeout=10)
        _wait_for("every process of the killed agent to be gone", lambda: not _ours(tmp_path), 10)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)


def test_the_agents_exit_status_and_signals_pass_through_its_stand_in(tmp_path: Path) -> None:
    state_dir, _ = bring_up(tmp_path, [], hosts="sim01")
    failing = _agent(state_dir, "local", nnodes=1, params={})  # no timeout_s: each worker fails at once
    out, err = failing.communicate(timeout=60)
    assert failing.returncode == 1, err
    assert '"type":"agent"' in out and "KeyError: 'timeout_s'" in out, out + err
    waiting = _agent(state_dir, f"127.0.0.1:{free_loopback_port()}", nnodes=2, params={"timeout_s": 50})
    try:
        _wait_for("the agent and its two workers", lambda: len(_ours(tmp_path)) >= 3, 60)
        waiting.send_signal(signal.SIGTERM)  # the controller gave up: the agent takes its workers down and exits
        waiting.communicate(timeout=30)  # seconds at most; over 10 once beside make test's other workers
        assert waiting.returncode == 128 + signal.SIGTERM
        _wait_for("the workers to be gone", lambda: not _ours(tmp_path), 10)
    finally:
        if waiting.poll() is None:
            os.killpg(waiting.pid, signal.SIGKILL)


def _ours(directory: Path) -> list[int]:
    """The agent processes of this test's node, as /proc shows them (what ``simhelpers.processes_of`` reads), by pid:
    the node's python3 standing in for the agent, the agent, its workers."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if str(directory).encode() in (proc / "environ").read_bytes() and \
                    b"fabric_tests.agent" in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return pids
