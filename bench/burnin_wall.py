"""Wall time of the whole burn-in on the simulated example, stage by stage.

The example cluster (`examples/sim-cluster.yaml`, 16 hosts, its faults included) is provisioned once, then
`provision burnin` runs every stage the spec selects; the figures are read from the run's own event log, so
they are the times the tool itself recorded. `--quick` burns in 4 hosts of the example with 4 GPUs each.

Run: python -m bench.burnin_wall [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from bench.simulated import example, provision_then_burn_in, quarantined, shrink_to_four_hosts, write_spec


def _spec(directory: Path, quick: bool) -> Path:
    data = example()
    if quick:
        shrink_to_four_hosts(data)
        data["simulation"]["faults"] = [fault for fault in data["simulation"]["faults"]
                                        if fault.get("node") in ("sim03", "sim04")]
    return write_spec(directory, data)


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
        payload, wall, exit_code = provision_then_burn_in(spec)
        states = [row["state"] for row in payload["nodes"]]
        return {"hosts": len(states), "wall_seconds": round(wall, 1),
                "stage_seconds": _stage_seconds(Path(payload["run_dir"])),
                "admitted": states.count("admitted"), "quarantined": states.count("quarantined"),
                "quarantined_nodes": quarantined(payload), "fabric_findings": payload.get("fabric_findings", []),
                "exit_code": exit_code}


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
