"""False quarantines: a healthy simulated cluster burned in again and again must lose no node.

The example cluster (`examples/sim-cluster.yaml`) with every fault removed is materialised with a different
simulation seed per run, provisioned, and burned in through every stage the spec selects. Each run also draws
its own burn-in seed (from its run id), so pairings, ports and training data differ between runs. A node
quarantined in any run is a false quarantine: the bench lists it with its stage, check and reason, and exits
non-zero; so does a run that admits fewer than every node for any other reason (a burn-in stopped as systemic,
say). `--quick` runs twice on 4 hosts with 4 GPUs each; `--keep-failed DIR` keeps the evidence of bad runs.

Run: python -m bench.healthy_runs [--quick] [--runs N] [--first-seed S] --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.simulated import example, provision_then_burn_in, shrink_to_four_hosts, write_spec


def healthy_spec(directory: Path, seed: int, quick: bool) -> Path:
    data = example()
    data["simulation"] = {**data["simulation"], "seed": seed, "faults": []}  # the time scale kept: the soak in seconds
    return write_spec(directory, shrink_to_four_hosts(data) if quick else data)


def one_run(seed: int, quick: bool, keep_failed: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="healthy-run-") as name:
        payload, wall, exit_code = provision_then_burn_in(healthy_spec(Path(name), seed, quick))
        lost = [{"node": row["node"], "state": row["state"], "stage": row.get("stage"), "check": row.get("check"),
                 "reason": row["reason"]} for row in payload["nodes"] if row["state"] != "admitted"]
        kept = None
        if (lost or exit_code) and keep_failed is not None:  # the evidence outlives the temporary cluster
            kept = keep_failed / f"seed-{seed}"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(payload["run_dir"], kept)
    return {"seed": seed, "hosts": len(payload["nodes"]), "wall_seconds": round(wall, 1), "exit_code": exit_code,
            "stopped": payload.get("stopped"), "not_admitted": lost,
            "fabric_findings": payload.get("fabric_findings", []), "kept": str(kept) if kept else None}


def measure(runs: int, quick: bool, keep_failed: Path | None = None, first_seed: int = 1) -> dict[str, Any]:
    results = []
    for seed in range(first_seed, first_seed + runs):
        results.append(one_run(seed, quick, keep_failed))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # progress: a full run takes most of an hour
    walls = [run["wall_seconds"] for run in results]
    return {"runs": runs, "seeds": [run["seed"] for run in results], "hosts": results[0]["hosts"] if results else 0,
            "false_quarantines": sum(1 for run in results for row in run["not_admitted"]
                                     if row["state"] == "quarantined"),
            "runs_not_admitting_everyone": sum(1 for run in results if run["not_admitted"]),
            "runs_stopped": sum(1 for run in results if run["stopped"]),
            "fabric_findings": sum(len(run["fabric_findings"]) for run in results),
            "wall_seconds_min": min(walls, default=0.0), "wall_seconds_max": max(walls, default=0.0),
            "details": [run for run in results if run["not_admitted"] or run["fabric_findings"] or run["stopped"]]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.healthy_runs")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None, help="seeded runs (10; 2 with --quick)")
    parser.add_argument("--first-seed", type=int, default=1, help="seeds run from here upwards")
    parser.add_argument("--keep-failed", type=Path, metavar="DIR",
                        help="copy the run directory of every run that did not admit every node here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (2 if args.quick else 10)
    result = measure(runs, args.quick, args.keep_failed, args.first_seed)
    if not args.json:
        print(f"{result['runs']} healthy runs of {result['hosts']} hosts: {result['false_quarantines']} false "
              f"quarantines, {result['fabric_findings']} fabric findings")
    print(json.dumps(result))
    return 1 if result["runs_not_admitting_everyone"] or result["fabric_findings"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
