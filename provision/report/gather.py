"""What an acceptance report shows, read from the state store and the run records (nothing is measured here).

A report covers one run (``--run``), the runs of one burn-in campaign (``--campaign``: an interrupted burn-in
resumed over several runs), or by default the latest run that burned nodes in. Verdicts come from the store (the
same rows `status` and `history` read); figures come from the run directories' evidence files, each from the
newest covered run that has it.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provision.checks import baseline
from provision.checks.node_stage import on_gpu
from provision.errors import Refusal, UsageProblem
from provision.fleet import baselines, domains, history
from provision.fleet.capacity import capacity
from provision.forecast import components
from provision.network import cable_health
from provision.network.sources import design_fabric, places_of_cables
from provision.network.view import view_of_cluster
from provision.report import plots
from provision.spec import LoadedSpec
from provision.spec.thresholds import effective_thresholds, stage_limits
from provision.state import NodeState, StateStore
from provision.state.views import ReadStore
from topology import export

BURNIN_COMMANDS = ("apply", "burnin")


@dataclass
class ReportData:
    cluster: str
    spec_path: str
    spec_sha256: str
    generated_at: str
    runs: list[dict[str, Any]]
    campaign: str | None
    software: dict[str, Any]
    controller: dict[str, Any]
    device: str  # "cuda" or "cpu": whether the bandwidth thresholds were applied
    counts: dict[str, int]
    nodes: list[dict[str, Any]]
    cards: list[dict[str, Any]]
    thresholds: list[dict[str, Any]]
    busbw: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    training: list[dict[str, Any]] = field(default_factory=list)
    cable_findings: list[dict[str, Any]] = field(default_factory=list)
    link_health: dict[str, Any] = field(default_factory=dict)
    fabric_svg: str = ""
    capacity: str = ""
    acceptance: str = ""  # what the soak demonstrated against admission.acceptance, as the burn-in said it
    soak: list[dict[str, Any]] = field(default_factory=list)  # per node plotted: its thinned series and findings
    soak_note: str = ""  # which nodes' telemetry is plotted, of how many soaked
    forecasts: list[dict[str, Any]] = field(default_factory=list)  # components with a trend, flagged first
    domains: list[dict[str, Any]] = field(default_factory=list)  # each NVLink domain's trays and what remains
    baseline: list[dict[str, Any]] = field(default_factory=list)  # per profile and figure: the delivery against it
    returned: list[dict[str, Any]] = field(default_factory=list)  # nodes back from repair: before and after


#: Healthy nodes whose soak telemetry the report plots beside every node the soak failed (a reference, not a census:
#: every node's series stay in the state store, and thinned in the CSV beside the report).
SOAK_REFERENCE_NODES = 4


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def covered_runs(store: ReadStore, run_id: str | None, campaign: str | None) -> list[dict[str, Any]]:
    """The runs the report covers, oldest first."""
    every = store.runs(limit=100_000)
    if run_id is not None:
        chosen = [row for row in every if row["id"] == run_id]
        if not chosen:
            raise UsageProblem(f"--run {run_id}: no such run in the state store (see `provision runs`)")
        return chosen
    if campaign is not None:
        members = store.campaign_runs(campaign)
        if members is None:
            raise UsageProblem(f"--campaign {campaign}: no such burn-in campaign in the state store")
        return sorted((row for row in every if row["id"] in members), key=lambda row: row["started_at"])
    for row in every:
        if row["command"] in BURNIN_COMMANDS and any(Path(row["run_dir"]).glob("burnin-*.json")):
            return [row]
    raise UsageProblem("no run of this cluster has burned nodes in yet: run `provision apply` first")


def _newest(runs: list[dict[str, Any]], relative: str) -> Any:
    for row in reversed(runs):
        found = _load(Path(row["run_dir"]) / relative)
        if found is not None:
            return found
    return None


def acceptance_line(runs: list[dict[str, Any]]) -> str:
    """The newest covered run's ``burnin.acceptance`` statement."""
    for row in reversed(runs):
        try:
            lines = (Path(row["run_dir"]) / "events.jsonl").read_text().splitlines()
        except OSError:
            continue
        for line in reversed(lines):
            if '"burnin.acceptance"' in line:
                return str(json.loads(line).get("statement", ""))
    return ""


def _cards(store: ReadStore, nodes: list[Any]) -> list[dict[str, Any]]:
    """A card per quarantined node: the move that quarantined it, with its check, evidence and remediation."""
    cards = []
    for record in nodes:
        if not record.in_spec or record.state is not NodeState.QUARANTINED:
            continue
        move = next((row for row in reversed(store.history(record.name))
                     if row["to_state"] == NodeState.QUARANTINED.value), None)
        evidence = move["evidence"] if move else {}
        lines = [line for result in evidence.get("results", []) if result.get("outcome") != "ok"
                 for line in result.get("evidence", [])]
        cards.append({"node": record.name, "stage": record.stage or "", "reason": record.reason,
                      "check": evidence.get("check") or evidence.get("failed_task") or "",
                      "remediation": evidence.get("remediation", ""), "evidence": lines,
                      "since": record.updated_at, "run_id": move["run_id"] if move else None,
                      "by": "operator" if move and move["by_operator"] else "pipeline"})
    return cards


def soak_campaign(store: ReadStore, runs: list[dict[str, Any]], campaign: str | None) -> str | None:
    """The newest campaign among the covered runs whose soak recorded telemetry."""
    ids = [row["id"] for row in runs]
    candidates = {campaign} if campaign else set()
    candidates |= set(ids) | store.campaigns_of(ids)
    return next((name for name in store.soak_campaigns() if name in candidates), None)


def soak_rows(store: ReadStore, campaign: str | None, cards: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Every node the soak failed, then a few healthy ones, each with its series thinned for plotting and the
    parts (a GPU, a port) its findings name."""
    if campaign is None:
        return [], ""
    soaked = store.soak_nodes(campaign)
    failed = {card["node"]: card["evidence"] for card in cards if card["stage"] == "soak"}
    chosen = [node for node in soaked if node in failed]
    chosen += [node for node in soaked if node not in failed][:SOAK_REFERENCE_NODES]
    rows = []
    for node in chosen:
        series = store.soak_series(campaign, node)
        named = {line.split(":", 1)[0] for line in failed.get(node, []) if ":" in line}
        rows.append({"node": node, "failed": node in failed, "findings": failed.get(node, []),
                     "flagged": sorted(name for name in series if name.split("/", 1)[0] in named),
                     "series": {name: [(round(at / 3600, 4), value) for at, value in plots.thin(samples)]
                                for name, samples in series.items()}})
    note = (f"{len(chosen)} of {len(soaked)} soaked node(s) plotted: every node the soak failed"
            f"{f' and {len(chosen) - len(failed)} healthy for reference' if len(chosen) > len(failed) else ''}")
    return rows, note


def forecast_rows(store: ReadStore, window_h: float = 24.0) -> list[dict[str, Any]]:
    """Every component with a trend (flagged ones first), with the series it was made from, counted from its first
    sample and thinned for plotting: a soak's from its polls (hours into the soak), the watch's from the counter
    snapshots' changes over the link-health window ``window_h`` that ended at the forecast (hours into it)."""
    rows = []
    for row in sorted(store.forecasts(), key=lambda row: (not row["flagged"], row["node"], row["component"])):
        if row["hours"] is None:
            continue
        points: list[tuple[float, float]] = []
        source, _, campaign = row["source"].partition(":")
        if source == "soak":
            samples = store.soak_series(campaign, row["node"], [row["component"]]).get(row["component"], [])
            base = samples[0][1] if samples else 0.0
            points = [(round(at / 3600, 4), value - base) for at, value in plots.thin(samples)]
        elif source == "watch":
            points, origin = _watch_points(store, row["component"], row["at_h"], window_h)
            row = {**row, "at_h": row["at_h"] - origin}
        rows.append({**row, "points": points})
    return rows


def _watch_points(store: ReadStore, component: str, at_h: float, window_h: float) -> tuple[list[tuple[float, float]],
                                                                                          float]:
    """A watch forecast's series (``<node>/<port> <counter>``): the port's counted changes over the window that
    ended at ``at_h``, in hours from the window's first read, and that first read's hour."""
    where, _, counter = component.rpartition(" ")
    node, _, port = where.rpartition("/")
    end = at_h * 3600.0
    _, _, deltas = store.watch_signals_since(end - window_h * 3600.0)
    changes = [(delta.start, delta.end, float(delta.delta)) for delta in deltas
               if delta.port_node == node and str(delta.port) == port and delta.counter == counter
               and delta.end <= end]
    if not changes:
        return [], at_h
    samples = components.counted_series(node, component, changes, 0.0).samples  # hours, counted from the first
    origin = samples[0][0]
    return plots.thin([(round(hour - origin, 4), count) for hour, count in samples]), origin


def node_records(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node stage's per-GPU records of the newest run that has them; a node whose first run was repeated
    (``workers/repeat``) keeps the repeat's figures."""
    for row in reversed(runs):
        first = _load(Path(row["run_dir"]) / "workers" / "node.json")
        if first is None:
            continue
        repeat = _load(Path(row["run_dir"]) / "workers" / "repeat" / "node.json") or []
        repeated = {record.get("node") for record in repeat}
        return [record for record in first if record.get("node") not in repeated] + list(repeat)
    return []


def _figures_by_node(records: list[dict[str, Any]]) -> dict[str, baseline.NodeFigures]:
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if "tflops" in record:
            by_node[record["node"]].append(record)
    return {node: baseline.node_figures(members) for node, members in sorted(by_node.items())}


def baseline_rows(loaded: LoadedSpec, store: ReadStore, runs: list[dict[str, Any]],
                  records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per hardware profile and judged figure: the delivery's items against the baseline of earlier campaigns (the
    covered runs' own campaigns left out), with the band, the floor and whether each item fell below it."""
    figures = _figures_by_node(records)
    if not figures:
        return []
    measured_on = "gpu" if on_gpu(records) else "cpu"
    own = {row["id"] for row in runs}
    settings = loaded.spec.burnin.baseline
    profiles = {node.name: node.hardware for node in loaded.nodes}
    rows = []
    for profile in sorted({profiles[node] for node in figures if node in profiles}):
        hardware = baselines.hardware_of(loaded.spec.hardware[profile], measured_on)
        known = baselines.baseline_for(store, loaded, profile, measured_on=measured_on, exclude=own)
        for name, found in (known.figures if known is not None else {}).items():
            figure = baseline.figure_of(name)
            if not figure.judged_on(measured_on == "gpu"):
                continue
            floor = found.floor(settings.margin)
            points = [{"node": node, "item": item, "value": value, "below": figure.falls_below(value, floor)}
                      for node, items in figures.items() if profiles.get(node) == profile
                      for item, value in items.get(name, [])]
            rows.append({"profile": profile, "hardware": hardware, "figure": name, "unit": figure.unit,
                         "median": found.median, "floor": floor, "p05": found.percentile(0.05),
                         "p95": found.percentile(0.95), "count": found.count, "enough": found.count >=
                         settings.min_samples, "campaigns": list(found.campaigns), "points": points})
    return rows


def returned_rows(store: ReadStore, nodes: list[Any], runs: list[dict[str, Any]],
                  records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes back from repair that the covered runs burned in again: before and after."""
    own = {row["id"] for row in runs}
    figures = _figures_by_node(records)
    rows = []
    for record in nodes:
        last = history.last_return(store, record.name)
        if last is None or not any(move["run_id"] in own for move in last["after"]):
            continue
        rows.append(history.story(record.name, last, store, {name: list(items) for name, items in
                                                            figures.get(record.name, {}).items()}))
    return rows


def busbw_rows(collectives: Any) -> list[dict[str, Any]]:
    """nccl-tests style figures of the last collectives attempt that completed."""
    for attempt in reversed(collectives or []):
        if attempt.get("busbw"):
            return [{"scope": row["scope"], "op": row["op"], "bytes": row["bytes"], "ranks": row["ranks"],
                     "algbw_gbps": row["algbw_gbps"], "busbw_gbps": row["busbw_gbps"]} for row in attempt["busbw"]]
    return []


def gpu_rows(records: Any, limits: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Per GPU: matmul and device-memory figures, flagged below its node-mates' median x the peer fraction."""
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records or []:
        if "tflops" in record:
            by_node[record["node"]].append(record)
    rows = []
    for node, members in sorted(by_node.items()):
        median = statistics.median(record["tflops"] for record in members)
        fraction = limits.get(node, {}).get("matmul_peer_fraction", 0.95)
        for record in sorted(members, key=lambda item: item["local_rank"]):
            rows.append({"node": node, "gpu": record["local_rank"], "device": record.get("device", ""),
                         "dtype": record.get("dtype", ""), "tflops": record["tflops"],
                         "memory_gbps": record.get("memory_gbps"), "node_median_tflops": median,
                         "slow": record["tflops"] < fraction * median})
    return rows


def _rail(hca: str) -> str:
    return hca.split("/", 1)[1] if "/" in hca else hca


def pair_rows(results: Any) -> list[dict[str, Any]]:
    rows = []
    for test in (results or {}).get("tests", []):
        flows = test.get("flows") or []
        if not flows:
            continue
        source, target = flows[0]
        hosts = sorted({source.split("/")[0], target.split("/")[0]})
        rows.append({"hosts": " - ".join(hosts), "rail": _rail(source), "round": test.get("round", ""),
                     "flows": ["->".join(flow) for flow in flows], "gbps": test["gbps"],
                     "threshold_gbps": test.get("threshold_gbps"), "passed": bool(test.get("passed"))})
    return rows


def training_rows(records: Any) -> list[dict[str, Any]]:
    rows = []
    for record in records or []:
        for mode in ("ddp", "fsdp"):
            figures = record.get(mode)
            if isinstance(figures, dict) and "step_s_median" in figures:
                rows.append({"node": record["node"], "gpu": record["gpu"], "mode": mode,
                             "loss_first": figures.get("loss_first"), "loss_last": figures.get("loss_last"),
                             "step_s_median": figures["step_s_median"],
                             "step_time_spread": figures.get("step_time_spread"), "shape": figures.get("shape")})
    return rows


def link_health(loaded: LoadedSpec, state_dir: Path) -> dict[str, Any]:
    """The link-health suspects from the evidence the cluster has (the simulated fabric's, or none)."""
    try:
        _report, suspects = cable_health.findings(view_of_cluster(loaded), state_dir,
                                                  cable_health.FlapsRequest(last_burnin=True))
    except Refusal as error:
        return {"analysed": False, "note": str(error), "suspects": []}
    return {"analysed": True, "note": "", "suspects": suspects}


def _fabric_svg(loaded: LoadedSpec, cables: list[str]) -> str:
    if loaded.fabric is None:
        return ""
    design = design_fabric(loaded)
    boxes, bundles = places_of_cables(design, cables)
    title = f"{loaded.spec.cluster.name}: {len(cables)} suspect cable(s) marked"
    return export.draw_svg(design, title=title, problems=boxes, bundle_problems=bundles)


def gather(loaded: LoadedSpec, state_dir: Path, *, run_id: str | None = None,
           campaign: str | None = None) -> ReportData:
    store = StateStore.open_readonly(state_dir)
    if store is None:
        raise UsageProblem(f"no state store in {state_dir}: run `provision apply` first")
    with store:
        runs = covered_runs(store, run_id, campaign)
        nodes = store.nodes()
        in_spec = [record for record in nodes if record.in_spec]
        findings = []
        for row in runs:
            for cable in store.cables_found(row["id"]):
                detail: dict[str, Any] = next((item["detail"] for item in reversed(store.cable_history(cable))
                               if item["kind"] == "finding" and item["run_id"] == row["id"]), {})
                findings.append({"cable": cable, "run_id": row["id"], "confidence": detail.get("confidence"),
                                 "evidence": detail.get("evidence", [])})
        data = ReportData(
            cluster=loaded.spec.cluster.name, spec_path=str(loaded.path), spec_sha256=loaded.sha256,
            generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
            runs=[{key: row[key] for key in ("id", "command", "status", "exit_code", "started_at", "finished_at",
                                              "spec_sha256", "run_dir")} for row in runs],
            campaign=campaign, software=loaded.spec.software.model_dump(mode="json"),
            controller=(_load(Path(runs[-1]["run_dir"]) / "manifest.json") or {}).get("dependencies", {}),
            device="", counts=store.counts(),
            nodes=[{"node": record.name, "state": str(record.state), "stage": record.stage or "",
                    "reason": record.reason} for record in in_spec],
            cards=_cards(store, in_spec), thresholds=[], cable_findings=findings)
        data.soak, data.soak_note = soak_rows(store, soak_campaign(store, runs, campaign), data.cards)
        data.forecasts = forecast_rows(store, loaded.spec.fabric.link_health.window_hours)
        data.domains = [one.as_dict() for one in domains.standings(
            loaded, {record.name: record.state.value for record in nodes})]
        records = node_records(runs)
        data.baseline = baseline_rows(loaded, store, runs, records)
        data.returned = returned_rows(store, in_spec, runs, records)
    admitted = sum(1 for row in data.nodes if row["state"] == "admitted")
    data.capacity = capacity(len(data.nodes), admitted, loaded.spec.admission.spare_fraction).line()
    data.acceptance = acceptance_line(runs)
    limits = {node.name: stage_limits(loaded, node) for node in loaded.nodes}
    first = loaded.nodes[0]
    data.thresholds = [{"name": name, "value": value.value, "reason": value.reason} for name, value in
                       effective_thresholds(loaded.spec.hardware[first.hardware], loaded.spec.fabric,
                                            loaded.spec.burnin.thresholds).items()]
    data.busbw = busbw_rows(_newest(runs, "workers/collectives.json"))
    data.gpus = gpu_rows(records, limits)
    data.device = "cuda" if any(row["device"].startswith("cuda") for row in data.gpus) else (
        "cpu" if data.gpus else "")
    data.pairs = pair_rows(_newest(runs, "pairs-results.json"))
    data.training = training_rows(_newest(runs, "workers/training.json"))
    data.link_health = link_health(loaded, state_dir)
    marked = sorted({row["cable"] for row in data.cable_findings}
                    | {row["cable"] for row in data.link_health["suspects"]})
    data.fabric_svg = _fabric_svg(loaded, marked)
    return data
