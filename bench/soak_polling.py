"""What the soak's telemetry polling costs the controller: 512 simulated GPUs (64 hosts of 8) polled every 10 s.

A soak polls every node for hours; the controller that does it must stay light. This measures the controller
process's own CPU (``time.process_time``: its threads, not the commands it starts, which on real hosts run on the
nodes) over a soak of polls only: the soak stage with its load replaced by an idle one, the hosts' drivers loaded
so every poll reads every GPU, HCA counter and the kernel log as on a node. Reported: CPU seconds per wall second
(the share of one core) and seconds per poll of the whole fleet. The target: under 5% of a core.

Run: python -m bench.soak_polling [--quick] [--hosts N] [--seconds S] --json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.simulated import example, provision_cli, write_spec
from provision.burnin.soak import SoakStage
from provision.burnin.verdict import NodeVerdict
from provision.sim import cluster
from provision.sim.node import load_state, save_state
from provision.sim.tools.apt import package_entry, read_status, write_status
from provision.spec import load_spec
from provision.state.store import StateStore

DRIVER = "535.183.01"


def _drivers_loaded(state_dir: Path, hosts: list[str]) -> None:
    """Each host as after provisioning, as far as the poll reads it: the driver installed and loaded."""
    for host in hosts:
        root = cluster.node_paths(state_dir, host).root
        status = read_status(root)
        status[f"nvidia-utils-{DRIVER.split('.')[0]}"] = package_entry(f"nvidia-utils-{DRIVER.split('.')[0]}",
                                                                        f"{DRIVER}-1")
        write_status(root, status)
        save_state(root, {**load_state(root), "driver_installed": DRIVER, "driver_loaded": DRIVER})


def measure(hosts: int, seconds: float, interval_s: float) -> dict[str, Any]:
    data = example()
    data["nodes"]["groups"][0]["hosts"] = f"sim[001-{hosts:03d}]"
    data["fabric"].update(hosts_per_su=32, switch_radix=64)
    data["burnin"]["stages"] = ["preflight", "soak"]
    data["burnin"].pop("dcgm", None)
    data["burnin"]["soak"] = {"duration": f"{seconds / 60:g}m", "poll_interval_s": interval_s}
    data["simulation"] = {"seed": 5, "faults": [], "time_scale": 1}
    with tempfile.TemporaryDirectory(prefix="soak-polling-") as name:
        work = Path(name)
        spec = write_spec(work, data)
        up = provision_cli("apply", str(spec), "--phases", "simulate,register", cwd=work)
        assert up.returncode == 0, up.stderr
        loaded = load_spec(spec)
        state_dir = work / ".provision" / loaded.spec.cluster.name
        _drivers_loaded(state_dir, loaded.node_names)
        store = StateStore(state_dir)
        campaign, _ = store.open_campaign("bench", ["preflight", "soak"], loaded.sha256)

        def idle(nodes: list[Any], _directory: Path) -> list[NodeVerdict]:
            time.sleep(1.0)  # no load: the bench is the polling's cost
            return [NodeVerdict(node.name, "soak") for node in nodes]

        stage = SoakStage(loaded, loaded.nodes, store, campaign, seed=1, evidence_dir=work / "soak",
                          forks=loaded.spec.connection.forks, load=idle)
        cpu, wall = time.process_time(), time.monotonic()
        verdicts = stage.run()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        polls = store.db.execute("SELECT COUNT(DISTINCT at_s) FROM soak_samples WHERE series = 'gpu0/temperature_c'"
                                 ).fetchone()[0]
        values = store.db.execute("SELECT COUNT(*) FROM soak_samples").fetchone()[0]
        store.close()
    gpus = hosts * int(data["hardware"]["hgx-h100"]["gpu"]["count"])
    return {"hosts": hosts, "gpus": gpus, "interval_s": interval_s, "wall_s": round(wall, 1), "polls": polls,
            "values_stored": values, "controller_cpu_s": round(cpu, 2),
            "core_share": round(cpu / wall, 4), "cpu_s_per_fleet_poll": round(cpu / max(polls, 1), 3),
            "nodes_passed": sum(verdict.passed for verdict in verdicts), "target_core_share": 0.05}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 hosts for 60 s")
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    hosts, seconds = (8, 60.0) if args.quick else (args.hosts, args.seconds)
    result = measure(hosts, seconds, 10.0)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
