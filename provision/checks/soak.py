"""Judge a node's soak from its telemetry series: what a one-minute test cannot show, seen develop over hours.

A series is one quantity of one part of the node polled through the soak (``gpu3/clocks_event_reasons``,
``mlx5_0/symbol_error``), each sample at its time since the soak began. The judgements are pure functions of the
series and the spec's limits, so the same code judges a recorded real series and the simulator's:

- ``soak_throttle``: a GPU slowed by heat or power hardware (thermal, HW slowdown, power brake) for at least
  ``throttle_polls`` consecutive polls; a blip shorter than that is a warning;
- ``soak_memory``: any new uncorrectable ECC error or pending row remap during the soak;
- ``soak_clocks``: a GPU under load whose SM clock sits more than ``clock_drift_fraction`` below its busy
  node-mates' median with no clock-event reason at all (a sag the driver does not explain) for ``throttle_polls``
  polls;
- ``soak_throughput``: a GPU whose matmul throughput, against its node-mates' in the same round, fell by more than
  ``throughput_drift_fraction`` from the soak's first third of rounds to its last;
- ``soak_ib_errors``: an InfiniBand error counter growing faster than its limit per hour (``link_downed``: at all);
- ``soak_xid``: an Xid of the hardware class logged during the soak;
- ``soak_telemetry``: a node whose polls stopped or never covered a GPU or port is *unknown* for it, never healthy.

Each finding names the GPU or port, the first and last poll that show it, and the values there.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from provision.checks.outcome import CheckResult, Outcome

#: Clock-event bits that mean heat or power hardware is slowing the GPU (nvidia-smi clocks_event_reasons.active;
#: NVML's nvmlClocksEventReasons): not idling, not an application clock or power cap someone set.
SLOWDOWN_BITS = {0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown"}
#: InfiniBand port counters the soak watches (sysfs ``ports/1/counters``), and how many of each an hour is allowed
#: when the spec says nothing: symbol errors a few an hour on a healthy 400G link; a link that went down, none.
IB_COUNTERS = {"symbol_error": 10.0, "link_downed": 0.0, "port_rcv_errors": 10.0}


@dataclass(frozen=True)
class Sample:
    at_s: float  # since the soak began
    value: float


@dataclass(frozen=True)
class SoakLimits:
    throttle_polls: int = 3
    ib_errors_per_hour: dict[str, float] = field(default_factory=lambda: dict(IB_COUNTERS))
    hardware_xids: frozenset[int] = frozenset()
    gpus: int = 8
    ports: tuple[str, ...] = ()
    min_polls: int = 2
    clock_drift_fraction: float = 0.1
    throughput_drift_fraction: float = 0.1
    #: Busy GPUs a poll needs for their median to be a reference for each of them.
    min_mates: int = 3
    #: The spec's GPUs have NVLink: each link's recovery events are read at the slow polls.
    nvlink: bool = False


def judge(series: dict[str, list[Sample]], limits: SoakLimits) -> list[CheckResult]:
    """The node's soak checks over its series (``xid/<code>/<pci>``: how many of that Xid the kernel log held at
    each read; ``xid/read``: a read of the log happened)."""
    return [_telemetry(series, limits), _throttle(series, limits), _clocks(series, limits),
            _throughput(series, limits), _memory(series, limits), _ib_errors(series, limits), _xids(series, limits),
            _nvlink_recovery(series, limits)]


def xids_of(series: dict[str, list[Sample]]) -> list[tuple[float, int, str]]:
    """Each Xid logged during the soak: a count that grew past what the soak's first read of the log held (an
    Xid first seen after that read grew from none)."""
    reads = series.get("xid/read", [])
    first_read = reads[0].at_s if reads else 0.0
    found = []
    for name, samples in series.items():
        if not name.startswith("xid/") or name == "xid/read":
            continue
        _, code, pci = name.split("/", 2)
        base = samples[0].value if samples[0].at_s <= first_read else 0.0
        grown = next((sample for sample in samples if sample.value > base), None)
        if grown is not None:
            found.append((grown.at_s, int(code), pci))
    return sorted(found)


def _result(check: str, findings: list[str], ok: str, remediation: str,
            outcome: Outcome = Outcome.FAILED) -> CheckResult:
    if not findings:
        return CheckResult(check, Outcome.OK, ok)
    message = findings[0] if len(findings) == 1 else f"{findings[0]} (and {len(findings) - 1} more)"
    return CheckResult(check, outcome, message, remediation, findings)


def _telemetry(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    wanted = [f"gpu{index}/clocks_event_reasons" for index in range(limits.gpus)]
    wanted += [f"{port}/{counter}" for port in limits.ports for counter in limits.ib_errors_per_hour]
    thin = [name for name in wanted if len(series.get(name, [])) < limits.min_polls]
    if thin:
        return CheckResult("soak_telemetry", Outcome.UNKNOWN, f"{len(thin)} series polled fewer than "
                           f"{limits.min_polls} times, e.g. {thin[0]} ({len(series.get(thin[0], []))} polls)",
                           "a soak whose telemetry stopped proves nothing: check the node's connection and re-run",
                           thin[:20])
    polls = max(len(values) for values in series.values()) if series else 0
    return CheckResult("soak_telemetry", Outcome.OK, f"{polls} polls of {len(wanted)} series")


def _span(samples: list[Sample]) -> str:
    return f"polls at {samples[0].at_s / 3600:.2f} h to {samples[-1].at_s / 3600:.2f} h"


def _throttle(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    held: list[str] = []
    blips: list[str] = []
    for name, samples in sorted(series.items()):
        if not name.endswith("/clocks_event_reasons"):
            continue
        run: list[Sample] = []
        longest: list[Sample] = []
        for sample in samples:
            if int(sample.value) & sum(SLOWDOWN_BITS):
                run.append(sample)
                longest = max(longest, run, key=len)
            else:
                run = []
        if not longest:
            continue
        reasons = sorted({reason for sample in longest for bit, reason in SLOWDOWN_BITS.items()
                          if int(sample.value) & bit})
        line = f"{name.split('/')[0]}: {', '.join(reasons)} for {len(longest)} consecutive poll(s), {_span(longest)}"
        (held if len(longest) >= limits.throttle_polls else blips).append(line)
    if held:
        return _result("soak_throttle", held, "", "check airflow, fans, heatsink contact and the power supplies; a "
                       "GPU slowed under sustained load is slow for every job")
    if blips:
        return CheckResult("soak_throttle", Outcome.WARNING, f"{blips[0]}: shorter than the "
                           f"{limits.throttle_polls} polls that fail a node", "watch it", blips)
    return CheckResult("soak_throttle", Outcome.OK, "no thermal or power slowdown through the soak")


def _by_time(series: dict[str, list[Sample]], quantity: str) -> dict[float, dict[str, float]]:
    """``gpu<i>/<quantity>`` regrouped by poll: at each time, every GPU's value."""
    polls: dict[float, dict[str, float]] = {}
    for name, samples in series.items():
        gpu, _, what = name.partition("/")
        if what == quantity and gpu.startswith("gpu"):
            for sample in samples:
                polls.setdefault(sample.at_s, {})[gpu] = sample.value
    return polls


def _clocks(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    """A clock that sags under load while the driver names no reason: each poll compares every busy GPU (no
    clock-event reason at all, not even idle) with the median of the node's busy GPUs then, so idle moments between
    rounds of load, a power cap the whole node shares, and a GPU already failed for a slowdown it names, all stay
    out of it."""
    clocks, reasons = _by_time(series, "sm_clock_mhz"), _by_time(series, "clocks_event_reasons")
    runs: dict[str, list[tuple[float, float, float]]] = {}
    longest: dict[str, list[tuple[float, float, float]]] = {}
    for at_s in sorted(clocks):
        busy = {gpu: mhz for gpu, mhz in clocks[at_s].items() if reasons.get(at_s, {}).get(gpu) == 0}
        if len(busy) < limits.min_mates:
            continue
        reference = statistics.median(busy.values())
        for gpu, mhz in busy.items():
            if mhz < (1 - limits.clock_drift_fraction) * reference:
                runs.setdefault(gpu, []).append((at_s, mhz, reference))
                if len(runs[gpu]) > len(longest.get(gpu, [])):
                    longest[gpu] = list(runs[gpu])
            else:
                runs[gpu] = []
    held: list[str] = []
    blips: list[str] = []
    for gpu, run in sorted(longest.items(), key=lambda item: int(item[0][3:])):
        line = (f"{gpu}: SM clock {run[-1][1]:g} MHz under load against its node-mates' {run[-1][2]:g} MHz, with no "
                f"clock-event reason, for {len(run)} consecutive busy poll(s), polls at {run[0][0] / 3600:.2f} h to "
                f"{run[-1][0] / 3600:.2f} h")
        (held if len(run) >= limits.throttle_polls else blips).append(line)
    if held:
        return _result("soak_clocks", held, "", "a clock that sags with no reason the driver names is the board's "
                       "power delivery or firmware: reset the GPU, update its VBIOS, and if it sags again it is a "
                       "case for the vendor")
    if blips:
        return CheckResult("soak_clocks", Outcome.WARNING, f"{blips[0]}: shorter than the {limits.throttle_polls} "
                           "polls that fail a node", "watch it", blips)
    return CheckResult("soak_clocks", Outcome.OK, "every busy GPU clocked with its node-mates through the soak")


def _throughput(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    """Each round's matmul throughput per GPU over its node-mates' median in that round (so the machine's own pace,
    which moves every GPU alike, cancels out), compared between the soak's first and last third of rounds."""
    rounds = sorted(_by_time(series, "tflops").items())
    rounds = [(at_s, speeds) for at_s, speeds in rounds if len(speeds) >= min(limits.min_mates, limits.gpus)]
    if len(rounds) < 3:
        return CheckResult("soak_throughput", Outcome.OK, f"{len(rounds)} round(s) of load measured: too few for a "
                           "trend (3 needed); each round passed the node stage's own checks")
    third = len(rounds) // 3
    ratios: dict[str, list[float]] = {}
    for _at, speeds in rounds:
        reference = statistics.median(speeds.values())
        for gpu, tflops in speeds.items():
            ratios.setdefault(gpu, []).append(tflops / reference if reference > 0 else 0.0)
    findings = []
    for gpu, values in sorted(ratios.items(), key=lambda item: int(item[0][3:])):
        if len(values) != len(rounds):
            continue  # a GPU missing from a round: the round's own verdict says why
        first, last = statistics.median(values[:third]), statistics.median(values[-third:])
        if first - last > limits.throughput_drift_fraction:
            findings.append(f"{gpu}: matmul at {first:.2f} of its node-mates' in the first {third} round(s), "
                            f"{last:.2f} in the last {third} (rounds at {rounds[0][0] / 3600:.2f} h to "
                            f"{rounds[-1][0] / 3600:.2f} h)")
    return _result("soak_throughput", findings, f"{len(rounds)} rounds of load: every GPU kept pace with its "
                   "node-mates", "a GPU that slows under hours of load: read its clocks and temperatures in the "
                   "soak's plots; reset it and soak it again")


def _grew(samples: list[Sample]) -> tuple[Sample, Sample] | None:
    """The first sample above the soak's first value and the last sample, when the series grew."""
    if not samples:
        return None
    first = next((sample for sample in samples if sample.value > samples[0].value), None)
    return (first, samples[-1]) if first is not None else None


def _memory(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    findings = []
    for name, samples in sorted(series.items()):
        gpu, _, quantity = name.partition("/")
        if quantity not in ("ecc_uncorrected_volatile", "remap_pending"):
            continue
        grown = _grew(samples)
        if grown is not None:
            what = "uncorrectable ECC errors" if quantity == "ecc_uncorrected_volatile" else "a pending row remap"
            findings.append(f"{gpu}: {what} from {samples[0].value:g} to {grown[1].value:g}, first at "
                            f"{grown[0].at_s / 3600:.2f} h")
    return _result("soak_memory", findings, "no new uncorrectable ECC error or pending row remap",
                   "reset the GPU (a pending remap takes effect at reset) and soak again; errors that come back are "
                   "a case for the vendor")


def _ib_errors(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    findings = []
    for name, samples in sorted(series.items()):
        port, _, counter = name.partition("/")
        if counter not in limits.ib_errors_per_hour or len(samples) < 2:
            continue
        grown = samples[-1].value - samples[0].value
        hours = max(samples[-1].at_s - samples[0].at_s, 1.0) / 3600
        allowed = limits.ib_errors_per_hour[counter]
        if grown > allowed * hours:
            start = _grew(samples)
            findings.append(f"{port}: {counter} grew by {grown:g} in {hours:.2f} h ({grown / hours:.1f}/h, limit "
                            f"{allowed:g}/h), first at {start[0].at_s / 3600 if start else 0:.2f} h")
    return _result("soak_ib_errors", findings, "InfiniBand error counters within their limits per hour",
                   "reseat or replace the cable and transceiver of that port (topology flaps names the switch end); "
                   "re-test the link")


def _xids(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    if len(series.get("xid/read", [])) < limits.min_polls:
        return CheckResult("soak_xid", Outcome.UNKNOWN, f"the kernel log was read {len(series.get('xid/read', []))} "
                           "time(s) in the soak: an Xid could have gone unseen", "check that dmesg runs as root "
                           "(sudo) on the node and re-run")
    xids = xids_of(series)
    hardware = [(at, code, pci) for at, code, pci in xids if code in limits.hardware_xids]
    if hardware:
        return _result("soak_xid", [f"Xid {code} on {pci} at {at / 3600:.2f} h" for at, code, pci in hardware], "",
                       "the Xid's remediation (preflight's xid check names it); a hardware Xid under load is a case "
                       "for the vendor")
    if xids:
        return CheckResult("soak_xid", Outcome.WARNING, f"{len(xids)} Xid(s) of the software class, e.g. Xid "
                           f"{xids[0][1]}", "read the application's side", [f"Xid {c} at {a / 3600:.2f} h"
                                                                            for a, c, _p in xids])
    return CheckResult("soak_xid", Outcome.OK, "no Xid through the soak")


#: Series of each NVLink's recovery events (``gpu<i>/nvlink<l>/recovery``, ``.../recovery_failed``), kept where a
#: read found any (a GPU has 18 links: a series for each would be most of the store), with ``nvlink/read`` at
#: every read of ``nvidia-smi nvlink -e``: a link with no series then had none.
_RECOVERY = re.compile(r"^gpu(\d+)/nvlink(\d+)/(recovery|recovery_failed)$")


def _steps(samples: list[Sample], base: float) -> list[tuple[Sample, float]]:
    """The samples at which the count rose, from ``base``, with how much: a count below the one before is a reset
    (a GPU reset or a driver reload starts the counters over; the remediation does so), and what it reads then grew
    from none."""
    rose: list[tuple[Sample, float]] = []
    previous = base
    for sample in samples:
        grown = sample.value - previous if sample.value >= previous else sample.value
        if grown > 0:
            rose.append((sample, grown))
        previous = sample.value
    return rose


#: Recovery events a link may gain in one step between two reads of the soak before that alone fails it (a burst of
#: retraining); fewer in one step warn. Our choice: the issue's sources say a growing count matters, not how fast.
RECOVERY_BURST = 10


def _nvlink_recovery(series: dict[str, list[Sample]], limits: SoakLimits) -> CheckResult:
    """Each NVLink's recovery events through the soak (Blackwell's successful and failed ones, Hopper's Recovery
    Errors). A link whose events keep growing preceded an Xid 149 by five days on a GB200 NVL72 (marin-community/
    marin #8934; field guide 8.3): growth at two reads or more fails the node, a failed recovery or a burst of
    ``RECOVERY_BURST`` at once, a single smaller step warns. Events from before the soak are the link's history,
    not the soak's; a count that went down was reset, and what it reads after grew from none."""
    if not limits.nvlink:
        return CheckResult("soak_nvlink_recovery", Outcome.SILENCED, "no NVLink in the spec")
    reads = series.get("nvlink/read", [])
    if len(reads) < limits.min_polls:
        return CheckResult("soak_nvlink_recovery", Outcome.UNKNOWN, f"nvidia-smi nvlink -e was read {len(reads)} "
                           "time(s) in the soak: a link's recovery events could have gone unseen",
                           "run nvidia-smi nvlink -e on the node by hand and re-run")
    failed: list[str] = []
    warned: list[str] = []
    for name, samples in sorted(series.items()):
        found = _RECOVERY.match(name)
        if not found:
            continue
        base = samples[0].value if samples[0].at_s <= reads[0].at_s else 0.0
        rose = _steps(samples, base)
        if not rose:
            continue
        what = "failed recoveries" if found.group(3) == "recovery_failed" else "recovery events"
        gained = sum(grown for _, grown in rose)
        said = (f"gpu{found.group(1)} NVLink {found.group(2)}: {what} from {base:g} to {samples[-1].value:g} "
                f"(+{gained:g}), up at {len(rose)} read(s) from {rose[0][0].at_s / 3600:.2f} h")
        serious = found.group(3) == "recovery_failed" or len(rose) >= 2 or gained >= RECOVERY_BURST
        (failed if serious else warned).append(said)
    remediation = ("the link keeps retraining: reset the GPU and soak again; if it grows again, its NVLink cartridge "
                   "or the switch tray (NMX) before it ends in an Xid 149")
    if failed:
        return _result("soak_nvlink_recovery", failed + warned, "", remediation)
    return _result("soak_nvlink_recovery", warned, f"no NVLink recovery event through the soak ({len(reads)} reads)",
                   remediation, outcome=Outcome.WARNING)
