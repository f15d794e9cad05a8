"""The acceptance report: one self-contained HTML file the team and the vendor sign off, figures beside it.

``write_report`` gathers what the store and the run records hold (:mod:`provision.report.gather`), draws the plots
(:mod:`provision.report.plots`), renders ``templates/report.html.j2`` and writes, beside the HTML, every plotted
figure as CSV and the whole of what the page shows as JSON, so a number in the report can be checked by hand.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from provision.report import plots
from provision.report.gather import ReportData, gather
from provision.spec import LoadedSpec
from topology import hostlist

__all__ = ["ReportWritten", "render", "write_report"]

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("provision.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined,
    trim_blocks=True, lstrip_blocks=True)


@dataclass(frozen=True)
class ReportWritten:
    html: Path
    figures: list[Path]
    admitted: int
    quarantined: int


def _scope_name(scope: str) -> str:
    return "world" if scope == "all" else scope


def _threshold(data: ReportData, name: str) -> float | None:
    return next((row["value"] for row in data.thresholds if row["name"] == name), None)


def _plots(data: ReportData) -> dict[str, Any]:
    judged = data.device == "cuda"
    rail = _threshold(data, "rail_busbw_gbps") if judged else None
    busbw = []
    for op in sorted({row["op"] for row in data.busbw}):
        by_scope: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for row in data.busbw:
            if row["op"] == op:
                by_scope[_scope_name(row["scope"])].append((row["bytes"], row["busbw_gbps"]))
        series = [plots.Series(name, points) for name, points in sorted(by_scope.items(),
                                                                        key=lambda item: item[0] != "world")]
        busbw.append(plots.lines(f"{op}: bus bandwidth", series, y_label="GB/s", threshold=rail,
                                 threshold_label=f"{rail:g} GB/s" if rail else ""))
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in data.gpus:
        by_node[row["node"]].append(row)
    matmul_floor = _threshold(data, "matmul_tflops") if judged else None
    memory_floor = _threshold(data, "memory_bandwidth_gbps") if judged else None
    gpus = [
        plots.dots("matmul throughput per GPU", [(node, [plots.Dot(f"GPU {row['gpu']} ({row['dtype']})",
                                                                   row["tflops"], row["slow"]) for row in rows])
                                                 for node, rows in by_node.items()],
                   y_label="TFLOPS", threshold=matmul_floor,
                   threshold_label=f"{matmul_floor:g}" if matmul_floor else ""),
        plots.dots("device memory copy bandwidth per GPU",
                   [(node, [plots.Dot(f"GPU {row['gpu']}", row["memory_gbps"],
                                      memory_floor is not None and row["memory_gbps"] < memory_floor)
                            for row in rows if row["memory_gbps"] is not None]) for node, rows in by_node.items()],
                   y_label="GB/s", threshold=memory_floor,
                   threshold_label=f"{memory_floor:g}" if memory_floor else ""),
    ] if data.gpus else []
    cells: dict[tuple[str, str], tuple[float, bool]] = {}
    for row in data.pairs:
        key = (row["hosts"], row["rail"])
        value, flagged = cells.get(key, (row["gbps"], False))
        cells[key] = (min(value, row["gbps"]), flagged or not row["passed"])
    rails = sorted({row["rail"] for row in data.pairs}, key=lambda name: (len(name), name))
    pairs = plots.heatmap("slowest pair test per host pair and rail", sorted({row["hosts"] for row in data.pairs}),
                          rails, cells, unit="Gb/s")
    training_by_node: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in data.training:
        training_by_node[(row["mode"], row["node"])].append(row)
    training = []
    for mode in ("ddp", "fsdp"):
        groups = [(node, rows) for (kind, node), rows in sorted(training_by_node.items()) if kind == mode]
        if not groups:
            continue
        training.append(plots.dots(f"{mode.upper()}: median step time per GPU", [
            (node, [plots.Dot(f"GPU {row['gpu']} ({row['shape']})", row["step_s_median"] * 1000)
                    for row in rows]) for node, rows in groups], y_label="ms"))
        training.append(plots.dots(f"{mode.upper()}: loss after the last step per GPU", [
            (node, [plots.Dot(f"GPU {row['gpu']} (first {row['loss_first']})", row["loss_last"])
                    for row in rows if row["loss_last"] is not None]) for node, rows in groups], y_label="loss"))
    against = [plots.dots(
        f"{row['figure']} against the {row['profile']} baseline ({row['count']} samples)",
        [(node, [plots.Dot(point["item"], point["value"], point["below"]) for point in row["points"]
                 if point["node"] == node]) for node in dict.fromkeys(point["node"] for point in row["points"])],
        y_label=row["unit"], threshold=row["floor"], threshold_label=f"floor {row['floor']:.4g}",
        band=(row["p05"], row["p95"]), zoom=True) for row in data.baseline]
    forecasts = [plots.projection(f"{row['node']} {row['component']}: {row['why']}", row["points"], at_h=row["at_h"],
                                  count=row["count"], hours=row["hours"], low=row["low"], high=row["high"],
                                  threshold=row["threshold"], y_label="count") for row in data.forecasts
                 if row["points"]]
    return {"busbw": busbw, "gpus": gpus, "pairs": pairs, "training": training, "soak": _soak_plots(data),
            "baseline": against, "forecasts": forecasts}


#: What the report plots of each soaked node: (title, the series' quantity, y label, plotted as growth since the
#: soak's first poll).
SOAK_PLOTS = (("GPU temperature", "temperature_c", "°C", False), ("SM clock", "sm_clock_mhz", "MHz", False),
              ("board power", "power_w", "W", False), ("matmul per round of load", "tflops", "TFLOPS", False),
              ("InfiniBand error counters, growth", ("symbol_error", "link_downed", "port_rcv_errors"), "count", True))


def _soak_plots(data: ReportData) -> list[dict[str, Any]]:
    """Per plotted node, a timeline per quantity: its GPUs' (or ports') series, the ones its findings name in red."""
    nodes = []
    for row in data.soak:
        drawn = []
        for title, quantity, unit, growth in SOAK_PLOTS:
            wanted = quantity if isinstance(quantity, tuple) else (quantity,)
            series = []
            for name, points in sorted(row["series"].items(), key=lambda item: _part_order(item[0])):
                if name.split("/", 1)[-1] not in wanted or not points:
                    continue
                base = points[0][1] if growth else 0.0
                series.append(plots.Series(name if growth else name.split("/", 1)[0],
                                           [(at, value - base) for at, value in points]))
            if series:
                flagged = frozenset(name if growth else name.split("/", 1)[0] for name in row["flagged"])
                drawn.append(plots.timeline(f"{row['node']}: {title}", series, y_label=unit, flagged=flagged))
        nodes.append({"node": row["node"], "failed": row["failed"], "findings": row["findings"], "plots": drawn})
    return nodes


def _part_order(name: str) -> tuple[int, str]:
    part = name.split("/", 1)[0]
    return (int(part[3:]), name) if part.startswith("gpu") and part[3:].isdigit() else (10_000, name)


def _csv(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: ";".join(map(str, value)) if isinstance(value, list) else value
                         for key, value in row.items()})
    return buffer.getvalue()


def figure_files(data: ReportData, stem: str) -> dict[str, str]:
    """Every plotted figure as a file beside the report: name -> text."""
    files = {f"{stem}.busbw.csv": _csv(data.busbw), f"{stem}.gpus.csv": _csv(data.gpus),
             f"{stem}.pairs.csv": _csv(data.pairs), f"{stem}.training.csv": _csv(data.training),
             f"{stem}.baseline.csv": _csv([{"profile": row["profile"], "figure": row["figure"], **point,
                                            "baseline_median": row["median"], "floor": row["floor"]}
                                           for row in data.baseline for point in row["points"]]),
             f"{stem}.soak.csv": _csv([{"node": row["node"], "series": name, "hours": at, "value": value}
                                       for row in data.soak for name, points in sorted(row["series"].items())
                                       for at, value in points]),
             f"{stem}.cables.json": json.dumps({"located_by_burnin": data.cable_findings,
                                                "link_health": data.link_health}, indent=2, default=str)}
    files = {name: text for name, text in files.items() if text}
    payload = {key: value for key, value in dataclasses.asdict(data).items() if key != "fabric_svg"}
    files[f"{stem}.json"] = json.dumps(payload, indent=2, sort_keys=True, default=str)
    return files


def render(data: ReportData, figure_names: list[str]) -> str:
    admitted = [row["node"] for row in data.nodes if row["state"] == "admitted"]
    quarantined = [row["node"] for row in data.nodes if row["state"] == "quarantined"]
    software = sorted((name, json.dumps(value) if isinstance(value, dict) else value)
                      for name, value in data.software.items() if value is not None)
    note = ""
    if data.device == "cpu":
        note = ("Measured on the CPU backend (gloo, no GPU): bandwidth and throughput figures are shown but not "
                "judged against the GPU thresholds, which apply to CUDA runs only.")
    return _TEMPLATES.get_template("report.html.j2").render(
        data=data, plots=_plots(data), admitted_hosts=hostlist.compress(admitted) if admitted else "",
        quarantined_hosts=hostlist.compress(quarantined) if quarantined else "", software=software,
        threshold_note=note, slow_pairs=[row for row in data.pairs if not row["passed"]],
        peer_fraction=_threshold(data, "matmul_peer_fraction"), figure_files=figure_names)


def default_output(state_dir: Path, data: ReportData) -> Path:
    return state_dir / "reports" / f"{data.campaign or data.runs[-1]['id']}" / "report.html"


def write_report(loaded: LoadedSpec, state_dir: Path, *, run_id: str | None = None, campaign: str | None = None,
                 output: Path | None = None) -> ReportWritten:
    """Gather, render and write the report and its figures; return where they are."""
    data = gather(loaded, state_dir, run_id=run_id, campaign=campaign)
    html = output or default_output(state_dir, data)
    html.parent.mkdir(parents=True, exist_ok=True)
    files = figure_files(data, html.stem)
    written = []
    for name, text in files.items():
        path = html.parent / name
        path.write_text(text)
        written.append(path)
    temporary = html.with_name(html.name + ".partial")
    temporary.write_text(render(data, sorted(files)))
    temporary.replace(html)  # a reader never opens half a report
    return ReportWritten(html, written, data.counts.get("admitted", 0), data.counts.get("quarantined", 0))
