"""Right verdicts, run after run: the example cluster with its faults, over several simulation seeds.

The example (`examples/sim-cluster.yaml`) injects one fault per stage into its own node. Each run materialises the
cluster with a different simulation seed, provisions it (the faults provisioning fixes are fixed there) and burns
it in through every stage; each run also draws its own burn-in seed from its run id. A run is right when the
quarantined nodes are exactly the injected ones, each at the stage and check its fault's catalogue entry names
(`provision/spec/faults.py`), with no burn-in stopped as systemic: no healthy node lost, no faulty node admitted,
no fault blamed on the wrong check. `--quick` runs twice; `--keep-failed DIR` keeps the evidence of wrong runs.

Run: python -m bench.faulty_runs [--quick] [--runs N] [--first-seed S] --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.simulated import example, provision_then_burn_in, write_spec
from provision.spec.faults import CATALOG


def expected(data: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """node -> (stage, check) its fault must be quarantined at: every node or rank fault but those provisioning
    acts on (a playbook fixes them, or the node is quarantined in provisioning, which this bench does not take)."""
    found = {}
    for fault in data["simulation"]["faults"]:
        kind = CATALOG[fault["kind"]]
        if kind.layer in ("node", "rank") and kind.stage != "provision":
            found[fault["node"]] = (kind.stage, kind.check)
    return found


def one_run(seed: int, keep_failed: Path | None) -> dict[str, Any]:
    data = example()
    data["simulation"] = {**data["simulation"], "seed": seed}
    wanted = expected(data)
    with tempfile.TemporaryDirectory(prefix="faulty-run-") as name:
        payload, wall, exit_code = provision_then_burn_in(write_spec(Path(name), data))
        got = {row["node"]: (row.get("stage"), row.get("check")) for row in payload["nodes"]
               if row["state"] == "quarantined"}
        not_admitted = {row["node"]: row["state"] for row in payload["nodes"]
                        if row["state"] not in ("admitted", "quarantined")}
        wrong = {
            "healthy_quarantined": {node: got[node] for node in got if node not in wanted},
            "faulty_not_quarantined": {node: wanted[node] for node in wanted if node not in got},
            "wrong_stage_or_check": {node: {"expected": wanted[node], "got": got[node]} for node in wanted
                                     if node in got and got[node] != wanted[node]},
            "left_unjudged": not_admitted,
        }
        right = not any(wrong.values()) and not payload.get("stopped")
        kept = None
        if not right and keep_failed is not None:
            kept = keep_failed / f"seed-{seed}"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(payload["run_dir"], kept)
    return {"seed": seed, "hosts": len(payload["nodes"]), "wall_seconds": round(wall, 1), "exit_code": exit_code,
            "right": right, "stopped": payload.get("stopped"), "injected": len(wanted),
            **{key: value for key, value in wrong.items() if value}, "kept": str(kept) if kept else None}


def measure(runs: int, keep_failed: Path | None = None, first_seed: int = 1) -> dict[str, Any]:
    results = []
    for seed in range(first_seed, first_seed + runs):
        results.append(one_run(seed, keep_failed))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # progress: a run takes about five minutes
    walls = [run["wall_seconds"] for run in results]
    return {"runs": runs, "seeds": [run["seed"] for run in results], "hosts": results[0]["hosts"] if results else 0,
            "injected": results[0]["injected"] if results else 0,
            "runs_right": sum(1 for run in results if run["right"]),
            "healthy_quarantined": sum(len(run.get("healthy_quarantined", {})) for run in results),
            "faulty_not_quarantined": sum(len(run.get("faulty_not_quarantined", {})) for run in results),
            "wrong_stage_or_check": sum(len(run.get("wrong_stage_or_check", {})) for run in results),
            "runs_stopped": sum(1 for run in results if run["stopped"]),
            "wall_seconds_min": min(walls, default=0.0), "wall_seconds_max": max(walls, default=0.0),
            "details": [run for run in results if not run["right"]]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.faulty_runs")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None, help="seeded runs (10; 2 with --quick)")
    parser.add_argument("--first-seed", type=int, default=1, help="seeds run from here upwards")
    parser.add_argument("--keep-failed", type=Path, metavar="DIR",
                        help="copy the run directory of every wrong run here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (2 if args.quick else 10)
    result = measure(runs, args.keep_failed, args.first_seed)
    if not args.json:
        print(f"{result['runs_right']} of {result['runs']} runs quarantined exactly the {result['injected']} "
              "injected nodes at their stage and check")
    print(json.dumps(result))
    return 0 if result["runs_right"] == result["runs"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
