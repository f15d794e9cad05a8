"""Cost of finding the bad nodes behind a failed multi-node test: launches, against d·log2(n/d) and Imbue's grid.

Two measurements, side by side:

* the search itself (``provision.burnin.isolation``) against an oracle that fails a group holding a bad node,
  for d ∈ {1, 2, 3} bad nodes among n ∈ {16, 48, 128}, over many random placements (mean and worst launches,
  worst rounds);
* small fleets with no healthy node known, against an oracle whose fault shows only *between* nodes (a node
  alone passes): every placement of d bad nodes among n ≤ 8, launches, and whether any healthy node was blamed
  (the bench exits non-zero if one was, or if a bad node with a healthy pair beside it was missed);
* the real thing (full run only): the simulated cluster with ``collective_corruption`` injected on d hosts,
  the collectives stage run by `provision burnin`, the launches and rounds read from the run's own report.

Run: python -m bench.isolation [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from itertools import combinations
from pathlib import Path

import yaml

from bench.simulated import example, provision_then_burn_in, quarantined
from provision.burnin.isolation import imbue_two_stage, isolate, lower_bound

ROOT = Path(__file__).resolve().parent.parent
SIZES = (16, 48, 128)
DEFECTS = (1, 2, 3)


def oracle_table(placements: int) -> list[dict[str, object]]:
    rows = []
    for n in SIZES:
        nodes = [f"node{index:03d}" for index in range(n)]
        for d in DEFECTS:
            launches, rounds = [], []
            for seed in range(placements):
                bad = set(random.Random(seed * 7919 + n * 31 + d).sample(nodes, d))
                found = isolate(nodes, lambda groups, bad=bad: [bool(bad & set(group)) for group in groups])
                if sorted(found.confirmed) != sorted(bad):
                    raise SystemExit(f"isolation missed: n={n} d={d} bad={sorted(bad)} found={found.confirmed}")
                launches.append(found.launches)
                rounds.append(found.rounds)
            rows.append({"n": n, "d": d, "mean_launches": round(statistics.fmean(launches), 2),
                         "worst_launches": max(launches), "worst_rounds": max(rounds),
                         "bound": round(lower_bound(n, d), 2), "imbue_two_stage": imbue_two_stage(n, d)})
    return rows


def small_fleets() -> list[dict[str, object]]:
    rows = []
    for n in range(2, 9):
        nodes = [f"node{index}" for index in range(n)]
        for d in range(1, n):
            launches, unresolved = [], 0
            for bad in map(set, combinations(nodes, d)):
                found = isolate(nodes, lambda groups, bad=bad: [len(group) > 1 and bool(bad & set(group))
                                                                for group in groups])
                if not set(found.confirmed) <= bad or (n - d >= 2 and set(found.confirmed) != bad):
                    raise SystemExit(f"isolation wrong between nodes: n={n} bad={sorted(bad)} {found.confirmed}")
                unresolved += set(found.confirmed) != bad
                launches.append(found.launches)
            rows.append({"n": n, "d": d, "mean_launches": round(statistics.fmean(launches), 2),
                         "worst_launches": max(launches), "placements_left_unresolved": unresolved})
    return rows


def simulated(bad_hosts: list[str]) -> dict[str, object]:
    """The example cluster, 2 ranks per host, collectives only, ``collective_corruption`` on ``bad_hosts``."""
    data = example()
    data["simulation"]["faults"] = [{"kind": "collective_corruption", "node": host} for host in bad_hosts]
    data["burnin"]["stages"] = ["collectives"]
    for key in ("dcgm", "soak"):  # each read by its stage alone
        data["burnin"].pop(key, None)
    data["admission"] = {**data.get("admission", {}), "max_failure_percent": {"burnin": 100}}
    with tempfile.TemporaryDirectory(prefix="isolation-") as name:
        workdir = Path(name)
        spec = workdir / "cluster.yaml"
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        payload, wall, _ = provision_then_burn_in(spec)
        report = json.loads((Path(payload["run_dir"]) / "workers" / "collectives.json").read_text())
        isolation = next(entry["isolation"] for entry in report if "isolation" in entry)
        return {"n": len(payload["nodes"]), "d": len(bad_hosts), "injected": bad_hosts,
                "quarantined": quarantined(payload),
                "launches": isolation["launches"], "rounds": isolation["rounds"], "bound": isolation["bound"],
                "imbue_two_stage": imbue_two_stage(len(payload["nodes"]), len(bad_hosts)),
                "burnin_seconds": round(wall, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.isolation")
    parser.add_argument("--quick", action="store_true", help="the oracle table only, fewer placements")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result: dict[str, object] = {"oracle": oracle_table(50 if args.quick else 1000), "small_fleets": small_fleets()}
    if not args.quick:
        result["simulated"] = [simulated(["sim07"]), simulated(["sim03", "sim12"])]
    if not args.json:
        for row in result["oracle"]:  # type: ignore[attr-defined]
            print(row)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
