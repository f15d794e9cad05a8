"""Is our all_reduce busbw right? Ours against an independent minimal reference, same run, same processes.

A simulated cluster is brought up; one launch runs ``fabric_tests.busbw_reference`` on every node: in each
repeat and at each size, our measurement (``fabric_tests.collectives.measure``, judged by the controller's
``bus_bandwidth`` exactly as the collectives stage does) and then the reference (plain blocking calls timed the
nccl-tests way, busbw computed here from nccl-tests' formula). The figure is ours / reference − 1 per size; the
target is within ±3%. Each repeat pairs ours with the reference run right after it; the figure is the median of
the paired ratios, so a shared machine's drift cancels instead of being averaged in.

Run: python -m bench.busbw_accuracy [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from bench.simulated import example, provision_cli
from provision.burnin.launch import LaunchResult, NodeRun, free_port, launch
from provision.burnin.records import bus_bandwidth
from provision.pipeline import default_state_dir
from provision.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.03


def _cluster(directory: Path, hosts: int) -> Path:
    data = example()
    data["nodes"]["groups"][0]["hosts"] = f"sim[01-{hosts:02d}]"
    data["simulation"]["faults"] = []
    spec = directory / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    up = provision_cli("apply", str(spec), "--phases", "simulate", cwd=directory)
    if up.returncode != 0:
        raise SystemExit(f"bringing up the simulated cluster failed: {up.stderr[-2000:]}")
    return spec


def measure(quick: bool) -> dict[str, object]:
    sizes = [16 << 20] if quick else [4 << 20, 16 << 20, 64 << 20]
    hosts = 2  # 2 hosts x 2 ranks: four processes on this 2-core machine; more would measure the scheduler
    params = {"sizes": sizes, "repeats": 7 if quick else 15, "warmup": 3, "iters": 20, "timeout_s": 120}
    with tempfile.TemporaryDirectory(prefix="busbw-") as name:
        workdir = Path(name)
        loaded = load_spec(_cluster(workdir, hosts))
        nproc = loaded.spec.burnin.ranks_per_node or 1
        state_dir = default_state_dir(loaded.path, loaded.spec.cluster.name)
        result = launch(loaded, state_dir, list(loaded.nodes), test="busbw_reference", nproc=nproc, params=params,
                        deadline_s=600, port=free_port())
    failures = [run.stderr_tail(5) for run in result.nodes if run.command is None or not run.command.ok]
    if failures:
        raise SystemExit(f"the measurement did not finish: {failures}")
    world = hosts * nproc
    rows = []
    for nbytes in sorted({record["bytes"] for run in result.nodes for record in run.of("reference")}):
        ratios, ours_figures, reference_figures = [], [], []
        for repeat in range(params["repeats"]):
            # ours: this repeat's records through the collectives stage's own computation
            view = LaunchResult(result.test, [NodeRun(run.node, run.node_rank, run.command, [
                record for record in run.records if record.get("type") == "measurement"
                and record["repeat"] == repeat and record["bytes"] == nbytes]) for run in result.nodes], nproc)
            ours = bus_bandwidth(view)[0]["busbw_gbps"]
            reference = next(record for run in result.nodes for record in run.of("reference")
                             if record["repeat"] == repeat and record["bytes"] == nbytes)
            # the reference: nccl-tests' formula, computed here
            reference_busbw = nbytes / (reference["time_us"] / 1e6) / 1e9 * 2 * (world - 1) / world
            ours_figures.append(ours)
            reference_figures.append(reference_busbw)
            ratios.append(ours / reference_busbw)
        deviation = statistics.median(ratios) - 1  # paired: ours and the reference ran back to back
        rows.append({"bytes": nbytes, "ours_busbw_gbps": round(statistics.median(ours_figures), 4),
                     "reference_busbw_gbps": round(statistics.median(reference_figures), 4),
                     "deviation": round(deviation, 4), "within_target": abs(deviation) <= TARGET})
    return {"hosts": hosts, "ranks": world, "backend": "gloo (CPU)", "repeats": params["repeats"],
            "iters": params["iters"], "sizes": rows, "target": TARGET,
            "max_abs_deviation": max(abs(row["deviation"]) for row in rows),
            "all_within_target": all(row["within_target"] for row in rows)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.busbw_accuracy")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.quick)
    if not args.json:
        for row in result["sizes"]:  # type: ignore[attr-defined]
            print(row)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
