"""A Redfish BMC per node on loopback: sushy-tools' emulator with its fake driver, one process per address.

Each node gets its own emulator on its own loopback address (127.0.0.N, one port for all), serving one system
named after the node, behind HTTP basic authentication (a bcrypt htpasswd file), as a real BMC would. The fake
driver applies a power change 1-11 s after the request, as real BMCs take their time, and keeps its state in a
SQLite file under ``$TMPDIR``, so every emulator gets its own TMPDIR.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import bcrypt
import requests

START_TIMEOUT_S = 30.0


def emulator() -> str | None:
    """The emulator beside this interpreter (a venv's bin is not always on PATH), or on PATH."""
    beside = Path(sys.executable).parent / "sushy-emulator"
    return str(beside) if beside.exists() else shutil.which("sushy-emulator")


def available() -> str | None:
    """Why the emulator cannot run here, or None."""
    return None if emulator() else "sushy-emulator (pip sushy-tools, in the dev extra) is not installed"


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@contextmanager
def bmcs(directory: Path, nodes: dict[str, str], *, username: str, password: str,
         port: int) -> Iterator[dict[str, str]]:
    """``nodes``: node name -> loopback address. Yields node -> the system's Redfish path."""
    directory.mkdir(parents=True, exist_ok=True)
    htpasswd = directory / "htpasswd"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{username}:{hashed}\n")
    processes: list[subprocess.Popen[bytes]] = []
    paths: dict[str, str] = {}
    try:
        for name, address in nodes.items():
            home = directory / name
            (home / "tmp").mkdir(parents=True, exist_ok=True)
            identity = str(uuid.uuid5(uuid.NAMESPACE_DNS, name))
            (home / "emulator.conf").write_text(
                "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
                f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
                f"SUSHY_EMULATOR_FAKE_SYSTEMS = [{{'uuid': {identity!r}, 'name': {name!r}, 'power_state': 'On', "
                "'nics': []}]\n")
            with (home / "emulator.log").open("wb") as log:
                processes.append(subprocess.Popen(
                    [str(emulator()), "--fake", "--config", str(home / "emulator.conf"), "-i", address,
                     "-p", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "TMPDIR": str(home / "tmp")}))
            paths[name] = f"/redfish/v1/Systems/{identity}"
        deadline = time.monotonic() + START_TIMEOUT_S
        for address in nodes.values():
            while True:
                try:
                    if requests.get(f"http://{address}:{port}/redfish/v1", timeout=2).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Redfish emulator at {address}:{port} did not answer in "
                                       f"{START_TIMEOUT_S:g} s; see {directory}/*/emulator.log")
                time.sleep(0.2)
        yield paths
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def power_state(address: str, port: int, path: str, username: str, password: str) -> str:
    """Read the system's state straight from the emulator (not through our client)."""
    reply = requests.get(f"http://{address}:{port}{path}", auth=(username, password), timeout=5)
    reply.raise_for_status()
    return str(reply.json()["PowerState"])
