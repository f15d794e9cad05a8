"""How long `sim up` takes, and how much disk it uses, from 16 to 512 simulated 8-GPU hosts.

Run: python -m bench.sim_scale [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.simulated import example
from provision.network.sources import design_fabric
from provision.sim import cluster
from provision.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent


def _spec(directory: Path, hosts: int) -> Path:
    data = example()
    data["nodes"]["groups"][0]["hosts"] = f"sim[001-{hosts:03d}]"
    data["fabric"].update(hosts_per_su=32, switch_radix=64)
    faults = data["simulation"]["faults"]
    cable_faults = [fault for fault in faults if fault.get("node") is None]
    data["simulation"]["faults"] = [fault for fault in faults if fault.get("node") and int(fault["node"][3:]) <= hosts]
    for fault in data["simulation"]["faults"]:
        fault["node"] = f"sim{int(fault['node'][3:]):03d}"
    path = directory / f"sim-{hosts}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # the example's cable faults name its small fabric's ports: aim each at the same tier of this fabric
    cables = sorted(design_fabric(load_spec(path)).cables(), key=lambda cable: cable.label())
    for fault in cable_faults:  # a leaf's uplink stays a leaf's uplink; a spine's to a core where there are cores
        tier = _tier(fault["target"].rsplit("/", 1)[0])
        ends = [(node, port, _tier(cable.other((node, port))[0])) for cable in cables
                for node, port in (cable.a, cable.b) if _tier(node) == tier]
        ends = sorted((end for end in ends if end[2] != "sim"), key=lambda end: TIERS.index(end[2]), reverse=True)
        if ends:
            data["simulation"]["faults"].append({**fault, "target": f"{ends[0][0]}/{ends[0][1]}"})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


TIERS = ("sim", "leaf", "spine", "core")


def _tier(node: str) -> str:
    return "sim" if "/" in node else node.split("-", 1)[0]  # HCAs are named host/device


def _disk_kb(path: Path) -> int:
    return int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def measure(hosts: int, workdir: Path) -> dict[str, float]:
    spec = load_spec(_spec(workdir, hosts))
    state_dir = workdir / f"state-{hosts}"
    started = time.perf_counter()
    cluster.up(spec, state_dir)
    seconds = time.perf_counter() - started
    files = sum(len(names) for _root, _dirs, names in os.walk(cluster.sim_dir(state_dir)))
    disk_mb = round(_disk_kb(cluster.sim_dir(state_dir)) / 1024, 1)
    again = time.perf_counter()
    cluster.up(spec, state_dir)  # idempotent: same spec is a no-op
    noop = time.perf_counter() - again
    touched = spec.node_names[:8]  # hosts are built on first touch; what does a touch cost?
    touch_started = time.perf_counter()
    cluster.materialize(state_dir, touched)
    touch_ms = (time.perf_counter() - touch_started) / len(touched) * 1000
    result = {"hosts": hosts, "gpus": hosts * 8, "seconds": round(seconds, 3), "noop_seconds": round(noop, 4),
              "disk_mb": disk_mb, "files": files,
              "first_touch_ms_per_host": round(touch_ms, 1)}
    shutil.rmtree(state_dir)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="16 and 64 hosts only")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()
    sizes = [16, 64] if args.quick else [16, 128, 512]
    with tempfile.TemporaryDirectory() as directory:
        rows = [measure(hosts, Path(directory)) for hosts in sizes]
    for row in rows:
        print(f"{row['hosts']:>4} hosts: sim up {row['seconds']:.2f} s, {row['disk_mb']} MB, {row['files']} files; "
              f"repeat {row['noop_seconds'] * 1000:.1f} ms; first touch {row['first_touch_ms_per_host']} ms/host",
              file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"benchmark": "sim_scale", "runs": rows}))


if __name__ == "__main__":
    main()
