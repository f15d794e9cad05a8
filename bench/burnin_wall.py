"""Wall time of the whole burn-in on the simulated example, stage by stage.

The example cluster (`examples/sim-cluster.yaml`, 16 hosts, its faults included) is provisioned once, then
`provision burnin` runs every stage the spec selects; the figures are read from the run's own event log, so
they are the times the tool itself recorded. `--quick` burns in 4 hosts of the example with 4 GPUs each.

Run: python -m bench.burnin_wall [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _spec(directory: Path, quick: bool) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "sim-cluster.yaml").read_text())
    if quick:
        data["nodes"]["groups"][0]["hosts"] = "sim[01-04]"
        data["hardware"]["hgx-h100"]["gpu"]["count"] = 4
        data["hardware"]["hgx-h100"]["rails"] = {"mlx5_0": 0, "mlx5_3": 1, "mlx5_4": 2, "mlx5_5": 3}
        data["fabric"]["rails"] = 4
        data["simulation"]["faults"] = [fault for fault in data["simulation"]["faults"]
                                        if fault.get("node") in ("sim03", "sim04")]
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=1800, check=False)


def _stage_seconds(run_dir: Path) -> dict[str, float]:
    started: dict[str, datetime] = {}
    seconds: dict[str, float] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        name = event.get("event", "")
        if name == "burnin.stage.started":
            started[event["stage"]] = datetime.fromisoformat(event["ts"])
        elif name == "burnin.stage.finished" and event["stage"] in started:
            seconds[event["stage"]] = round(
                (datetime.fromisoformat(event["ts"]) - started[event["stage"]]).total_seconds(), 1)
    return seconds


def measure(quick: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="burnin-wall-") as name:
        workdir = Path(name)
        spec = _spec(workdir, quick)
        provisioned = _cli("apply", str(spec), "--phases", "simulate,register,provision", cwd=workdir)
        if provisioned.returncode not in (0, 1):
            raise SystemExit(f"provisioning failed: {provisioned.stderr[-2000:]}")
        started = time.perf_counter()
        burned = _cli("burnin", str(spec), "--json", cwd=workdir)
        wall = time.perf_counter() - started
        payload = json.loads(burned.stdout)
        states = [row["state"] for row in payload["nodes"]]
        return {"hosts": len(states), "wall_seconds": round(wall, 1),
                "stage_seconds": _stage_seconds(Path(payload["run_dir"])),
                "admitted": states.count("admitted"), "quarantined": states.count("quarantined"),
                "quarantined_nodes": {row["node"]: row["reason"] for row in payload["nodes"]
                                      if row["state"] == "quarantined"},
                "fabric_findings": payload.get("fabric_findings", []), "exit_code": burned.returncode}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.burnin_wall")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.quick)
    if not args.json:
        print(f"{result['hosts']} hosts: burn-in {result['wall_seconds']} s, by stage {result['stage_seconds']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
