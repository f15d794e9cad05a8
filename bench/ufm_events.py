"""Ingest and score a million UFM event.log lines on the 4,096-GPU design.

The log is a day of a large fabric: UFM housekeeping codes (GID/multicast notices, link-up, CPU
reports: ignored), threshold events on a few hundred erroring ports, 40 flapping cables whose every
flap is a 329 plus two 112s, twenty switch-reboot storms of ~60 link-downs each, and a sprinkle of
malformed lines and unknown codes. Timed: reading the text, parsing, mapping every event onto its
cable in the fabric model, storm and reboot suppression, per-cable scoring. Checked: every flapping
cable is classified ``flapping`` and no storm cable is.

    python -m bench.ufm_events [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from bench.fabrics import reference_fabric
from provision.sim.ufm import EventWriter
from topology.linkhealth import Evidence, add_event_log, score
from topology.model import HCA, Cable, Fabric
from topology.ufm_events import parse_event_log

HOUR = 3600.0


def build_log(lines_wanted: int, seed: int = 1) -> tuple[str, set[Cable], set[Cable], Fabric]:
    fabric = reference_fabric(4096)
    rng = random.Random(seed)
    cables = list(fabric.cables())
    switch_cables = [c for c in cables if fabric.graph.nodes[c.a[0]].get("kind") != HCA]
    writer = EventWriter([])
    start = 1_790_000_000.0
    flapping = set(rng.sample(cables, 40))
    for cable in flapping:
        for _ in range(12):
            writer.link_down(fabric, start + rng.uniform(0, 24 * HOUR), cable)
    storm_cables: set[Cable] = set()
    for _ in range(20):
        when = start + rng.uniform(0, 24 * HOUR)
        for cable in rng.sample(switch_cables, 20):
            writer.link_down(fabric, when + rng.uniform(0, 0.9), cable)
            storm_cables.add(cable)
    erroring = rng.sample(switch_cables, 300)
    for cable in erroring:
        for _ in range(rng.randint(1, 4)):
            writer.port_event(fabric, start + rng.uniform(0, 24 * HOUR), rng.choice((110, 113, 116, 918)), "MINOR",
                              cable.a, "Symbol error counter rate threshold exceeded.")
    notices = ((64, "GID address is out of service"), (65, "GID address is in service"),
               (66, "MCast group created"), (67, "MCast group deleted"), (328, "Link went up"),
               (527, "UFM CPU usage is 41%"), (604, "Fabric analysis report succeeded"))
    while len(writer.lines) < lines_wanted - 20:
        cable = rng.choice(switch_cables)
        code, message = rng.choice(notices)
        writer.port_event(fabric, start + rng.uniform(0, 24 * HOUR), code, "INFO", cable.a, message)
    text = writer.text()
    text += "this line is not an event\n" * 10
    text += "2026-11-02 13:45:01.123 [9] [4242] INFO [Fabric] Grid [Default / Grid] [dev_id: 0x0]: new code\n" * 10
    return text, flapping - storm_cables, storm_cables - flapping, fabric


def measure(lines_wanted: int) -> dict[str, object]:
    text, flapping, storm_only, fabric = build_log(lines_wanted)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "event.log"
        path.write_text(text)
        started = time.perf_counter()
        log = parse_event_log(path.read_text())
        parsed = time.perf_counter()
        evidence = Evidence()
        add_event_log(evidence, fabric, log)
        mapped = time.perf_counter()
        health, storms, _explained = score(fabric, evidence)
        scored = time.perf_counter()
    by_cable = {item.cable: item for item in health}
    found_flapping = {cable for cable, item in by_cable.items() if item.klass == "flapping"}
    return {
        "lines": log.lines, "megabytes": round(len(text) / 1e6, 1), "kept_events": len(log.events),
        "malformed": log.malformed, "unknown_codes": dict(log.unknown_codes), "storms": len(storms),
        "seconds": {"parse": round(parsed - started, 3), "map": round(mapped - parsed, 3),
                    "score": round(scored - mapped, 3)},
        "seconds_total": round(scored - started, 3),
        "lines_per_second": round(log.lines / (scored - started)),
        "flapping_found": len(flapping & found_flapping), "flapping_injected": len(flapping),
        "storm_cables_called_flapping": len(storm_only & found_flapping),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200,000 lines instead of 1,000,000")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    row = measure(200_000 if args.quick else 1_000_000)
    print(f"{row['lines']:,} lines ({row['megabytes']} MB) in {row['seconds_total']} s {row['seconds']}: "
          f"{row['kept_events']:,} kept, {row['storms']} storms, flapping found {row['flapping_found']}/"
          f"{row['flapping_injected']}, storm cables called flapping {row['storm_cables_called_flapping']}",
          file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"benchmark": "ufm_events", **row}))


if __name__ == "__main__":
    main()
