"""What UFM and the switches would have recorded about the simulated fabric: ``event.log`` and counters.

The simulated fabric has a history: a day of UFM housekeeping (GID and multicast notices, CPU
reports, links coming up), one mass reboot that takes many links down within a second, and the
cable faults: a flapping cable goes down ``flaps_per_hour`` times an hour (UFM logs each as a 329
"Link went down" naming both ends and the cable's serial, and a 112 threshold event on each end,
and the SM eventually flags the port FLAPPING with a 702); a degraded link logs nothing at all,
only a few link-error recoveries below any threshold, which is why tomography exists. Two
``perfquery -x`` snapshots, at the start and the end of the day, carry the matching counters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provision.hostmodel.devices import hca_guid
from provision.network.sources import design_fabric
from provision.sim.fabric import parse_port
from provision.spec import LoadedSpec
from topology.counters import THRESHOLDS
from topology.model import HCA, Cable, Fabric
from topology.ufm_events import ufm_port_path
from topology.writer import switch_guid

HOUR = 3600.0
SIM_CLOCK = datetime(2026, 11, 2, 12, 0, tzinfo=UTC).timestamp()
#: Fabric faults whose day shows in the event log and counters (a degraded link barely: see the docstring).
HISTORY_FAULTS = ("flapping_cable", "degraded_link")
EVENT_LOG = "ufm/event.log"
COUNTERS = "counters"


def stamp(when: float) -> str:
    moment = datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def port_description(fabric: Fabric, node: str, port: int) -> tuple[str, str]:
    """UFM's device type and description of one port: switch ports by cage/sub-port, host ports as Computer."""
    data = fabric.graph.nodes[node]
    if data.get("kind") == HCA:
        return "IB Port", f"Default / Computer: {data['host']} {data['hca']} / {port}"
    return "IB Port", f"Default / Switch: {node} / {ufm_port_path(port)}"


def serial_of(cable: Cable) -> str:
    """A stable, made-up transceiver/cable serial in Mellanox's MT<yyww><site><seq> shape."""
    number = sum(ord(char) for char in cable.label()) * 7919 % 10**5
    return f"MT2330FT{number:05d}"


@dataclass
class EventWriter:
    lines: list[tuple[float, str]]
    seed: int = 0
    next_id: int = 1

    def guid(self, fabric: Fabric, node: str) -> str:
        """The GUID the simulated fabric's dump and hosts give the device, so UFM's dev_id matches them."""
        data = fabric.graph.nodes[node]
        if data.get("kind") == HCA:
            return "0x" + hca_guid(self.seed, data["host"], data["hca"])
        return "0x" + switch_guid(node)

    def add(self, when: float, code: int, level: str, topic: str, device_type: str, description: str,
            dev_id: str, message: str) -> None:
        self.lines.append((when, f"{stamp(when)} [{self.next_id}] [{code}] {level} [{topic}] {device_type} "
                                 f"[{description}] [dev_id: {dev_id}]: {message}"))
        self.next_id += 1

    def port_event(self, fabric: Fabric, when: float, code: int, level: str, end: tuple[str, int],
                   message: str) -> None:
        device_type, description = port_description(fabric, *end)
        self.add(when, code, level, "Hardware", device_type, description, self.guid(fabric, end[0]), message)

    def link_down(self, fabric: Fabric, when: float, cable: Cable) -> None:
        a, b = cable.a, cable.b
        host = fabric.host_end(cable)
        switch_end = cable.other(host) if host else a
        ends = [f"({_kind(fabric, node)}:{node}:{ufm_port_path(port)}){self.guid(fabric, node)}:{port}"
                for node, port in (a, b)]
        self.port_event(fabric, when, 329, "WARNING", switch_end,
                        f"Link went down: {ends[0]} - {ends[1]}, cable S/N: {serial_of(cable)}")
        for end in (a, b):
            if fabric.graph.nodes[end[0]].get("kind") != HCA:
                self.port_event(fabric, when + 0.2, 112, "MINOR", end,
                                "Link Downed counter delta threshold exceeded. Threshold is 0, calculated delta "
                                "is 1.")
        self.port_event(fabric, when + 4.0, 328, "INFO", switch_end, "Link went up")

    def text(self) -> str:
        return "".join(line + "\n" for _when, line in sorted(self.lines, key=lambda item: item[0]))


def _kind(fabric: Fabric, node: str) -> str:
    return "Computer" if fabric.graph.nodes[node].get("kind") == HCA else "Switch"


def history(fabric: Fabric, faults: list[dict[str, Any]], *, seed: int, end: float, hours: float = 24.0,
            background_per_hour: int = 20, storm_cables: int = 24) -> tuple[str, dict[str, dict[tuple[str, int],
                                                                                          dict[str, int]]]]:
    """The event log text, and counter readings per switch at the start and end of the window."""
    rng = random.Random(seed)
    start = end - hours * HOUR
    writer = EventWriter([], seed)
    cables = list(fabric.cables())
    switch_cables = [cable for cable in cables if fabric.host_end(cable) is None]
    for _ in range(int(background_per_hour * hours)):
        when = rng.uniform(start, end)
        cable = rng.choice(cables)
        code, message = rng.choice(((64, "GID address is out of service"), (65, "GID address is in service"),
                                    (66, "MCast group created"), (527, "UFM CPU usage is 41%"),
                                    (328, "Link went up")))
        host = fabric.host_end(cable)
        end_port = cable.other(host) if host else cable.a
        writer.port_event(fabric, when, code, "INFO", end_port, message)
    if switch_cables:  # one switch reboot storm: many links down within a second
        when = rng.uniform(start + HOUR, end - HOUR)
        for cable in rng.sample(switch_cables, min(storm_cables, len(switch_cables))):
            writer.link_down(fabric, when + rng.uniform(0, 0.8), cable)
    before: dict[tuple[str, int], dict[str, int]] = {}
    after: dict[tuple[str, int], dict[str, int]] = {}
    for cable in cables:
        for node, port in (cable.a, cable.b):
            if fabric.graph.nodes[node].get("kind") != HCA:
                reading = {name: 0 for name in THRESHOLDS}
                reading["LinkDownedCounter"] = rng.randint(0, 2)
                reading["SymbolErrorCounter"] = rng.randint(0, 3)
                before[node, port] = dict(reading)
                after[node, port] = dict(reading)
    for fault in faults:
        faulty = fabric.cable_at(parse_port(fault["target"]))
        if faulty is None:
            continue
        cable = faulty
        ends = [end for end in (cable.a, cable.b) if end in after]
        if fault["kind"] == "flapping_cable":
            flaps = max(1, round(fault["params"].get("flaps_per_hour", 4.0) * hours))
            for number in range(flaps):
                writer.link_down(fabric, start + (number + rng.random()) * hours * HOUR / flaps, cable)
            switch_end = next(iter(ends), cable.a)
            writer.port_event(fabric, end - 60, 702, "WARNING", cable.other(switch_end),
                              f"Peer Port {switch_end[0]}:{ufm_port_path(switch_end[1])} is considered by SM as "
                              f"unhealthy due to FLAPPING.")
            for end_port in ends:
                after[end_port]["LinkDownedCounter"] = min(255, after[end_port]["LinkDownedCounter"] + flaps)
                after[end_port]["LinkErrorRecoveryCounter"] += flaps
        elif fault["kind"] == "degraded_link":
            for end_port in ends:
                after[end_port]["LinkErrorRecoveryCounter"] += 3  # below the threshold of 10: no alarm
    return writer.text(), {"before": before, "after": after}


def write_perfquery(readings: dict[tuple[str, int], dict[str, int]], directory: Path, captured_at: float,
                    lids: dict[str, int]) -> None:
    """One ``perfquery -l -x`` file per switch (``<switch>.out``), plus the capture time."""
    directory.mkdir(parents=True, exist_ok=True)
    by_switch: dict[str, list[tuple[int, dict[str, int]]]] = {}
    for (node, port), values in readings.items():
        by_switch.setdefault(node, []).append((port, values))
    for node, ports in by_switch.items():
        blocks = []
        for port, values in sorted(ports):
            lines = [f"# Port extended counters: Lid {lids.get(node, 1)} port {port} (CapMask: 0x5300 "
                     f"CapMask2: 0x0000002)", f"{'PortSelect:':.<33}{port}", f"{'CounterSelect:':.<33}0x0000"]
            lines += [f"{name + ':':.<33}{value}" for name, value in values.items()]
            blocks.append("\n".join(lines))
        (directory / f"{node}.out").write_text("\n".join(blocks) + "\n")
    (directory / "captured_at").write_text(datetime.fromtimestamp(captured_at, UTC).isoformat() + "\n")


def write_history(loaded: LoadedSpec, faults: list[dict[str, Any]], directory: Path) -> None:
    """The simulated fabric's last day: ``ufm/event.log`` and ``counters/{start,end}/`` snapshots.

    The day ends at the spec's simulated clock (a fixed moment, so the files are the same every time).
    """
    fabric = design_fabric(loaded)  # the history is the designed cables' (a miswire does not change who flaps)
    seed = loaded.spec.simulation.seed if loaded.spec.simulation else 0
    end = SIM_CLOCK
    text, readings = history(fabric, faults, seed=seed, end=end)
    (directory / "ufm").mkdir(parents=True, exist_ok=True)
    (directory / EVENT_LOG).write_text(text)
    lids = {node: 0x1000 + number for number, node in enumerate(sorted(fabric.graph.nodes))}
    write_perfquery(readings["before"], directory / COUNTERS / "start", end - 24 * HOUR, lids)
    write_perfquery(readings["after"], directory / COUNTERS / "end", end, lids)
