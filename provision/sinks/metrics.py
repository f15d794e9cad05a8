"""The cluster's state and figures as Prometheus metrics, in node_exporter's textfile-collector format.

Teams already watch their GPUs in Prometheus beside the DCGM exporter; this puts our verdicts and burn-in figures
next to them. Names follow Prometheus's conventions: a ``provision_`` prefix, base units in the name (seconds,
bytes per second, FLOP/s), gauges only, and label sets bounded by the cluster (node, GPU, rail, collective,
message size, state, check): never a free-text reason in a label, so a node's series does not multiply with every
new wording. The file is written whole and renamed into place, as the textfile collector asks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from provision.fleet import domains
from provision.fleet.capacity import capacity
from provision.report.gather import busbw_rows, gpu_rows, link_health, node_records, pair_rows
from provision.spec import LoadedSpec
from provision.state import NodeState
from provision.state.views import ReadStore

BURNIN_COMMANDS = ("apply", "burnin")
GIGA = 1e9


@dataclass
class Family:
    name: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: Any) -> None:
        self.samples.append(({key: str(item) for key, item in labels.items()}, float(value)))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value != value:  # NaN
        return "NaN"
    return repr(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)


def exposition(families: Iterable[Family]) -> str:
    """The text exposition format: HELP and TYPE once per family, then its samples."""
    lines = []
    for family in families:
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} gauge")
        for labels, value in family.samples:
            text = ",".join(f'{key}="{_escape(item)}"' for key, item in sorted(labels.items()))
            lines.append(f"{family.name}{{{text}}} {_number(value)}" if text else f"{family.name} {_number(value)}")
    return "\n".join(lines) + "\n"


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def families(loaded: LoadedSpec, store: ReadStore, state_dir: Path) -> list[Family]:
    """Every family the textfile carries: the nodes' states, the latest runs, the latest burn-in's figures, the
    suspect cables, the soak's latest poll and the watch's breaker."""
    cluster = loaded.spec.cluster.name
    runs = store.runs(limit=1000)
    suspects = Family("provision_cable_suspect_score", "Link-health score of each suspect cable, by class")
    for row in link_health(loaded, state_dir)["suspects"]:
        suspects.add(row["score"], cluster=cluster, cable=row["cable"], **{"class": row["class"]})
    breaker = Family("provision_watch_breaker_tripped", "1 while the watch's circuit breaker holds every action "
                     "(a systemic cause suspected), 0 otherwise")
    state = store.breaker()
    breaker.add(1 if state and state["tripped"] else 0, cluster=cluster)
    return [*_node_families(loaded, store, cluster), *_run_families(runs, cluster), *_burnin_families(runs, cluster),
            suspects, *soak_families(store, cluster), breaker, *watch_families(store, runs, cluster),
            *forecast_families(store, cluster), *domain_families(loaded, store, cluster)]


def domain_families(loaded: LoadedSpec, store: ReadStore, cluster: str) -> list[Family]:
    """Each NVLink domain's trays by state and the GPUs its policy leaves jobs (issue 53): a degraded domain's
    remaining size, as topology.conf gives it; none for a spec without domains."""
    if not loaded.spec.nvlink_domains:
        return []
    trays = Family("provision_nvlink_domain_trays", "Compute trays of each NVLink domain, by lifecycle state")
    usable = Family("provision_nvlink_domain_usable_gpus", "GPUs of each NVLink domain its on_tray_failure policy "
                    "leaves jobs (0: held until whole again)")
    states = {record.name: record.state.value for record in store.nodes()}
    for one in domains.standings(loaded, states):
        counted: dict[str, int] = {}
        for state in one.states.values():
            counted[state] = counted.get(state, 0) + 1
        for state, count in sorted(counted.items()):
            trays.add(count, cluster=cluster, domain=one.name, state=state)
        usable.add(one.usable_gpus, cluster=cluster, domain=one.name, standing=one.standing)
    return [trays, usable]


def forecast_families(store: ReadStore, cluster: str) -> list[Family]:
    """Each trending component's time to its threshold (issue 54), and whether that flags its node (inside the
    spec's ``forecast.horizon``); a component with no trend has no sample (absent: no projection, not health). In
    seconds, Prometheus's base unit (the issue named it ``_hours``, which ``promtool check metrics`` refuses)."""
    hours = Family("provision_forecast_seconds", "Seconds until the component's counter reaches its threshold at "
                   "its trend, as of the forecast (only components with a trend)")
    flagged = Family("provision_forecast_flagged", "1 when the component's forecast is inside forecast.horizon (a "
                     "warning, never a drain by itself)")
    for row in store.forecasts():
        if row["hours"] is None:
            continue
        labels = {"cluster": cluster, "node": row["node"], "component": row["component"], "source": row["source"]}
        hours.add(row["hours"] * 3600.0, **labels)
        flagged.add(1 if row["flagged"] else 0, **labels)
    return [hours, flagged]


#: What the watch has done, by kind (:meth:`StateStore.watch_actions`), each with its help.
WATCH_ACTIONS = {
    "quarantine_node-check": "nodes quarantined after node-check drained them in Slurm",
    "quarantine_fabric": "nodes taken out of service because a cable cut their rail's only path",
    "operator_seen": "administrators' drains and resumes read back from Slurm",
    "ticket": "suspect cables ticketed",
    "port_disabled": "switch ports disabled",
}


def watch_families(store: ReadStore, runs: list[dict[str, Any]], cluster: str) -> list[Family]:
    """The watch's own (issue 56): what it has done by kind, and what its latest pass saw: the problems that kept
    it from seeing (a silent source, Slurm unreadable), each source's health, the suspect cables by class. The
    latest pass's time and exit code are ``provision_run_*{command="watch"}``."""
    actions = Family("provision_watch_actions", "What the watch has done since the store began, by kind: "
                     + "; ".join(f"{kind}: {text}" for kind, text in WATCH_ACTIONS.items()))
    done = store.watch_actions()
    for kind in WATCH_ACTIONS:
        actions.add(done.get(kind, 0), cluster=cluster, kind=kind)
    problems = Family("provision_watch_pass_problems", "Problems of the watch's latest pass: sources missing or "
                      "unreadable, Slurm unreachable, disables that failed (silence is not health)")
    sources = Family("provision_watch_source_ok", "1 when the watch's latest pass read the source without a "
                     "problem, 0 otherwise")
    cables = Family("provision_watch_suspect_cables", "Suspect cables the watch's latest pass judged, by class")
    latest = next((row for row in runs if row["command"] == "watch" and row["finished_at"] is not None), None)
    manifest = _load_json(Path(latest["run_dir"]) / "manifest.json") if latest else None
    seen = manifest.get("watch.pass") if isinstance(manifest, dict) else None
    if isinstance(seen, dict):
        problems.add(len(seen.get("problems", [])), cluster=cluster)
        signals = seen.get("signals") or {}
        for reading in signals.get("sources", []):
            sources.add(0 if reading.get("problem") else 1, cluster=cluster, source=reading["source"])
        by_class: dict[str, int] = {}
        for row in signals.get("suspects", []):
            by_class[row["class"]] = by_class.get(row["class"], 0) + 1
        for klass in ("down", "flapping", "erroring", "degraded"):
            cables.add(by_class.get(klass, 0), cluster=cluster, **{"class": klass})
    return [actions, problems, sources, cables]


def _node_families(loaded: LoadedSpec, store: ReadStore, cluster: str) -> list[Family]:
    state = Family("provision_node_state", "1 for the lifecycle state the node is in, 0 for the others")
    since = Family("provision_node_state_since_timestamp_seconds", "When the node entered its current state")
    nodes = Family("provision_nodes", "Nodes of the spec in each lifecycle state")
    counts = {value.value: 0 for value in NodeState}
    for record in store.nodes():
        if not record.in_spec:
            continue
        counts[record.state.value] += 1
        for value in NodeState:
            state.add(1 if record.state is value else 0, cluster=cluster, node=record.name, state=value.value)
        stamp = _seconds(record.updated_at)
        if stamp is not None:
            since.add(stamp, cluster=cluster, node=record.name)
    for name, count in counts.items():
        nodes.add(count, cluster=cluster, state=name)
    needed = Family("provision_nodes_needed",
                    "Admitted nodes the delivery needs: ceil(nodes x (1 - admission.spare_fraction))")
    needed.add(capacity(sum(counts.values()), counts[NodeState.ADMITTED.value],
                        loaded.spec.admission.spare_fraction).needed, cluster=cluster)
    return [nodes, needed, state, since]


def _run_families(runs: list[dict[str, Any]], cluster: str) -> list[Family]:
    duration = Family("provision_run_duration_seconds", "How long the latest run of each command took")
    exit_code = Family("provision_run_exit_code", "The exit code of the latest run of each command")
    finished = Family("provision_run_finished_timestamp_seconds", "When the latest run of each command ended")
    seen: set[str] = set()
    for row in runs:
        if row["command"] in seen or row["finished_at"] is None:
            continue
        seen.add(row["command"])
        start, end = _seconds(row["started_at"]), _seconds(row["finished_at"])
        if start is not None and end is not None:
            duration.add(end - start, cluster=cluster, command=row["command"])
            finished.add(end, cluster=cluster, command=row["command"])
        exit_code.add(row["exit_code"] if row["exit_code"] is not None else -1, cluster=cluster,
                      command=row["command"])
    return [duration, exit_code, finished]


def _burnin_families(runs: list[dict[str, Any]], cluster: str) -> list[Family]:
    """The latest burn-in's verdicts per check and its figures: busbw, matmul, memory copy, pairs."""
    outcome = Family("provision_check_outcome",
                     "1 for the outcome of each check of the node's latest burn-in stage result")
    burnin = next((row for row in runs if row["command"] in BURNIN_COMMANDS
                   and any(Path(row["run_dir"]).glob("burnin-*.json"))), None)
    busbw = Family("provision_collective_busbw_bytes_per_second",
                   "Bus bandwidth of each collective at each message size, world and per rail (nccl-tests' busbw)")
    matmul = Family("provision_gpu_matmul_flops_per_second", "Best matmul throughput of each GPU in the node stage")
    memory = Family("provision_gpu_memory_copy_bytes_per_second", "Device memory copy bandwidth of each GPU")
    pairs = Family("provision_pair_bandwidth_bytes_per_second",
                   "Slowest pair test between two hosts on a rail (ib_write_bw-style, both directions summed)")
    if burnin is not None:
        run_dir = Path(burnin["run_dir"])
        for stage_file in sorted(run_dir.glob("burnin-*.json")):
            for card in _load_json(stage_file) or []:
                for result in card.get("results", []):
                    outcome.add(1, cluster=cluster, node=card["node"], stage=card["stage"], check=result["check"],
                                outcome=result["outcome"])
        for row in busbw_rows(_load_json(run_dir / "workers" / "collectives.json")):
            busbw.add(row["busbw_gbps"] * GIGA, cluster=cluster, scope="world" if row["scope"] == "all"
                      else row["scope"], op=row["op"], size_bytes=row["bytes"])
        for row in gpu_rows(node_records([burnin]), {}):
            matmul.add(row["tflops"] * 1e12, cluster=cluster, node=row["node"], gpu=row["gpu"], dtype=row["dtype"])
            if row["memory_gbps"] is not None:
                memory.add(row["memory_gbps"] * GIGA, cluster=cluster, node=row["node"], gpu=row["gpu"])
        slowest: dict[tuple[str, str], float] = {}
        for row in pair_rows(_load_json(run_dir / "pairs-results.json")):
            key = (row["hosts"], row["rail"])
            slowest[key] = min(slowest.get(key, row["gbps"]), row["gbps"])
        for (hosts, rail), gbps in sorted(slowest.items()):
            pairs.add(gbps * GIGA / 8, cluster=cluster, hosts=hosts, rail=rail)
    return [outcome, busbw, matmul, memory, pairs]


#: The soak's GPU series the metrics carry at their latest poll: series quantity -> (metric, help, scale to base
#: units).
SOAK_GPU = {
    "temperature_c": ("provision_soak_gpu_temperature_celsius", "GPU temperature at the soak's latest poll", 1.0),
    "sm_clock_mhz": ("provision_soak_gpu_sm_clock_hertz", "SM clock at the soak's latest poll", 1e6),
    "power_w": ("provision_soak_gpu_power_watts", "Board power draw at the soak's latest poll", 1.0),
    "clocks_event_reasons": ("provision_soak_gpu_clocks_event_reasons",
                             "nvidia-smi clocks_event_reasons.active (a bit mask) at the soak's latest poll", 1.0),
    "ecc_uncorrected_volatile": ("provision_soak_gpu_ecc_uncorrected_errors",
                                 "Volatile uncorrectable ECC errors at the soak's latest poll", 1.0),
    "remap_pending": ("provision_soak_gpu_row_remap_pending", "1 while a row remap waits for a GPU reset", 1.0),
    "tflops": ("provision_soak_gpu_matmul_flops_per_second", "Matmul throughput in the soak's latest round", 1e12),
}


def soak_families(store: ReadStore, cluster: str) -> list[Family]:
    """The newest soak's latest telemetry per node: each GPU's series, each rail port's error counters, and how far
    into the soak that poll was (a soak that stopped shows its age here)."""
    campaign, latest = store.soak_latest()
    gpu = {quantity: Family(name, text) for quantity, (name, text, _scale) in SOAK_GPU.items()}
    port = Family("provision_soak_ib_port_errors", "InfiniBand port error counter at the soak's latest poll")
    elapsed = Family("provision_soak_poll_seconds", "Seconds into the soak of the node's latest poll")
    reached: dict[str, float] = {}
    for node, series, at_s, value in latest:
        part, _, quantity = series.partition("/")
        reached[node] = max(reached.get(node, 0.0), at_s)
        if part.startswith("gpu") and quantity in SOAK_GPU:
            gpu[quantity].add(value * SOAK_GPU[quantity][2], cluster=cluster, node=node, gpu=part[3:],
                              campaign=campaign)
        elif quantity and part not in ("xid", "load"):  # a rail port's counter (the others: the soak's own)
            port.add(value, cluster=cluster, node=node, port=part, counter=quantity, campaign=campaign)
    for node, at_s in reached.items():
        elapsed.add(at_s, cluster=cluster, node=node, campaign=campaign)
    return [*gpu.values(), port, elapsed]


def textfile_dir(loaded: LoadedSpec) -> Path | None:
    """The directory the spec names for the textfile collector (relative to the spec's own directory)."""
    metrics = loaded.spec.metrics
    if metrics is None or metrics.textfile_dir is None:
        return None
    directory = Path(os.path.expanduser(str(metrics.textfile_dir)))
    return directory if directory.is_absolute() else loaded.path.parent / directory


def write_textfile(loaded: LoadedSpec, store: ReadStore, state_dir: Path, directory: Path) -> Path:
    """Write ``provision_<cluster>.prom`` in ``directory`` whole (temporary name, then rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"provision_{loaded.spec.cluster.name}.prom"
    temporary = directory / f".{target.name}.{os.getpid()}.tmp"  # not *.prom: the collector ignores it
    temporary.write_text(exposition(families(loaded, store, state_dir)))
    temporary.replace(target)
    return target
