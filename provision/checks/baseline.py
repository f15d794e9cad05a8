"""A node's figures against what the same hardware measured before: the fleet's baseline, as pure functions.

A delivery is judged today against the catalogue and against its own node-mates. Neither sees a GPU a few percent
slow that the node-mate band lets through, nor a whole delivery slower than the last (a firmware or BIOS setting
shared by every node). Fleets compare with their own history (SuperBench flags a node more than 5% below its fleet
baseline): each figure the burn-in measures on an admitted node is kept per hardware profile, and a new node is held
against that distribution.

Which figures, and where each is judged:

- ``matmul_ratio``: a GPU's matmul throughput over the median of its node-mates'. Whatever slows the whole machine
  (another job on a shared CPU, a busy CI box, the simulator's cores) slows its node-mates alike and cancels, so it
  is judged on any device: a healthy fleet sits within a percent of 1, and a GPU 8% slow, inside the node-mate band
  of a CPU run, stands out against it.
- ``matmul_tflops``, ``memory_gbps``, ``intranode_busbw_gbps``: absolute figures, judged on GPUs only (a CPU worker's
  figures move with the machine's load, as the catalogue's limits are judged on GPUs only); a whole delivery below
  them is the systemic finding (:func:`delivery_below`).
- the collectives' busbw per (op, size) and the training's step time are kept and shown, not judged per node here:
  the collectives and training stages judge them against the fleet in the same launch.

The floor of a figure is the baseline's median less the spec's margin, or less four robust standard deviations of
the baseline (1.4826 x MAD) where its own spread is wider than the margin: a figure the baseline itself scatters
over is not held to a line tighter than its scatter. Below ``min_samples`` samples a figure has no baseline yet.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from provision.checks.outcome import CheckResult, Outcome

#: How many robust standard deviations below its median a baseline's own scatter reaches.
SPREAD_Z = 4.0


@dataclass(frozen=True)
class Figure:
    """One quantity the burn-in measures: its unit, whether more is better, and whether it is judged on a CPU."""

    name: str
    stage: str
    unit: str
    higher_is_better: bool = True
    judged_on_cpu: bool = False
    judged: bool = True

    def judged_on(self, on_gpu: bool) -> bool:
        """Whether an item is held against its baseline when measured on a GPU (or on CPU workers)."""
        return self.judged and (on_gpu or self.judged_on_cpu)

    def falls_below(self, value: float, floor: float) -> bool:
        """Worse than ``floor``: under it where more is better, over it where less is."""
        return value < floor if self.higher_is_better else value > floor


FIGURES: dict[str, Figure] = {figure.name: figure for figure in (
    Figure("matmul_ratio", "node", "x mates", judged_on_cpu=True),
    Figure("matmul_tflops", "node", "TFLOPS"),
    Figure("memory_gbps", "node", "GB/s"),
    Figure("intranode_busbw_gbps", "node", "GB/s"),
)}


def figure_of(name: str) -> Figure:
    """A figure by name; the per-(op, size) collectives and the step time are named by their stage's rows."""
    if name in FIGURES:
        return FIGURES[name]
    if name.startswith("busbw_gbps."):
        return Figure(name, "collectives", "GB/s", judged=False)
    if name == "step_s":
        return Figure(name, "training", "s", higher_is_better=False, judged=False)
    raise KeyError(name)


#: A node's figures: figure name -> (what was measured, e.g. "GPU 3", and the value) for each item.
NodeFigures = Mapping[str, Sequence[tuple[str, float]]]


@dataclass(frozen=True)
class FigureBaseline:
    """One figure's distribution over the admitted nodes of earlier campaigns."""

    figure: str
    values: tuple[float, ...]
    campaigns: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def robust_sd(self) -> float:
        median = self.median
        return 1.4826 * statistics.median(abs(value - median) for value in self.values)

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.values)
        return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]

    def floor(self, margin: float) -> float:
        """The worst value a healthy item may show: the margin, or the baseline's own scatter where it is wider."""
        median = self.median
        if figure_of(self.figure).higher_is_better:
            return min(median * (1 - margin), median - SPREAD_Z * self.robust_sd)
        return max(median * (1 + margin), median + SPREAD_Z * self.robust_sd)

    def summary(self) -> dict[str, float | int | list[str]]:
        return {"count": self.count, "median": self.median, "robust_sd": self.robust_sd,
                "p05": self.percentile(0.05), "p95": self.percentile(0.95), "min": min(self.values),
                "max": max(self.values), "campaigns": list(self.campaigns)}


@dataclass(frozen=True)
class Baseline:
    """Every figure's baseline for one hardware profile."""

    profile: str
    figures: dict[str, FigureBaseline]

    @classmethod
    def of(cls, profile: str, samples: Iterable[tuple[str, float, str]]) -> Baseline:
        """From ``(figure, value, campaign)`` samples."""
        values: dict[str, list[float]] = {}
        campaigns: dict[str, dict[str, None]] = {}
        for figure, value, campaign in samples:
            values.setdefault(figure, []).append(float(value))
            campaigns.setdefault(figure, {})[campaign] = None
        return cls(profile, {figure: FigureBaseline(figure, tuple(found), tuple(campaigns[figure]))
                             for figure, found in sorted(values.items())})


def _describe(figure: Figure, value: float, known: FigureBaseline, floor: float) -> str:
    unit = "" if figure.unit.startswith("x") else f" {figure.unit}"
    return (f"{value:.4g}{unit} against the baseline's median {known.median:.4g} (floor {floor:.4g}, "
            f"{known.count} samples of campaign{'s' if len(known.campaigns) > 1 else ''} {', '.join(known.campaigns)})")


def judge_node_figures(figures: NodeFigures, baseline: Baseline | None, *, margin: float, min_samples: int,
                       on_gpu: bool) -> CheckResult:
    """The ``baseline`` check: every item of every judged figure at or above its floor.

    No baseline for the profile, or too few samples of a figure, is said and judges nothing (``silenced``): the
    node is still judged by every other check, and the first campaign of a profile is what builds its baseline."""
    judged, short, below, evidence = [], [], [], []
    for name, items in figures.items():
        figure = figure_of(name)
        if not figure.judged_on(on_gpu) or not items:
            continue
        known = baseline.figures.get(name) if baseline is not None else None
        if known is None or known.count < min_samples:
            short.append(f"{name} ({known.count if known else 0} of {min_samples} samples)")
            continue
        judged.append(name)
        floor = known.floor(margin)
        for label, value in items:
            line = f"{label}: {name} {_describe(figure, value, known, floor)}"
            evidence.append(line)
            if figure.falls_below(value, floor):
                below.append(line)
    if below:
        return CheckResult("baseline", Outcome.FAILED, below[0] + (f" (+{len(below) - 1} more)" if len(below) > 1
                                                                   else ""),
                           "compare with the node's earlier figures (`provision history`); check that GPU's clocks, "
                           "power limit and throttle reasons under load; reseat or RMA it if it repeats",
                           below + evidence)
    if not judged:
        profile = baseline.profile if baseline is not None else "this hardware profile"
        return CheckResult("baseline", Outcome.SILENCED, f"no baseline yet for {profile}: "
                           + (", ".join(short) if short else "no figure judged on this device"), "", evidence)
    return CheckResult("baseline", Outcome.OK, f"{', '.join(judged)} within {margin:.0%} of the baseline"
                       + (f"; no baseline yet for {', '.join(short)}" if short else ""), "", evidence)


def delivery_below(figures: Iterable[NodeFigures], baseline: Baseline | None, *, margin: float, min_samples: int,
                   on_gpu: bool) -> list[str]:
    """Figures whose median over the whole delivery is more than the margin below the baseline's median.

    One slow node moves a delivery's median nothing; every node slow alike moves it all the way. That is a setting
    the delivery shares (firmware, BIOS, a power cap, a driver), reported as systemic rather than as every node's
    own fault. Absolute figures only (a ratio to node-mates cannot move for a whole delivery), on GPUs only."""
    if baseline is None or not on_gpu:
        return []
    pooled: dict[str, list[float]] = {}
    for node in figures:
        for name, items in node.items():
            pooled.setdefault(name, []).extend(value for _label, value in items)
    lines = []
    for name, values in sorted(pooled.items()):
        figure = figure_of(name)
        known = baseline.figures.get(name)
        if not figure.judged or figure.judged_on_cpu or known is None or known.count < min_samples or not values:
            continue
        median = statistics.median(values)
        limit = known.median * (1 - margin) if figure.higher_is_better else known.median * (1 + margin)
        if figure.falls_below(median, limit):
            change = median / known.median - 1
            lines.append(f"{name}: the delivery's median {median:.4g} {figure.unit} is {change:+.1%} from the "
                         f"baseline's {known.median:.4g} ({known.count} samples of "
                         f"{', '.join(known.campaigns)})")
    return lines


def node_figures(records: Sequence[Mapping[str, object]]) -> dict[str, list[tuple[str, float]]]:
    """The node stage's figures from one node's worker records (``fabric_tests/node_test.py``)."""
    ordered = sorted(records, key=lambda record: int(str(record["local_rank"])))
    if not ordered:
        return {}
    figures: dict[str, list[tuple[str, float]]] = {"matmul_ratio": [], "matmul_tflops": [], "memory_gbps": []}
    tflops = [float(str(record["tflops"])) for record in ordered]
    for index, record in enumerate(ordered):
        label = f"GPU {record['local_rank']}"
        mates = tflops[:index] + tflops[index + 1:]
        if mates and statistics.median(mates) > 0:
            figures["matmul_ratio"].append((label, round(tflops[index] / statistics.median(mates), 6)))
        figures["matmul_tflops"].append((label, tflops[index]))
        figures["memory_gbps"].append((label, float(str(record["memory_gbps"]))))
    figures["intranode_busbw_gbps"] = [("node", min(float(str(record["allreduce_busbw_gbps"])) for record in ordered))]
    return {name: items for name, items in figures.items() if items}
