"""The node-side pair-test helper (``fabric_tests.perftest``) over stand-in tools written here: a server whose
client never comes is stopped at the accept window, not at the round's deadline, and said to be unmet (the
controller then blames neither side for it); a server its client reached runs to its end."""

from __future__ import annotations

import time
from pathlib import Path

from fabric_tests.perftest import run
from provision.burnin.pairs import NOT_MET

BANNER = 'printf "\\n************************************\\n* Waiting for client to connect... *\\n' \
         '************************************\\n"\n'


def _tool(tmp_path: Path, body: str) -> str:
    tool = tmp_path / "ib_write_bw"
    tool.write_text("#!/bin/sh\n" + BANNER + body)
    tool.chmod(0o755)
    return str(tool)


def test_a_server_nobody_connects_to_is_stopped_at_the_accept_window(tmp_path: Path) -> None:
    tool = _tool(tmp_path, "sleep 60\n")
    began = time.monotonic()
    [outcome] = run(tool, [{"device": "mlx5_0", "port": 18515}], deadline_s=30, accept_window_s=0.2)
    assert time.monotonic() - began < 10
    assert outcome["role"] == "server" and outcome["rc"] != 0 and not outcome["timed_out"]
    assert any(marker in outcome["stderr"] for marker in NOT_MET), outcome


def test_a_server_its_client_reached_is_left_to_finish(tmp_path: Path) -> None:
    tool = _tool(tmp_path, 'echo " #bytes     #iterations    BW peak[Gb/sec]"\nsleep 0.6\n'
                           'echo " 1048576    20           390.12"\n')
    [outcome] = run(tool, [{"device": "mlx5_0", "port": 18515}], deadline_s=30, accept_window_s=0.2)
    assert outcome["rc"] == 0 and not outcome["timed_out"], outcome
    assert "390.12" in outcome["stdout"]


def test_a_leg_past_the_deadline_is_stopped_as_timed_out(tmp_path: Path) -> None:
    tool = _tool(tmp_path, 'echo " #bytes     #iterations    BW peak[Gb/sec]"\nsleep 60\n')
    [outcome] = run(tool, [{"device": "mlx5_0", "port": 18515}], deadline_s=0.5, accept_window_s=0.2)
    assert outcome["timed_out"] and outcome["rc"] != 0
