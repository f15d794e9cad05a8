"""The fleet's baseline in the state store: every figure the admitted nodes of each campaign measured, per hardware
profile; the node stage's judgement against it, and the file a site carries its baseline in to a new cluster.

A campaign adds its admitted nodes' figures when it ends (a quarantined node's figures are nobody's baseline). A
baseline is used only for the same hardware: the profile's name *and* what it is (GPU model and count, rails),
so a profile renamed or re-specified does not inherit figures measured on other hardware. The file's format is
documented in docs/baselines.md and versioned: a file of a newer version is refused, not half read.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provision.checks import baseline
from provision.checks.outcome import CheckResult
from provision.errors import Refusal
from provision.run.context import mutating_run
from provision.spec import LoadedSpec
from provision.spec.model import HardwareProfile
from provision.spec.semantics import ResolvedNode
from provision.state import StateStore
from provision.state.store import BaselineSample
from provision.state.views import ReadStore

FORMAT = "provision-baseline"
VERSION = 1


class BaselineFileError(Refusal, ValueError):
    """A baseline file that cannot be imported, with where it is wrong."""


def hardware_of(profile: HardwareProfile, measured_on: str) -> str:
    """What a profile is, in the words a baseline is matched by; figures of CPU workers (a CPU build of torch: the
    simulator, CI) are a baseline of their own, never mixed with a GPU's."""
    return (f"{profile.gpu.model} x{profile.gpu.count}, {len(profile.rails)} rails"
            + (", CPU workers" if measured_on == "cpu" else ""))


def baseline_for(store: ReadStore, loaded: LoadedSpec, profile: str, *, measured_on: str,
                 exclude: Collection[str] = ()) -> baseline.Baseline | None:
    """The profile's baseline on the same hardware, the figures of the campaigns being judged (``exclude``) left
    out."""
    hardware = hardware_of(loaded.spec.hardware[profile], measured_on)
    samples = [sample for sample in store.baseline_samples(profile)
               if sample.hardware == hardware and sample.campaign not in exclude]
    if not samples:
        return None
    return baseline.Baseline.of(profile, ((sample.figure, sample.value, sample.campaign) for sample in samples))


class Judge:
    """The node stage's baseline check for one campaign: each profile's baseline read once."""

    def __init__(self, store: StateStore, loaded: LoadedSpec, campaign: str) -> None:
        self.store, self.loaded, self.campaign = store, loaded, campaign
        self.settings = loaded.spec.burnin.baseline
        self._baselines: dict[tuple[str, str], baseline.Baseline | None] = {}

    def of(self, profile: str, measured_on: str) -> baseline.Baseline | None:
        if (profile, measured_on) not in self._baselines:
            self._baselines[profile, measured_on] = baseline_for(self.store, self.loaded, profile,
                                                                 measured_on=measured_on,
                                                                 exclude=(self.campaign,))
        return self._baselines[profile, measured_on]

    def __call__(self, node: ResolvedNode, figures: baseline.NodeFigures, on_gpu: bool) -> CheckResult:
        known = self.of(node.hardware, "gpu" if on_gpu else "cpu")
        return baseline.judge_node_figures(figures, known, margin=self.settings.margin,
                                           min_samples=self.settings.min_samples, on_gpu=on_gpu)

    def delivery(self, nodes: list[ResolvedNode], figures: Mapping[str, baseline.NodeFigures],
                 on_gpu: bool) -> list[str]:
        """Per profile, the figures on which the whole delivery sits below its baseline (the systemic finding)."""
        lines = []
        for profile in sorted({node.hardware for node in nodes}):
            mine = [figures[node.name] for node in nodes if node.hardware == profile and node.name in figures]
            if len(mine) < 2:  # one node below its baseline is that node's own finding
                continue
            lines += [f"{profile}: {line}" for line in baseline.delivery_below(
                mine, self.of(profile, "gpu" if on_gpu else "cpu"), margin=self.settings.margin,
                min_samples=self.settings.min_samples, on_gpu=on_gpu)]
        return lines


def keep_campaign(store: StateStore, loaded: LoadedSpec, campaign: str, admitted: Iterable[str]) -> int:
    """The admitted nodes' figures of every stage of the campaign, added to their profiles' baselines."""
    profiles = {node.name: node.hardware for node in loaded.nodes}
    figures = store.pass_figures(campaign)
    rows = []
    for node in admitted:
        profile = profiles.get(node)
        if profile is None:
            continue
        for measured_on, stage_figures in figures.get(node, {}).values():
            hardware = hardware_of(loaded.spec.hardware[profile], measured_on)
            for name, items in stage_figures.items():
                rows += [BaselineSample(profile, hardware, name, campaign, node, str(item), float(value))
                         for item, value in items]
    return store.add_baseline(rows, source="measured here")


# -- show -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileBaseline:
    profile: str
    hardware: str
    figures: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "hardware": self.hardware, "figures": self.figures}


def profiles(store: StateStore, profile: str | None = None) -> list[ProfileBaseline]:
    """Each (profile, hardware)'s figures: count, median, spread, percentiles and the campaigns behind them."""
    grouped: dict[tuple[str, str], list[BaselineSample]] = {}
    for sample in store.baseline_samples(profile):
        grouped.setdefault((sample.profile, sample.hardware), []).append(sample)
    shown = []
    for (name, hardware), samples in sorted(grouped.items()):
        known = baseline.Baseline.of(name, ((sample.figure, sample.value, sample.campaign) for sample in samples))
        shown.append(ProfileBaseline(name, hardware, {
            figure: {**found.summary(), "unit": baseline.figure_of(figure).unit,
                     "sources": sorted({sample.source for sample in samples if sample.figure == figure})}
            for figure, found in known.figures.items()}))
    return shown


# -- the file a baseline travels in ----------------------------------------------------------------------------


def export(store: StateStore, path: Path, *, cluster: str, profile: str | None = None) -> int:
    """Write every sample (or one profile's) to ``path``; how many. Samples, not summaries: the importing side
    computes the same medians and spreads, and gives the same verdicts."""
    samples = store.baseline_samples(profile)
    document = {"format": FORMAT, "version": VERSION, "cluster": cluster,
                "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "samples": [sample.as_dict() for sample in samples]}
    path.write_text(json.dumps(document, indent=1) + "\n")
    return len(samples)


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "profile": str, "hardware": str, "figure": str, "campaign": str, "node": str, "item": str,
    "value": (int, float), "source": str, "at": str}


def read_file(path: Path) -> tuple[str, list[BaselineSample]]:
    """The exporting cluster's name and the samples of a baseline file, or a located refusal."""
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise BaselineFileError(f"{path}: cannot read it ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise BaselineFileError(f"{path}:{error.lineno}:{error.colno}: not JSON ({error.msg})") from None
    except UnicodeDecodeError as error:  # a binary file: JSON is text
        raise BaselineFileError(f"{path}: not a baseline file (byte {error.start} is not UTF-8 text)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BaselineFileError(f"{path}: not a baseline file (\"format\" is not {FORMAT!r})")
    version = document.get("version")
    if not isinstance(version, int) or version > VERSION or version < 1:
        raise BaselineFileError(f"{path}: baseline format version {version!r}; this provision reads 1 to {VERSION}")
    rows = document.get("samples")
    if not isinstance(rows, list):
        raise BaselineFileError(f"{path}: \"samples\" must be a list")
    cluster = str(document.get("cluster", "another cluster"))
    samples = []
    for index, row in enumerate(rows):
        where = f"{path}: samples[{index}]"
        if not isinstance(row, dict):
            raise BaselineFileError(f"{where}: must be an object")
        for name, kind in _FIELDS.items():
            if not isinstance(row.get(name), kind) or isinstance(row.get(name), bool):
                raise BaselineFileError(f"{where}.{name}: missing or not a {getattr(kind, '__name__', 'number')}")
        try:
            baseline.figure_of(row["figure"])
        except KeyError:
            raise BaselineFileError(f"{where}.figure: unknown figure {row['figure']!r}") from None
        if row["value"] != row["value"] or abs(row["value"]) == float("inf"):
            raise BaselineFileError(f"{where}.value: not a finite number")
        samples.append(BaselineSample(**{name: row[name] for name in _FIELDS}))
    return cluster, samples


@dataclass(frozen=True)
class Imported:
    read: int
    added: int
    source: str
    run_id: str

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "added": self.added, "source": self.source, "run_id": self.run_id}


def import_file(directory: Path, path: Path, *, argv: list[str]) -> Imported:
    """Add a file's samples to this cluster's baseline, in one recorded run; all or none (the file is read and
    checked whole before the store is touched). A sample kept already is not counted twice."""
    cluster, samples = read_file(path)
    source = f"imported from {cluster} ({path.name})"
    with mutating_run(directory, "baseline import", argv) as run:
        samples = [BaselineSample(**{**sample.as_dict(), "source": sample.source if sample.source.startswith(
            "imported from") else source}) for sample in samples]  # where it came from, as far back as known
        added = run.store.add_baseline(samples, source=source)
        run.note("baseline_import", {"file": str(path), "cluster": cluster, "read": len(samples), "added": added})
    return Imported(len(samples), added, source, run.id)
