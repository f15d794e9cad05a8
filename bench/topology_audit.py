"""Design generation + parsing a full as-built dump + the cabling audit, with 20 injected cabling faults.

Run: python -m bench.topology_audit [--quick] --json

Each size runs in its own process (peak RSS is that process's). Timed: the design from parameters, the parse
of the as-built ibnetdiscover dump, the cable-by-cable comparison, and each design rule on the as-built fabric.
Checked: every injected fault is reported and nothing else. Every rule runs at both sizes, the disjoint-path
rule exactly (pairs the per-plane bound settles need no flow; the rest get exact max flows).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time

from bench.fabrics import HOSTS_PER_SU, RAILS, reference_fabric, reference_hosts
from provision.network.sources import design_endpoint, design_links
from topology.audit import compare, discovered_links
from topology.bulk import collector_paused
from topology.design import FabricDimensions
from topology.fattree import HostRails, build_design
from topology.ibnetdiscover import parse
from topology.model import Cable, Fabric
from topology.rules import bisection, disjoint_paths, even_uplinks, no_leaf_to_leaf, non_blocking, rail_alignment
from topology.writer import write_ibnetdiscover


def inject(fabric: Fabric, rng: random.Random) -> set[frozenset]:
    """6 crossed pairs, 7 missing, 7 slow cables, spread over every tier; returns the cables they touch."""
    cables = sorted(fabric.cables(), key=lambda c: (c.a, c.b))
    touched: set[frozenset] = set()
    chosen = rng.sample(cables, 40)
    for index in range(6):
        first, second = chosen[2 * index], chosen[2 * index + 1]
        fabric.remove_cable(first)
        fabric.remove_cable(second)
        fabric.add_cable(Cable(first.a, second.b, first.rate, first.width))
        fabric.add_cable(Cable(second.a, first.b, second.rate, second.width))
        touched |= {first.ends, second.ends}
    for cable in chosen[12:19]:
        fabric.remove_cable(cable)
        touched.add(cable.ends)
    for cable in chosen[19:26]:
        fabric.remove_cable(cable)
        fabric.add_cable(Cable(cable.a, cable.b, "HDR", cable.width))
        touched.add(cable.ends)
    return touched


def measure(gpus: int) -> dict[str, object]:
    dims, names = reference_hosts(gpus)
    as_built = reference_fabric(gpus)
    touched = inject(as_built, random.Random(gpus))
    dump = write_ibnetdiscover(as_built, lambda node: f"{abs(hash(node)) & 0xFFFFFFFFFFFFFFFF:016x}")
    with collector_paused():  # as the product's audit runs (topology/bulk.py)
        return _timed(gpus, dims, names, as_built, touched, dump)


def _timed(gpus: int, dims: FabricDimensions, names: list[HostRails], as_built: Fabric, touched: set[frozenset],
           dump: str) -> dict[str, object]:
    hosts = gpus // 8
    timings: dict[str, float] = {}
    started = time.perf_counter()
    design = build_design(dims, names, HOSTS_PER_SU, RAILS)
    timings["design"] = time.perf_counter() - started
    step = time.perf_counter()
    discovery = parse(dump)
    timings["parse"] = time.perf_counter() - step
    step = time.perf_counter()
    findings = compare(design_links(design), discovered_links(discovery))
    timings["compare"] = time.perf_counter() - step
    rules = {"rail_alignment": rail_alignment, "no_leaf_to_leaf": no_leaf_to_leaf, "even_uplinks": even_uplinks,
             "non_blocking": non_blocking, "bisection": bisection,
             "disjoint_paths": lambda fabric: disjoint_paths(fabric, dims.leaf_uplinks)}
    violations: dict[str, int] = {}
    switches = design.graph.number_of_nodes() - hosts * 8
    for name, rule in rules.items():
        step = time.perf_counter()
        violations[name] = len(rule(as_built))
        timings[f"rule_{name}"] = time.perf_counter() - step
    total = time.perf_counter() - started

    expected = {frozenset(design_endpoint(as_built, *end) for end in ends) for ends in touched}
    reported = {frozenset(f.expected) for f in findings if f.expected} | {frozenset(f.actual) for f in findings
                                                                          if f.category == "extra"}
    crossed = {frozenset(f.actual) for f in findings if f.category == "miswired"}
    return {
        "gpus": gpus, "cables": design.graph.number_of_edges(), "switches": switches,
        "seconds_total": round(total, 3), "seconds": {k: round(v, 3) for k, v in timings.items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "findings": len(findings), "rule_violations": violations,
        "every_fault_reported": expected <= reported | crossed,
        "nothing_else": reported <= expected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="4,096 GPUs only")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)  # one measurement, in this process
    args = parser.parse_args()
    if args.size:
        print(json.dumps(measure(args.size)))
        return
    rows = []
    for gpus in ([4096] if args.quick else [4096, 32768, 65536]):
        result = subprocess.run([sys.executable, "-m", "bench.topology_audit", "--size", str(gpus)],
                                capture_output=True, text=True, check=True, timeout=1800)
        rows.append(json.loads(result.stdout.splitlines()[-1]))
    for row in rows:
        print(f"{row['gpus']:>6} GPUs, {row['cables']:,} cables: {row['seconds_total']} s total {row['seconds']}, "
              f"peak {row['peak_rss_mb']} MB, {row['findings']} findings, all faults reported: "
              f"{row['every_fault_reported']}, nothing else: {row['nothing_else']}",
              file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"benchmark": "topology_audit", "runs": rows}))


if __name__ == "__main__":
    main()
