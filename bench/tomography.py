"""Link tomography on the 4,096-GPU design: find 1-3 bad cables among 12,288 from end-to-end tests alone.

Each scenario (seeded) breaks 1-3 cables drawn uniformly from every tier; half of them degraded (a
test crossing one always comes out slow), half flapping (a test crossing one fails only when a flap
lands in it, here 90% of the time). Every outcome is then flipped with probability 2% (measurement
noise: a healthy pair sometimes measures slow, a bad one sometimes passes). The adaptive loop starts
from nothing, proposes tests (sets of concurrent pair flows), sees only pass/fail,
and stops when it is 99% sure no bad cable is left. Reported: recall and precision of the cables it
names, and the tests it used against log2 C(12288, k), the fewest yes/no tests that could do it without
noise; and against the same bits divided by the capacity of the noisy test channel (Fano: no adaptive
scheme asks fewer on average), which is what the noise makes the fewest.

Three routings side by side (``--routing``): the fabric and the tomography both on D-mod-K; both on the
subnet manager's own tables (the simulator's: LIDs by GUID, min-hop); and the fabric on those tables while the
tomography assumes D-mod-K, which is what naming cables from the design's routes costs on a real fabric.

    python -m bench.tomography [--quick] [--json] [--scenarios N] [--routing dmodk|tables|assumed|all]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import time

from bench.fabrics import reference_fabric
from provision.sim import subnet_manager
from topology.routes import Router
from topology.smroutes import TableRouter
from topology.tomography import Localizer, channel_capacity, information_bound, localize

NOISE = 0.02
FLAP_CAUGHT = 0.9


def scenario(router: Router, seed: int, truth: Router | None = None) -> dict[str, object]:
    """One scenario; ``truth`` routes the flows as the fabric does (default: as ``router`` assumes)."""
    rng = random.Random(seed)
    count = rng.randint(1, 3)
    bad = set(rng.sample(range(len(router.cables)), count))
    flapping = {cable for cable in bad if rng.random() < 0.5}

    def run(test) -> bool:
        crossed = (test.cables if truth is None else truth.cables_of(test.flows)) & bad
        failed = bool(crossed - flapping) or any(rng.random() < FLAP_CAUGHT for _ in crossed & flapping)
        return (not failed) if rng.random() < NOISE else failed

    localizer = Localizer(router, seed=seed)
    started = time.perf_counter()
    used = localize(localizer, run)
    named = set(localizer.found)
    bound = information_bound(len(router.cables), count)
    # a test over a degraded cable fails but for the noise; over a flapping one, only if a flap lands in it. With
    # a degraded cable among the bad ones the better channel is the honest (lower) bound.
    missed = NOISE if len(flapping) < count else (1 - FLAP_CAUGHT) * (1 - NOISE) + FLAP_CAUGHT * NOISE
    noisy_bound = bound / channel_capacity(NOISE, missed)
    return {"seed": seed, "bad": count, "flapping": len(flapping), "tests": used, "bound": round(bound, 2),
            "noisy_bound": round(noisy_bound, 2),
            "ratio": round(used / bound, 3), "hits": len(named & bad), "named": len(named),
            "seconds": round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="12 scenarios instead of 200")
    parser.add_argument("--scenarios", type=int)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--routing", choices=(*ROUTINGS, "all"), default="all",
                        help="which routes the fabric takes and the tomography assumes (default: all three)")
    args = parser.parse_args()
    count = args.scenarios or (12 if args.quick else 200)
    fabric = reference_fabric(4096)
    summaries = []
    for routing in ROUTINGS if args.routing == "all" else (args.routing,):
        router, truth = routers(fabric, routing)
        summaries.append(summarise(routing, [scenario(router, seed, truth) for seed in range(count)], router,
                                   sys.stderr if args.json else sys.stdout))
    if args.json:
        print(json.dumps({"benchmark": "tomography", "scenarios": count, "noise": NOISE, "flap_caught": FLAP_CAUGHT,
                          "routings": summaries}))


#: dmodk: the fabric routes by D-mod-K and the tomography assumes it (the SM's fat-tree engine with LIDs in the
#: design's order); tables: the fabric routes by its SM's own tables (LIDs by GUID, min-hop) and the tomography
#: reads them; assumed: the fabric routes by those tables but the tomography assumes D-mod-K (what it did before
#: it read the tables).
ROUTINGS = ("dmodk", "tables", "assumed")


def routers(fabric, routing: str) -> tuple[Router, Router | None]:
    """(what the tomography routes by, how the fabric really routes: None when the same)."""
    if routing == "dmodk":
        return Router(fabric), None
    manager = subnet_manager.program(fabric, lambda node: hashlib.sha256(node.encode()).hexdigest()[:16])
    tables = TableRouter(fabric, subnet_manager.by_design_names(fabric, manager))
    return (tables, None) if routing == "tables" else (Router(fabric), tables)


def summarise(routing: str, rows: list[dict[str, object]], router: Router, out) -> dict[str, object]:
    count = len(rows)
    bad = sum(row["bad"] for row in rows)
    named = sum(row["named"] for row in rows)
    hits = sum(row["hits"] for row in rows)
    ratios = sorted(row["ratio"] for row in rows)
    summary = {
        "routing": routing, "scenarios": count, "cables": len(router.cables),
        "recall": round(hits / bad, 4), "precision": round(hits / named, 4) if named else 0.0,
        "exact_scenarios": sum(1 for row in rows if row["hits"] == row["bad"] == row["named"]),
        "tests_over_bound_total": round(sum(row["tests"] for row in rows) / sum(row["bound"] for row in rows), 3),
        "tests_over_noisy_bound_total": round(sum(row["tests"] for row in rows)
                                              / sum(row["noisy_bound"] for row in rows), 3),
        "tests_over_bound_median": statistics.median(ratios),
        "tests_over_bound_p90": ratios[int(0.9 * (len(ratios) - 1))],
        "tests_by_bad": {k: round(statistics.mean(row["tests"] for row in rows if row["bad"] == k), 1)
                         for k in (1, 2, 3) if any(row["bad"] == k for row in rows)},
        "seconds_per_scenario": round(statistics.mean(row["seconds"] for row in rows), 2),
    }
    print(f"{routing}: {count} scenarios on {len(router.cables):,} cables: recall {summary['recall']}, precision "
          f"{summary['precision']}, tests/bound total {summary['tests_over_bound_total']} (median "
          f"{summary['tests_over_bound_median']}, p90 {summary['tests_over_bound_p90']}; over the noisy-channel bound "
          f"{summary['tests_over_noisy_bound_total']}), tests by bad-cable count "
          f"{summary['tests_by_bad']}", file=out)
    return summary


if __name__ == "__main__":
    main()
