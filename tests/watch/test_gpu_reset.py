"""The ladder's ``gpu_reset`` rung on a simulated host (issue 56): the simulator's ``nvidia-smi -r`` says what
NVIDIA's tool says (recorded in NVIDIA/NVSentinel #1690 and #1692): refused, exit 255, while the persistence daemon
holds the GPU; "was successfully reset" once nothing does, a pending row remap then applied. The watch's step stops
the daemon around the resets and starts it again, so the rung works where the daemon runs, as on our nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.hosts.remote import open_session
from provision.sim.host import inject_now
from provision.spec import load_spec
from provision.watch.climb import PERSISTENCE_UNIT, reset_gpus
from tests.simhelpers import SimHost, bring_up

PINNED = "535.183.01"


@pytest.fixture()
def host(tmp_path: Path) -> tuple[SimHost, Path]:
    state, _ = bring_up(tmp_path, [], hosts="sim01")
    simulated = SimHost(state, "sim01").add_vendor_sources()
    simulated.run("apt-get", "install", "-y", f"nvidia-driver-535={PINNED}-1")
    simulated.run("modprobe", "nvidia")
    simulated.run("systemctl", "start", PERSISTENCE_UNIT)  # the driver package brings the daemon
    return simulated, state


def test_the_tool_refuses_a_held_gpu_and_resets_a_free_one(host: tuple[SimHost, Path]) -> None:
    simulated, _ = host
    inject_now(simulated.paths.root.parent, "row_remap_pending", "gpu2")
    held = simulated.run("nvidia-smi", "-r", "-i", "2", check=False)
    assert held.returncode == 255
    lines = held.stdout.splitlines()
    assert lines[0] == "The following GPUs could not be reset:"
    assert lines[1].startswith("  GPU 00000000:") and lines[1].endswith(": In use by another client")
    assert "Please first kill" in held.stdout
    simulated.run("systemctl", "stop", PERSISTENCE_UNIT)
    done = simulated.run("nvidia-smi", "-r", "-i", "2")
    assert done.stdout.startswith("GPU 00000000:") and done.stdout.strip().endswith("was successfully reset.")
    rows = simulated.run("nvidia-smi", "--query-remapped-rows=gpu_bus_id,remapped_rows.pending",
                         "--format=csv,noheader").stdout
    assert rows.count(", 0") == rows.count("\n"), rows  # the pending remap applied at the reset
    every = simulated.run("nvidia-smi", "-r", check=False)
    assert every.returncode == 64 and "not simulated" in every.stderr  # the words for all at once: not recorded


def test_the_rung_resets_every_gpu_around_the_daemon_and_starts_it_again(host: tuple[SimHost, Path],
                                                                        tmp_path: Path) -> None:
    simulated, state = host
    loaded = load_spec(tmp_path / "spec.yaml")
    session = open_session(loaded, loaded.nodes[0], state)
    try:
        ok, said = reset_gpus(session)
    finally:
        session.close()
    assert ok, said
    assert said.count("was successfully reset.") == len(simulated.run("nvidia-smi", "-L").stdout.splitlines())
    assert simulated.run("systemctl", "is-active", PERSISTENCE_UNIT).stdout.strip() == "active"
