"""The simulated cluster's BMCs: a Redfish emulator per node, and the power it controls.

Each node of a simulated spec with a ``bmc:`` section gets one ``sushy-emulator`` (sushy-tools, fake driver) on its
BMC address (loopback only) and the spec's port, serving one system named after the node, behind HTTP basic
authentication with the spec's credentials, as a real BMC would. The emulator applies a power change 1-11 s after
it is asked, as real BMCs take their time. A watcher reads every emulator's power state twice a second: a node
whose BMC goes Off is powered off, and one that comes back On boots (``power_on`` of the host's tools), which is
what ends a ``reboot_hang``. Nothing else in the simulator knows a BMC exists: the controller only ever speaks
Redfish to these emulators.

``provision sim bmcs SPEC`` runs them in the foreground until it is interrupted (as ``provision sim shell``
serves a host's sshd), so tests and demos start and stop them as one process.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from provision.errors import UsageProblem
from provision.sim import cluster as sim_cluster
from provision.sim.node import load_state, save_state
from provision.sim.tools import system as host_system
from provision.spec import LoadedSpec
from provision.spec.secrets import resolve

START_TIMEOUT_S = 30.0
POLL_S = 0.5


@dataclass(frozen=True)
class SimulatedBmc:
    node: str
    address: str
    port: int
    system_path: str

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}/redfish/v1"


def emulator_path() -> str | None:
    """sushy-emulator beside this interpreter (a venv's bin is not always on PATH), or on PATH."""
    beside = Path(sys.executable).parent / "sushy-emulator"
    return str(beside) if beside.exists() else shutil.which("sushy-emulator")


def system_path(node: str) -> str:
    """The Redfish path of the one system a node's BMC serves (a stable UUID per node name)."""
    return f"/redfish/v1/Systems/{uuid.uuid5(uuid.NAMESPACE_DNS, f'provision-sim-bmc/{node}')}"


def _plan(loaded: LoadedSpec) -> list[SimulatedBmc]:
    bmc = loaded.spec.bmc
    if loaded.spec.simulation is None or bmc is None:
        raise UsageProblem(f"{loaded.path}: simulated BMCs need both a simulation: and a bmc: section")
    if bmc.scheme != "http":
        raise UsageProblem("the simulated BMCs speak plain HTTP on loopback: set bmc.scheme: http")
    planned = []
    for node in loaded.nodes:
        if node.bmc_address is None:
            continue
        if not ipaddress.ip_address(node.bmc_address).is_loopback:
            raise UsageProblem(f"{node.name}: bmc_address {node.bmc_address} is not a loopback address; the "
                               "simulated BMCs only listen on 127.0.0.0/8")
        planned.append(SimulatedBmc(node.name, node.bmc_address, bmc.port, system_path(node.name)))
    if not planned:
        raise UsageProblem("no node has a BMC address (bmc_address_start, or overrides: bmc_address)")
    return planned


@contextmanager
def running(loaded: LoadedSpec, state_dir: Path) -> Iterator[list[SimulatedBmc]]:
    """Every node's emulator, answering, and the power watcher; all stopped when the block ends."""
    planned = _plan(loaded)
    assert loaded.spec.bmc is not None
    credentials = loaded.spec.bmc.credentials
    username = resolve(credentials.username, what="bmc.credentials.username", spec_dir=loaded.path.parent)
    password = resolve(credentials.password, what="bmc.credentials.password", spec_dir=loaded.path.parent)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(planned, state_dir, (username, password), stop), daemon=True)
    with emulators(sim_cluster.sim_dir(state_dir) / "bmc", planned, username, password):
        watcher.start()
        try:
            yield planned
        finally:
            stop.set()
            watcher.join(timeout=5)


@contextmanager
def emulators(home: Path, planned: list[SimulatedBmc], username: str, password: str) -> Iterator[None]:
    """One emulator per BMC (fake driver, one system named after the node, powered on), behind basic
    authentication with a bcrypt htpasswd file, each answering before the block starts; all stopped after it."""
    import bcrypt  # sushy-tools' own dependency: there only when the emulator is

    binary = emulator_path()
    if binary is None:
        raise UsageProblem("the simulated BMCs are sushy-tools' Redfish emulator: pip install sushy-tools "
                           "(it is in the dev extra)")
    home.mkdir(parents=True, exist_ok=True)
    htpasswd = home / "htpasswd"
    htpasswd.touch(mode=0o600)
    htpasswd.write_text(f"{username}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for bmc in planned:
            folder = home / bmc.node
            (folder / "tmp").mkdir(parents=True, exist_ok=True)
            system = bmc.system_path.rsplit("/", 1)[1]
            (folder / "emulator.conf").write_text(
                "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
                f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
                f"SUSHY_EMULATOR_FAKE_SYSTEMS = [{{'uuid': {system!r}, 'name': {bmc.node!r}, "
                "'power_state': 'On', 'nics': []}]\n")
            with (folder / "emulator.log").open("ab") as log:
                processes.append(subprocess.Popen(
                    [binary, "--fake", "--config", str(folder / "emulator.conf"), "-i", bmc.address,
                     "-p", str(bmc.port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "TMPDIR": str(folder / "tmp")}))  # the fake driver's state lives in TMPDIR
        _wait_until_answering(planned, home)
        yield
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def _wait_until_answering(planned: list[SimulatedBmc], home: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    for bmc in planned:
        while True:
            try:
                if requests.get(bmc.url, timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise UsageProblem(f"the simulated BMC of {bmc.node} ({bmc.url}) did not answer in "
                                   f"{START_TIMEOUT_S:g} s; see {home / bmc.node / 'emulator.log'}")
            time.sleep(0.2)


def _watch(planned: list[SimulatedBmc], state_dir: Path, auth: tuple[str, str], stop: threading.Event,
           boot: Callable[[Path], int] = host_system.power_on) -> None:
    """Apply each emulator's power state to its simulated host (bounded: it stops with the emulators)."""
    last: dict[str, str] = {}
    with requests.Session() as session:
        session.auth = auth
        while not stop.wait(POLL_S):
            for bmc in planned:
                try:
                    state = session.get(f"http://{bmc.address}:{bmc.port}{bmc.system_path}",
                                        timeout=2).json()["PowerState"]
                except (requests.RequestException, ValueError, KeyError):
                    continue
                before, last[bmc.node] = last.get(bmc.node), state
                root = sim_cluster.node_paths(state_dir, bmc.node).root
                if state == "Off" and before != "Off" and root.exists():
                    _power_off(root)
                elif state == "On" and before == "Off" and root.exists():
                    boot(root)


def _power_off(root: Path) -> None:
    state = load_state(root)
    state["powered"] = False
    save_state(root, state)
