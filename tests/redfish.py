"""A Redfish BMC per node on loopback: sushy-tools' emulator with its fake driver, one process per address.

Each node gets its own emulator on its own loopback address (127.0.0.N, one port for all), serving one system
named after the node, behind HTTP basic authentication (a bcrypt htpasswd file), as a real BMC would. The fake
driver applies a power change 1-11 s after the request, as real BMCs take their time, and keeps its state in a
SQLite file under ``$TMPDIR``, so every emulator gets its own TMPDIR.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from provision.sim.bmc import SimulatedBmc, emulator_path, emulators, system_path
from tests.conftest import ROOT


def available() -> str | None:
    """Why the emulator cannot run here, or None."""
    return None if emulator_path() else "sushy-emulator (pip sushy-tools, in the dev extra) is not installed"


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@contextmanager
def bmcs(directory: Path, nodes: dict[str, str], *, username: str, password: str,
         port: int) -> Iterator[dict[str, str]]:
    """``nodes``: node name -> loopback address. Yields node -> the system's Redfish path."""
    planned = [SimulatedBmc(name, address, port, system_path(name)) for name, address in nodes.items()]
    with emulators(directory, planned, username, password):
        yield {bmc.node: bmc.system_path for bmc in planned}


def power_state(address: str, port: int, path: str, username: str, password: str) -> str:
    """Read the system's state straight from the emulator (not through our client)."""
    reply = requests.get(f"http://{address}:{port}{path}", auth=(username, password), timeout=5)
    reply.raise_for_status()
    return str(reply.json()["PowerState"])


@contextmanager
def serving_spec(spec: Path, count: int, env: dict[str, str]) -> Iterator[None]:
    """``provision sim bmcs SPEC``: a BMC per simulated node of the spec, whose power the simulator applies to the
    node (Off powers the host off, On boots it), until the block ends."""
    server = subprocess.Popen([sys.executable, "-m", "provision", "sim", "bmcs", str(spec)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              env={**os.environ, **env})
    try:
        deadline, lines = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            line = server.stdout.readline() if server.stdout else ""
            lines.append(line)
            if "BMC(s) ready" in line or not line:
                break
        assert f"{count} BMC(s) ready" in "".join(lines), "".join(lines)
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
