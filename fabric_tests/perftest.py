"""Run one host's share of a round of pair tests: every rail's ``ib_write_bw`` at once, each under a deadline.

``python3 -m fabric_tests.perftest --deadline SECONDS --legs JSON``

A *leg* is one end of one pair test: ``{"device": "mlx5_0", "port": 19000, "peer": null | "ADDRESS",
"args": [...]}``; no peer makes it the server. One SSH command per host per round starts all of them (a
host takes part in one pair per round, on all its rails in parallel: the rails are separate planes of the
fabric and do not share a cable). Servers start first; a client whose server is not listening yet (the other
host's command may start a moment later) is retried a few times, as perftest itself does not.

The raw output of each leg comes back as one protocol record; the controller parses it
(``provision.facts.perftest``), so what is judged is exactly what the tool printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from fabric_tests.protocol import emit

CLIENT_ATTEMPTS = 5
RETRY_PAUSE_S = 1.0
NOT_LISTENING = ("Couldn't connect", "Unable to open file descriptor")
OUTPUT_LIMIT = 3000  # characters kept of each stream: perftest prints ~1.5 kB, an error far less


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fabric_tests.perftest")
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--legs", required=True, help="JSON list of legs (see the module docstring)")
    parser.add_argument("--tool", default="ib_write_bw")
    return parser.parse_args(argv)


def _command(tool: str, leg: dict[str, Any]) -> list[str]:
    argv = [tool, "-d", leg["device"], "-p", str(leg["port"]), *leg.get("args", [])]
    return [*argv, leg["peer"]] if leg.get("peer") else argv


#: ``--use_cuda=N`` counts GPUs as CUDA does, fastest first by default: in PCI bus order it is the GPU nvidia-smi and
#: the spec's rail map call N.
GPU_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _start(tool: str, leg: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(_command(tool, leg), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **GPU_ORDER})


def _stop(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def run(tool: str, legs: list[dict[str, Any]], deadline_s: float) -> list[dict[str, Any]]:
    """Every leg run to completion or to the deadline; one outcome per leg, in the order given."""
    ends = time.monotonic() + deadline_s
    outcomes: list[dict[str, Any]] = [{} for _ in legs]
    running: dict[int, tuple[subprocess.Popen[str], int]] = {}
    servers = [index for index, leg in enumerate(legs) if not leg.get("peer")]
    clients = [index for index, leg in enumerate(legs) if leg.get("peer")]
    for index in servers:
        running[index] = (_start(tool, legs[index]), 1)
    if servers and clients:
        time.sleep(0.2)  # let the listeners bind before this host's own clients go out
    for index in clients:
        running[index] = (_start(tool, legs[index]), 1)
    while running:
        for index, (process, attempt) in list(running.items()):
            left = ends - time.monotonic()
            try:
                stdout, stderr = process.communicate(timeout=max(0.05, min(left, 0.5)))
            except subprocess.TimeoutExpired:
                if left <= 0:
                    _stop(process)
                    stdout, stderr = process.communicate()
                    outcomes[index] = _outcome(legs[index], -9, stdout, stderr, attempt, timed_out=True)
                    del running[index]
                continue
            retry = (process.returncode != 0 and legs[index].get("peer") and attempt < CLIENT_ATTEMPTS
                     and any(text in stderr for text in NOT_LISTENING) and ends - time.monotonic() > RETRY_PAUSE_S)
            if retry:
                time.sleep(RETRY_PAUSE_S)
                running[index] = (_start(tool, legs[index]), attempt + 1)
                continue
            outcomes[index] = _outcome(legs[index], process.returncode, stdout, stderr, attempt)
            del running[index]
    return outcomes


def _outcome(leg: dict[str, Any], code: int, stdout: str, stderr: str, attempts: int, *,
             timed_out: bool = False) -> dict[str, Any]:
    return {"device": leg["device"], "port": leg["port"], "role": "client" if leg.get("peer") else "server",
            "rc": code, "timed_out": timed_out, "attempts": attempts, "stdout": stdout[-OUTPUT_LIMIT:],
            "stderr": stderr[-OUTPUT_LIMIT:]}


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    legs = json.loads(args.legs)
    for outcome in run(args.tool, legs, args.deadline):
        emit("perftest", **outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
