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


def _reset_through_a_session(spec: Path, state: Path) -> tuple[bool, str]:
    """The rung's reset as the watch does it: through the controller's session to the spec's one node."""
    loaded = load_spec(spec)
    session = open_session(loaded, loaded.nodes[0], state)
    try:
        return reset_gpus(session)
    finally:
        session.close()


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
    ok, said = _reset_through_a_session(tmp_path / "spec.yaml", state)
    assert ok, said
    assert said.count("was successfully reset.") == len(simulated.run("nvidia-smi", "-L").stdout.splitlines())
    assert simulated.run("systemctl", "is-active", PERSISTENCE_UNIT).stdout.strip() == "active"


def test_a_gpu_fallen_off_the_bus_is_lost_to_the_reset_until_the_host_reboots(host: tuple[SimHost, Path],
                                                                               tmp_path: Path) -> None:
    """Xid 79: nvidia-smi cannot even find the device (its words for a lost GPU: JosephKJ/OWOD #81; exit 15,
    nvidia-smi(1)), so the rung fails with them and the ladder goes on to the power cycle; after a boot the GPU
    answers again and resets, and the boot's kernel log no longer holds the Xid (an event: ``after_boot: cleared``);
    a GPU whose fault logs it again at every boot (``again``, the default) stays lost."""
    simulated, state = host
    inject_now(simulated.paths.root.parent, "xid", "gpu1", {"code": 79, "after_boot": "cleared"})
    simulated.run("systemctl", "stop", PERSISTENCE_UNIT)
    lost = simulated.run("nvidia-smi", "-r", "-i", "1", check=False)
    assert lost.returncode == 15, lost.stdout + lost.stderr
    assert lost.stdout.startswith("Unable to determine the device handle for GPU 0000:")
    assert lost.stdout.strip().endswith(": GPU is lost. Reboot the system to recover this GPU"), lost.stdout
    assert simulated.run("nvidia-smi", "-r", "-i", "2").returncode == 0, "only the lost GPU"
    ok, said = _reset_through_a_session(tmp_path / "spec.yaml", state)
    assert not ok and "GPU is lost" in said, said
    simulated.run("reboot", check=False)
    simulated.run("modprobe", "nvidia")
    again = simulated.run("nvidia-smi", "-r", "-i", "1", check=False)
    assert again.returncode == 0 and again.stdout.strip().endswith("was successfully reset."), again.stdout
    assert "Xid" not in simulated.run("dmesg").stdout, "dmesg shows this boot's lines"
    inject_now(simulated.paths.root.parent, "xid", "gpu2", {"code": 79})
    simulated.run("reboot", check=False)
    simulated.run("modprobe", "nvidia")
    assert simulated.run("dmesg").stdout.count("Xid") == 1, "logged again by the boot, once"
    assert simulated.run("nvidia-smi", "-r", "-i", "2", check=False).returncode == 15, "still lost"


def _climb_once(spec: Path, state: Path) -> list[dict]:
    import time

    from provision.run.context import SpecIdentity, mutating_run
    from provision.watch.climb import HostSteps, climb

    loaded = load_spec(spec)
    with mutating_run(state, "watch", ["watch"], spec=SpecIdentity(spec.resolve(), loaded.sha256)) as run:
        return [item.as_dict() for item in climb(loaded, run, now=time.time(), steps=HostSteps(loaded, state))]


def test_after_a_reset_the_node_is_judged_on_what_followed_it(tmp_path: Path) -> None:
    """The rung end to end on provisioned simulated hosts, quarantined by the watch as a node-check drain read
    back would leave them. sim01's double-bit error (Xid 48, NVIDIA's remedy: reset the GPU) is reset away: its
    Xid stays in the kernel log, but the re-validation judges what was logged after the reset began, and the node
    returns on its own checks. sim02's GPU fell off the bus (Xid 79): the tool cannot find it to reset, the rung
    fails with its words and the node is held for the next rung (the power cycle)."""
    from provision.state import NodeState, StateStore
    from tests.simhelpers import provision, shrink_to_four_gpus, write_spec
    from tests.stores import recorded_run

    spec = shrink_to_four_gpus(write_spec(tmp_path, [], hosts="sim[01-02]", stages=["preflight"]))
    provision(spec)
    state = tmp_path / ".provision" / "sim16"
    roots = {host: SimHost(state, host).paths.root.parent for host in ("sim01", "sim02")}
    inject_now(roots["sim01"], "ecc_uncorrectable", "gpu2")
    inject_now(roots["sim02"], "xid", "gpu1", {"code": 79})
    with StateStore(state) as store:
        admit, watch = recorded_run(store, "admit"), recorded_run(store, "watch")
        for host, xid in (("sim01", 48), ("sim02", 79)):
            store.transition(host, NodeState.ADMITTED, run_id=admit, reason="burned in before this test")
            store.transition(host, NodeState.QUARANTINED, run_id=watch, stage="node-check",
                             reason=f"node-check/xid: Xid {xid}")
    climbed = {row["node"]: row for row in _climb_once(spec, state)}
    failing = [(row["check"], row["message"]) for row in climbed["sim01"]["detail"].get("results", [])
               if row["outcome"] not in ("ok", "warning", "silenced")]
    assert (climbed["sim01"]["step"], climbed["sim01"]["outcome"]) == ("gpu_reset", "returned"), failing
    assert "): 48, " in SimHost(state, "sim01").run("dmesg").stdout, "the Xid is still in the log"
    assert (climbed["sim02"]["step"], climbed["sim02"]["outcome"]) == ("gpu_reset", "step failed"), climbed["sim02"]
    assert "GPU is lost" in climbed["sim02"]["detail"]["step"], climbed["sim02"]
    with StateStore(state) as store:
        assert store.node("sim01").state is NodeState.ADMITTED  # type: ignore[union-attr]
        assert store.node("sim02").state is NodeState.QUARANTINED  # type: ignore[union-attr]
