"""The soak stage: the node stage's load held for ``burnin.soak.duration`` while every node's telemetry is polled.

The load is the node stage itself (matmul at its best shape, memory copies, the node's collectives), run in rounds
back to back on every node still in the soak; a round a node fails fails its soak with that round's check
(``soak_load``), and each round's matmul throughput per GPU is kept as a series (``gpu<i>/tflops``). Meanwhile the
controller polls each node every ``poll_interval_s``: each GPU's clock-event reasons, temperature, uncorrectable
ECC count, SM clock and board power, each rail HCA's error counters; and, at most once a minute of the
soak's clock, the pending row remaps and the Xids in the kernel log. The first poll comes before the load: each
node at rest (idle clocks, power, temperature), what its loaded series is seen against. Every value goes to the
state store as a time series (``soak_samples``), and the trends are judged on the whole series when the time is up
(:mod:`provision.checks.soak`).

Time is the soak's own clock: seconds since it began, kept in the store with the samples, so a soak that was
interrupted (Ctrl-C, kill -9 of the controller, a rebooted node) continues with the time it still owes. On the
simulator the clock runs ``simulation.time_scale`` times faster, as do the faults that develop over time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provision.burnin import node_stage
from provision.burnin.verdict import NodeVerdict, judge
from provision.checks import preflight, soak
from provision.checks.outcome import CheckResult, Outcome
from provision.facts import kernel_log, nvidia_smi
from provision.facts.fact import Fact
from provision.facts.session import HostSession, ReadFailed
from provision.forecast import components
from provision.hosts.remote import open_session
from provision.spec import LoadedSpec
from provision.spec.model import Soak
from provision.spec.semantics import ResolvedNode
from provision.state import StateStore
from provision.state.store import ForecastRecord

COMMAND_TIMEOUT_S = 60.0
#: What changes slowly and costs more to read (pending row remaps, the kernel log's Xids) is read at most this often
#: on the soak's clock, and at its first and last poll: a 10 s cadence for every GPU's clocks does not need a
#: 10 s cadence for the kernel log (bench.soak_polling: 5.2% of a core for 512 GPUs with both, under 5% without).
SLOW_EVERY_S = 60.0
#: The shortest real pause between polls (a simulator's clock can ask for less).
MIN_PAUSE_S = 0.2
#: The longest a round of load keeps the GPUs under matmul (real seconds): rounds of two minutes give a day's soak
#: 700 throughput samples per GPU and keep a round well inside the node test's deadline.
ROUND_HOLD_S = 120.0
#: How often, on the soak's clock, each node's error counters are projected to the soak's allowance (and at the
#: soak's end): a trend is hours in the making, and each projection reads the series from its start.
FORECAST_EVERY_S = 3600.0


def limits(loaded: LoadedSpec, node: ResolvedNode, settings: Soak) -> soak.SoakLimits:
    profile = loaded.spec.hardware[node.hardware]
    rails = tuple(hca for hca, _ in sorted(profile.rails.items(), key=lambda item: item[1]))
    rates = {**soak.IB_COUNTERS, **{str(name): rate for name, rate in settings.ib_errors_per_hour.items()}}
    return soak.SoakLimits(throttle_polls=settings.throttle_polls, ib_errors_per_hour=rates,
                           hardware_xids=preflight.HARDWARE_XIDS, gpus=profile.gpu.count, ports=rails,
                           clock_drift_fraction=settings.clock_drift_fraction,
                           throughput_drift_fraction=settings.throughput_drift_fraction,
                           nvlink=profile.nvlink.present)


def poll(session: HostSession, rails: tuple[str, ...], gpus_fact: Fact[list[nvidia_smi.GpuTelemetry]], *,
         slow: bool = True) -> tuple[dict[str, float], list[str]]:
    """One poll of one node: series name -> value, and what could not be read (those series simply have no
    sample this time: a series that keeps missing is judged unknown, never healthy)."""
    values: dict[str, float] = {}
    problems: list[str] = []
    try:
        _poll_into(session, rails, gpus_fact, values, problems, slow)
    except (ValueError, KeyError, IndexError) as error:  # output we cannot read: this poll's rest goes unsampled
        problems.append(f"unexpected output: {error}")
    return values, problems


def _poll_into(session: HostSession, rails: tuple[str, ...], gpus_fact: Fact[list[nvidia_smi.GpuTelemetry]],
               values: dict[str, float], problems: list[str], slow: bool) -> None:
    gpus = session.run(gpus_fact.argv, COMMAND_TIMEOUT_S)
    bus_index: dict[str, str] = {}
    if gpus.ok:
        for gpu in gpus_fact.parse(gpus.stdout):
            bus_index[gpu.bus_id.lower()[-12:]] = gpu.index
            values[f"gpu{gpu.index}/clocks_event_reasons"] = float(int(gpu.clocks_event_reasons, 16))
            for name, text in (("temperature_c", gpu.temperature_c),
                               ("ecc_uncorrected_volatile", gpu.ecc_uncorrected_volatile),
                               ("sm_clock_mhz", gpu.sm_clock_mhz), ("power_w", gpu.power_draw_w)):
                if text.replace(".", "", 1).isdigit():  # [N/A] (a board without the reading) is no sample
                    values[f"gpu{gpu.index}/{name}"] = float(text)
    else:
        problems.append(gpus.problem())
    if slow:
        _poll_slow(session, bus_index, values, problems)
    for hca in rails:
        for counter in soak.IB_COUNTERS:
            try:
                counted = session.read_text(f"/sys/class/infiniband/{hca}/ports/1/counters/{counter}")
            except ReadFailed as failed:
                problems.append(str(failed))
                continue
            if counted is not None and counted.strip().isdigit():
                values[f"{hca}/{counter}"] = float(counted.strip())


def _poll_slow(session: HostSession, bus_index: dict[str, str], values: dict[str, float],
               problems: list[str]) -> None:
    """What changes slowly and costs more to read: the pending row remaps and the kernel log's Xids."""
    remapped = session.run(nvidia_smi.REMAPPED_ROWS.argv, COMMAND_TIMEOUT_S)
    if remapped.ok:
        for rows in nvidia_smi.REMAPPED_ROWS.parse(remapped.stdout):
            found = bus_index.get(rows.bus_id.lower()[-12:])
            if found is not None:
                values[f"gpu{found}/remap_pending"] = 1.0 if rows.pending.strip() in ("1", "Yes") else 0.0
    else:
        problems.append(remapped.problem())
    log = session.run(kernel_log.KERNEL_LOG.argv, COMMAND_TIMEOUT_S, become=kernel_log.KERNEL_LOG.needs_root)
    if log.ok:
        counts: dict[str, float] = {}
        for xid in kernel_log.find_xids(kernel_log.parse_kernel_log(log.stdout)):
            counts[f"xid/{xid.code}/{xid.pci}"] = counts.get(f"xid/{xid.code}/{xid.pci}", 0.0) + 1
        values.update(counts)
        values["xid/read"] = 1.0  # the log was read: an absent xid series then means none, not unread
    else:
        problems.append(log.problem())
    _poll_nvlink_recovery(session, values, problems)


def _poll_nvlink_recovery(session: HostSession, values: dict[str, float], problems: list[str]) -> None:
    """Each NVLink's recovery events where it has any (``checks.soak._nvlink_recovery``), and ``nvlink/read`` only
    when the listing was read whole: some GPU listed, every link it lists with a recovery counter, no line not
    recognised. A listing that says less (another driver's names, a cut output) is a problem of this poll, never a
    read with no events; and it costs this poll nothing else (the HCA counters are read after it)."""
    listed = session.run(nvidia_smi.NVLINK_ERRORS.argv, COMMAND_TIMEOUT_S)
    if not listed.ok:
        problems.append(listed.problem())
        return
    try:
        read = nvidia_smi.NVLINK_ERRORS.parse(listed.stdout)
    except ValueError as error:
        problems.append(f"nvidia-smi nvlink -e: {error}")
        return
    unread = [f"GPU {gpu.index} link {link}" for gpu in read.gpus for link in gpu.links
              if gpu.recovery_events(link) is None]
    if not read.gpus or unread or read.unrecognised:
        problems.append("nvidia-smi nvlink -e: " + (f"no recovery counter for {unread[0]}" if unread else
                        f"{read.unrecognised} line(s) not recognised" if read.gpus else "no GPU listed"))
        return
    for gpu in read.gpus:
        for link, counters in gpu.links.items():
            events = gpu.recovery_events(link)
            if events:
                values[f"gpu{gpu.index}/nvlink{link}/recovery"] = float(events)
            if counters.get("Link recovery failed events"):
                values[f"gpu{gpu.index}/nvlink{link}/recovery_failed"] = float(counters["Link recovery failed events"])
    values["nvlink/read"] = 1.0


def round_throughput(directory: Path) -> dict[str, dict[str, float]]:
    """Per node, each GPU's matmul throughput in one round of load (``gpu<i>/tflops``), from the records the node
    stage wrote there (a node it ran again alone: the repeat's figures, as its verdict)."""
    speeds: dict[str, dict[str, float]] = {}
    for records in (directory / "node.json", directory / "repeat" / "node.json"):
        try:
            loaded = json.loads(records.read_text())
        except (OSError, ValueError):
            continue
        repeated: set[str] = set()
        for record in loaded if isinstance(loaded, list) else []:
            if isinstance(record, dict) and isinstance(record.get("tflops"), int | float) and "node" in record:
                if record["node"] not in repeated:  # a repeat's figures replace the first run's, node by node
                    repeated.add(record["node"])
                    speeds[record["node"]] = {}
                speeds[record["node"]][f"gpu{record.get('local_rank', 0)}/tflops"] = float(record["tflops"])
    return speeds


class SoakStage:
    def __init__(self, loaded: LoadedSpec, nodes: list[ResolvedNode], store: StateStore, campaign: str, *,
                 seed: int, evidence_dir: Path, forks: int,
                 load: Callable[[list[ResolvedNode], Path], list[NodeVerdict]] | None = None) -> None:
        assert loaded.spec.burnin.soak is not None  # validation refuses the stage without it
        self.loaded, self.nodes, self.store, self.campaign = loaded, nodes, store, campaign
        self.settings = loaded.spec.burnin.soak
        self.scale = loaded.spec.simulation.time_scale if loaded.spec.simulation is not None else 1.0
        self.forks, self.evidence_dir = max(1, forks), evidence_dir
        self.load = load or (lambda nodes, directory: node_stage.run_node_stage(
            loaded, nodes, store.state_dir, seed=seed, evidence_dir=directory, hold_s=self._hold_s(),
            batch=len(nodes)))  # every node under load at once: a node waiting for its batch is a node at rest
        judged = {node.name: limits(loaded, node, self.settings) for node in nodes}  # once, not per poll
        self.rails = {name: limit.ports for name, limit in judged.items()}
        self.allowed = {name: limit.ib_errors_per_hour for name, limit in judged.items()}
        self.failed_rounds: dict[str, CheckResult] = {}
        self.load_error = ""
        self.rounds = 0
        self.lock = threading.Lock()
        self.finished_rounds: list[tuple[str, float, dict[str, float]]] = []
        self.started = time.monotonic()

    def _hold_s(self) -> float:
        """How long the next round keeps each GPU under matmul, in real seconds: up to :data:`ROUND_HOLD_S`, never
        past the soak's end. Load between polls is the soak's point: a round of the node stage alone is over in
        seconds, and a GPU idle at most polls shows neither its clock under load nor its heat."""
        left = self.settings.hours * 3600 - (time.monotonic() - self.started) * self.scale
        return round(max(0.0, min(ROUND_HOLD_S, left / self.scale)), 1)

    def run(self) -> list[NodeVerdict]:
        duration_s = self.settings.hours * 3600
        elapsed = self.store.soak_elapsed_s(self.campaign)  # a resumed soak owes only the rest
        self.started = started = time.monotonic() - elapsed / self.scale
        stop = threading.Event()
        loader = threading.Thread(target=self._load_rounds, args=(stop,), name="soak-load", daemon=True)

        def clock() -> float:  # seconds into the soak, on the soak's own clock
            return (time.monotonic() - started) * self.scale

        try:
            fields = self._gpu_facts()
            due = elapsed  # polls keep their cadence: a slow poll shortens the pause after it, never the series
            slow_at: float | None = None
            forecast_at: float | None = None
            while True:
                at_s = clock()
                slow = slow_at is None or at_s >= duration_s or at_s - slow_at >= SLOW_EVERY_S
                slow_at = at_s if slow else slow_at
                self._poll_all(fields, min(at_s, duration_s), slow=slow)
                if forecast_at is None or at_s - forecast_at >= FORECAST_EVERY_S or at_s >= duration_s:
                    forecast_at = at_s
                    self._forecast()
                if at_s >= duration_s:
                    break
                if loader.ident is None:
                    # the load starts after the first poll: that one reads each node at rest (its idle clocks,
                    # power and temperature), what its loaded series is seen against
                    loader.start()
                while due <= at_s:
                    due += self.settings.poll_interval_s
                time.sleep(max(MIN_PAUSE_S, (min(due, duration_s) - clock()) / self.scale))
        finally:
            stop.set()
            if loader.ident is not None:
                loader.join()
            self._record_rounds()
        return [self._verdict(node) for node in self.nodes]

    def _gpu_facts(self) -> dict[str, Fact[list[nvidia_smi.GpuTelemetry]]]:
        """Per node, the GPU query in the field names its driver accepts (asked once, as preflight does)."""
        def ask(node: ResolvedNode) -> Fact[list[nvidia_smi.GpuTelemetry]]:
            try:
                session = open_session(self.loaded, node, self.store.state_dir)
            except Exception:
                return nvidia_smi.TELEMETRY
            try:
                asked = session.run(nvidia_smi.GPU_QUERY_FIELDS.argv, COMMAND_TIMEOUT_S)
                accepted = nvidia_smi.parse_help_query(asked.stdout) if asked.ok else None
            except ValueError:
                accepted = None
            finally:
                session.close()
            return nvidia_smi.telemetry_command(accepted)

        with ThreadPoolExecutor(max_workers=min(self.forks, len(self.nodes))) as pool:
            return dict(zip((node.name for node in self.nodes), pool.map(ask, self.nodes), strict=True))

    def _poll_all(self, fields: dict[str, Fact[list[nvidia_smi.GpuTelemetry]]], at_s: float, *, slow: bool) -> None:
        def one(node: ResolvedNode) -> dict[str, float]:
            try:
                session = open_session(self.loaded, node, self.store.state_dir)
            except Exception:
                return {}  # no sample this time; a node that stays unreachable ends unknown
            try:
                return poll(session, self.rails[node.name], fields[node.name], slow=slow)[0]
            finally:
                session.close()

        with ThreadPoolExecutor(max_workers=min(self.forks, len(self.nodes))) as pool:
            polled = list(pool.map(one, self.nodes))
        for node, values in zip(self.nodes, polled, strict=True):  # the store is this thread's
            if values:
                self.store.record_soak(self.campaign, node.name, at_s, values)
        self._record_rounds()

    def _forecast(self) -> None:
        """Each node's InfiniBand error counters projected to the soak's allowance over its whole length; a forecast
        inside ``forecast.horizon`` flags the node in the store (a warning: the checks judge the counts at the end)."""
        policy = self.loaded.spec.forecast
        found = []
        for node in self.nodes:
            names = [f"{hca}/{counter}" for hca in self.rails[node.name] for counter in self.allowed[node.name]]
            series = self.store.soak_series(self.campaign, node.name, names)
            found += components.judge(components.soak_series(node.name, series, self.allowed[node.name],
                                                             self.settings.hours),
                                      horizon_h=policy.horizon_hours, window_h=policy.window_hours)
        self.store.record_forecasts(f"soak:{self.campaign}", [ForecastRecord(*one.record()) for one in found],
                                    run_id=None, nodes=[node.name for node in self.nodes])

    def _record_rounds(self) -> None:
        with self.lock:
            rounds, self.finished_rounds = self.finished_rounds, []
        for node, at_s, values in rounds:
            self.store.record_soak(self.campaign, node, at_s, values)

    def _load_rounds(self, stop: threading.Event) -> None:
        while not stop.is_set():
            running = [node for node in self.nodes if node.name not in self.failed_rounds]
            if not running:
                return
            self.rounds += 1
            try:
                verdicts = self.load(running, self.evidence_dir / f"round-{self.rounds:04d}")
            except Exception as error:  # ours (a launch that could not start), never the nodes' verdict
                self.load_error = f"round {self.rounds} could not run: {type(error).__name__}: {error}"
                return
            at_s = min((time.monotonic() - self.started) * self.scale, self.settings.hours * 3600)
            speeds = round_throughput(self.evidence_dir / f"round-{self.rounds:04d}")
            for verdict in verdicts:  # kept with the telemetry: a resumed soak still knows its rounds
                with self.lock:
                    self.finished_rounds.append((verdict.node, at_s, {
                        "load/passed" if verdict.passed else "load/failed": 1.0, **speeds.get(verdict.node, {})}))
                if not verdict.passed and verdict.node not in self.failed_rounds:
                    first = verdict.blockers[0]
                    self.failed_rounds[verdict.node] = CheckResult(
                        "soak_load", first.outcome, f"round {self.rounds}: {first.check}: {first.message}",
                        first.remediation, first.evidence)

    def _verdict(self, node: ResolvedNode) -> NodeVerdict:
        series = {name: [soak.Sample(at, value) for at, value in samples]
                  for name, samples in self.store.soak_series(self.campaign, node.name).items()}
        results = soak.judge(series, limits(self.loaded, node, self.settings))
        passed, failed = len(series.get("load/passed", [])), series.get("load/failed", [])
        if node.name in self.failed_rounds:
            results.append(self.failed_rounds[node.name])
        elif failed:
            results.append(CheckResult("soak_load", Outcome.FAILED, f"a round of load failed at "
                                       f"{failed[0].at_s / 3600:.2f} h, before the soak was interrupted",
                                       "read that run's workers/ in its run directory"))
        elif passed and not self.load_error:
            results.append(CheckResult("soak_load", Outcome.OK, f"{passed} round(s) of the node stage's load"))
        else:  # the load stopped (our launch failed) or never finished a round: the soak held no load
            results.append(CheckResult("soak_load", Outcome.UNKNOWN, self.load_error or "no round of load finished "
                                       "in the soak", "a soak without load proves nothing: lengthen it or check the "
                                       "runtime"))
        return judge(self.loaded.spec.admission, node.name, "soak", results)
