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
import threading
import time
from typing import Any

from fabric_tests.protocol import emit

CLIENT_ATTEMPTS = 25
RETRY_PAUSE_S = 0.2  # a server a moment late is met within a fifth of a second
NOT_LISTENING = ("Couldn't connect", "Unable to open file descriptor")
#: The clients of a round give up about CLIENT_ATTEMPTS x RETRY_PAUSE_S after they start, and a round's hosts start
#: within a few seconds of each other: a server still waiting this long after its start will not be reached (its
#: client refused to start, or gave up), and stopping it then spares the round its whole deadline.
ACCEPT_WINDOW_S = 2 * CLIENT_ATTEMPTS * RETRY_PAUSE_S + 2.0
WAITING = "Waiting for client to connect..."
OUTPUT_LIMIT = 3000  # characters kept of each stream: perftest prints ~1.5 kB, an error far less


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fabric_tests.perftest")
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--legs", required=True, help="JSON list of legs (see the module docstring)")
    parser.add_argument("--tool", default="ib_write_bw")
    parser.add_argument("--accept-window", type=float, default=ACCEPT_WINDOW_S,
                        help="seconds a server waits for its client before it is stopped")
    return parser.parse_args(argv)


def _command(tool: str, leg: dict[str, Any]) -> list[str]:
    argv = [tool, "-d", leg["device"], "-p", str(leg["port"]), *leg.get("args", [])]
    return [*argv, leg["peer"]] if leg.get("peer") else argv


#: ``--use_cuda=N`` counts GPUs as CUDA does, fastest first by default: in PCI bus order it is the GPU nvidia-smi and
#: the spec's rail map call N.
GPU_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


class _Running:
    """One started tool and what it has printed so far (read as it comes, so a waiting server can be seen)."""

    def __init__(self, tool: str, leg: dict[str, Any], attempt: int) -> None:
        self.attempt = attempt
        self.started = time.monotonic()
        self.process = subprocess.Popen(_command(tool, leg), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, start_new_session=True, env={**os.environ, **GPU_ORDER})
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.readers = [threading.Thread(target=_drain, args=(stream, sink), daemon=True)
                        for stream, sink in ((self.process.stdout, self.stdout), (self.process.stderr, self.stderr))]
        for reader in self.readers:
            reader.start()

    def waiting_for_client(self) -> bool:
        """A server that printed perftest's banner and nothing after it: no client has connected."""
        text = "".join(self.stdout)
        return WAITING in text and not text.split(WAITING, 1)[1].strip("* \n")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def collect(self) -> tuple[int, str, str]:
        code = self.process.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        return code, "".join(self.stdout), "".join(self.stderr)


def _drain(stream: Any, sink: list[str]) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
    stream.close()


def run(tool: str, legs: list[dict[str, Any]], deadline_s: float,
        accept_window_s: float = ACCEPT_WINDOW_S) -> list[dict[str, Any]]:
    """Every leg run to completion or to the deadline; one outcome per leg, in the order given. A server no client
    reached within ``accept_window_s`` is stopped then, not at the deadline: its client has given up (or never
    started), and the round would otherwise wait the whole deadline for it."""
    ends = time.monotonic() + deadline_s
    outcomes: list[dict[str, Any]] = [{} for _ in legs]
    running: dict[int, _Running] = {}
    servers = [index for index, leg in enumerate(legs) if not leg.get("peer")]
    clients = [index for index, leg in enumerate(legs) if leg.get("peer")]
    for index in servers:
        running[index] = _Running(tool, legs[index], 1)
    if servers and clients:
        time.sleep(0.2)  # let the listeners bind before this host's own clients go out
    for index in clients:
        running[index] = _Running(tool, legs[index], 1)
    while running:
        for index, started in list(running.items()):
            if started.process.poll() is None:
                now = time.monotonic()
                unmet = (not legs[index].get("peer") and now - started.started > accept_window_s
                         and started.waiting_for_client())
                if now >= ends or unmet:
                    started.stop()
                    code, stdout, stderr = started.collect()
                    if unmet:
                        stderr += f" No client connected within {accept_window_s:g} s (stopped by fabric_tests)\n"
                    outcomes[index] = _outcome(legs[index], code, stdout, stderr, started.attempt,
                                               timed_out=not unmet)
                    del running[index]
                continue
            code, stdout, stderr = started.collect()
            retry = (code != 0 and legs[index].get("peer") and started.attempt < CLIENT_ATTEMPTS
                     and any(text in stderr for text in NOT_LISTENING) and ends - time.monotonic() > RETRY_PAUSE_S)
            if retry:
                time.sleep(RETRY_PAUSE_S)
                running[index] = _Running(tool, legs[index], started.attempt + 1)
                continue
            outcomes[index] = _outcome(legs[index], code, stdout, stderr, started.attempt)
            del running[index]
        time.sleep(0.05)
    return outcomes


def _outcome(leg: dict[str, Any], code: int, stdout: str, stderr: str, attempts: int, *,
             timed_out: bool = False) -> dict[str, Any]:
    return {"device": leg["device"], "port": leg["port"], "role": "client" if leg.get("peer") else "server",
            "rc": code, "timed_out": timed_out, "attempts": attempts, "stdout": stdout[-OUTPUT_LIMIT:],
            "stderr": stderr[-OUTPUT_LIMIT:]}


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    legs = json.loads(args.legs)
    for outcome in run(args.tool, legs, args.deadline, args.accept_window):
        emit("perftest", **outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
