"""From a loaded spec and the files an operator gives to what the topology package works on: the designed
fabric, observed dumps, cabling plans, GUID maps, and the audits that compare them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from provision import evidence
from provision.errors import Refusal, UsageProblem
from provision.spec import LoadedSpec
from provision.state.layout import fabric_dir
from topology import cabling, ibdiagnet, ibnetdiscover
from topology.audit import ChangeReport, Finding, Link, compare, compare_change, discovered_links, down_endpoints
from topology.bulk import bulk
from topology.cabling import Endpoint, PlannedCable, discovered_endpoint
from topology.fattree import HostRails, Naming, build_design
from topology.ibnetdiscover import DiscoveredNode, Discovery
from topology.model import HCA, LEAF, SPINE, Cable, Fabric
from topology.rules import Violation, check_all


def host_rails(loaded: LoadedSpec) -> list[HostRails]:
    """Each host's compute HCAs ordered by rail (rail i is the HCA paired with GPU i)."""
    hosts = []
    for node in loaded.nodes:
        rails = loaded.spec.hardware[node.hardware].rails
        hosts.append(HostRails(node.name, tuple(hca for hca, _gpu in sorted(rails.items(), key=lambda item: item[1]))))
    return hosts


def design_fabric(loaded: LoadedSpec) -> Fabric:
    """The designed fabric of a spec with fat-tree parameters (validation guarantees they build)."""
    fabric = loaded.spec.fabric
    if loaded.fabric is None or fabric.rails is None or fabric.hosts_per_su is None:
        raise UsageProblem("this spec gives a cabling file, not fat-tree parameters, so there is no design to derive")
    naming = Naming(fabric.naming.leaf, fabric.naming.spine, fabric.naming.core)
    return build_design(loaded.fabric, host_rails(loaded), fabric.hosts_per_su, fabric.rails, naming=naming,
                        rate=fabric.link_rate)


def design_endpoint(fabric: Fabric, node: str, port: int) -> Endpoint:
    """How a design port is named in dumps and plans: HCAs by ``host`` and ``"host hca"``, switches by name."""
    data = fabric.graph.nodes[node]
    if data["kind"] == HCA:
        if "endpoint" in data:  # a plan's fabric keeps the plan's own name for the port
            return cast(Endpoint, data["endpoint"])
        return data["host"].lower(), f"{data['host']} {data['hca']}".lower()
    return node.lower(), str(port)


@dataclass
class AuditReport:
    findings: list[Finding]
    violations: dict[str, list[Violation]]

    @property
    def problems(self) -> int:
        return len(self.findings) + sum(len(found) for found in self.violations.values())


class IdentityError(Refusal, ValueError):
    """Two discovered HCAs claim the same host and HCA: the dump cannot be matched to the design."""


def check_identities(design: Fabric, discovery: Discovery) -> None:
    claimed: dict[Endpoint, DiscoveredNode] = {}
    wanted = {design_endpoint(design, node, 1) for node in design.nodes_of(HCA)}
    for node in discovery.nodes.values():
        if node.kind != "ca":
            continue
        endpoint = discovered_endpoint(node, 1)
        if endpoint not in wanted:
            continue
        if endpoint in claimed:
            first = claimed[endpoint]
            raise IdentityError(f"line {node.line}: node description {node.description!r} of {node.node_id} is also "
                                f"the description of {first.node_id} (line {first.line}); fix the node descriptions "
                                "(rdma-ndd sets '<host> <device>') before auditing")
        claimed[endpoint] = node


@bulk
def design_links(design: Fabric) -> list[Link]:
    """The design's cables named the way dumps and plans name them (each node's name worked out once)."""
    named: dict[str, Endpoint | str] = {}
    for node, data in design.graph.nodes(data=True):
        named[node] = ((data["host"].lower(), f"{data['host']} {data['hca']}".lower()) if data["kind"] == HCA
                       else node.lower())

    def endpoint(port: tuple[str, int]) -> Endpoint:
        name = named[port[0]]
        return name if isinstance(name, tuple) else (name, str(port[1]))

    return [Link(endpoint(cable.a), endpoint(cable.b), cable.rate, cable.width)
            for _a, _b, cable in design.graph.edges(data="cable")]


@bulk
def audit_against_spec(loaded: LoadedSpec, discovery: Discovery, design: Fabric | None = None) -> AuditReport:
    """``design``: the spec's design when the caller already built it."""
    design = design or design_fabric(loaded)
    check_identities(design, discovery)
    observed = discovered_links(discovery)
    findings = compare(design_links(design), observed, down_endpoints(discovery))
    as_built = _as_built_fabric(design, observed)
    violations = check_all(as_built, oversubscription=loaded.spec.fabric.oversubscription_ratio,
                           designed_uplinks=loaded.fabric.leaf_uplinks if loaded.fabric else None)
    _attach_rules(findings, violations)
    return AuditReport(findings, violations)


@bulk
def audit_change(loaded: LoadedSpec | None, plans: list[PlannedCable], before: Discovery,
                 after: Discovery) -> ChangeReport:
    design = design_links(design_fabric(loaded)) if loaded is not None else [Link(c.a, c.b) for c in plans]
    return compare_change(design, discovered_links(before), discovered_links(after),
                          down_before=down_endpoints(before), down_after=down_endpoints(after))


@bulk
def audit_against_plans(plans: list[PlannedCable], discovery: Discovery) -> AuditReport:
    findings = compare([Link(cable.a, cable.b) for cable in plans], discovered_links(discovery),
                       down_endpoints(discovery))
    return AuditReport(findings, {})


def _as_built_fabric(design: Fabric, observed: list[Link]) -> Fabric:
    """The discovered cables on nodes named and typed as in the design (unknown devices keep their own name)."""
    names = {}
    for node, data in design.graph.nodes(data=True):
        key = design_endpoint(design, node, 1)[0] if data["kind"] != HCA else design_endpoint(design, node, 1)
        names[key] = node
    fabric = Fabric()
    for node, data in design.graph.nodes(data=True):
        fabric.add_node(node, **data)

    def resolve(end: Endpoint) -> tuple[str, int]:
        if end in names:  # an HCA
            return names[end], 1
        node = names.get(end[0])
        if node is None:
            node = f"{end[0]}"
            if node not in fabric.graph:
                fabric.add_node(node, "unknown")
        return node, int(end[1]) if end[1].isdigit() else 1

    design_rate = next((cable.rate for cable in design.each_cable()), "NDR")
    for link in observed:
        a, b = resolve(link.a), resolve(link.b)
        if fabric.cable_at(a) is None and fabric.cable_at(b) is None:
            if link.speed == ibnetdiscover.NOT_REPORTED:  # ibdiagnet's LINKS: judge the cabling, not the rates
                designed = design.cable_at(a)
                rate, width = (designed.rate, designed.width) if designed else (design_rate, 4)
            else:  # "???" or nothing: the slowest, so a rule never passes on a rate nobody saw
                rate, width = link.speed or "SDR", link.width or 1
            fabric.add_cable(Cable(a, b, rate, width))
    return fabric


def _attach_rules(findings: list[Finding], violations: dict[str, list[Violation]]) -> None:
    """Name, on each cable finding, the rules broken at its ports (or on its switches, for switch-wide rules)."""
    by_port: dict[Endpoint, set[str]] = {}
    by_switch: dict[str, set[str]] = {}
    for rule, found in violations.items():
        for violation in found:
            if violation.port is not None:
                by_port.setdefault((violation.switch.lower(), str(violation.port)), set()).add(rule)
            else:
                by_switch.setdefault(violation.switch.lower(), set()).add(rule)
    for finding in findings:
        ends = [*(finding.expected or ()), *(finding.actual or ())]
        finding.rules = sorted({rule for end in ends
                                for rule in by_port.get(end, set()) | by_switch.get(end[0], set())})


def problem_places(design: Fabric, findings: list[Finding]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Where the picture should show each problem cable: on its SU (host cables) or on its bundle."""
    pairs = [pair for pair in (finding.expected or finding.actual for finding in findings) if pair is not None]
    return _places(design, pairs)


def places_of_cables(design: Fabric, labels: list[str]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """:func:`problem_places` for cables named as ``SWITCH/PORT - SWITCH/PORT`` (findings, link-health suspects)."""
    pairs = []
    for label in labels:
        ends = [end.strip().rsplit("/", 1) for end in label.split(" - ")]
        if len(ends) == 2 and all(len(end) == 2 for end in ends):
            pairs.append(((ends[0][0].lower(), ends[0][1]), (ends[1][0].lower(), ends[1][1])))
    return _places(design, pairs)


def _places(design: Fabric, pairs: Sequence[Sequence[Endpoint]]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    nodes = design.graph.nodes
    by_endpoint: dict[Endpoint, str] = {}
    for node, data in nodes(data=True):
        if data["kind"] == HCA:
            by_endpoint[design_endpoint(design, node, 1)] = node
    by_device = {node.lower(): node for node, data in nodes(data=True) if data["kind"] != HCA}
    by_device.update({node.lower(): node for node, data in nodes(data=True) if data["kind"] == HCA})

    def place(node: str) -> tuple[int, str]:
        data = nodes[node]
        kind = data["kind"]
        if kind in (HCA, LEAF):
            return 1, f"SU {data['su']}"
        return (2, f"group {data['group']}") if kind == SPINE else (3, f"plane {data['plane']}")

    boxes: dict[str, int] = {}
    bundles: dict[tuple[str, str], int] = {}
    for pair in pairs:
        known = [by_endpoint.get(end) or by_device.get(end[0]) or by_device.get(f"{end[0]}/{end[1]}")
                 for end in pair]
        places = sorted(place(node) for node in known if node is not None)
        if not places:
            continue
        if (len(places) == 2 and places[0][0] != places[1][0] and places[0][0] != 1) or (
                len(places) == 2 and places[0][0] == 1 and places[1][0] == 2):
            key = (places[0][1], places[1][1])
            bundles[key] = bundles.get(key, 0) + 1
        else:
            boxes[places[0][1]] = boxes.get(places[0][1], 0) + 1
    return boxes, bundles


def parse_observed(text: str, path: Path) -> Discovery:
    """The observed fabric from either source sites have: an ``ibnetdiscover`` dump, or ibdiagnet's
    ``ibdiagnet2.db_csv`` (told apart by its tables); a file that is neither is refused with its line."""
    try:
        if ibdiagnet.looks_like_db_csv(text):
            return ibdiagnet.parse_db_csv(text)
        return ibnetdiscover.parse(text)
    except (ibnetdiscover.DumpError, ibdiagnet.DbCsvError) as error:
        raise UsageProblem(f"{path}: {error}") from None


#: What ``--observed`` and ``--baseline`` must hold, as the refusal of a file that holds none of it says.
OBSERVED = "an ibnetdiscover dump or an ibdiagnet2.db_csv"


def read_observed(path: Path, names: dict[str, str] | None = None) -> tuple[Discovery, evidence.Reading]:
    """An ``ibnetdiscover`` dump or ibdiagnet db_csv from disk (HCAs renamed by a GUID map when one is given), and
    how much of it was read: a file with no node in it is refused (:mod:`provision.evidence`)."""
    text = evidence.read_text(path)
    discovery = parse_observed(text, path)
    if names:
        ibnetdiscover.apply_names(discovery, names)
    nodes = len(discovery.nodes)
    if ibdiagnet.looks_like_db_csv(text):  # a table file: its rows are not lines to count
        return discovery, evidence.reading(path, OBSERVED, text, understood=nodes, lines=nodes)
    lines = len(evidence.nonblank(text))
    return discovery, evidence.reading(path, OBSERVED, text, understood=nodes and lines - len(discovery.skipped),
                                       lines=lines, samples=[line for _number, line in discovery.skipped])


def read_dump(path: Path, names: dict[str, str] | None = None) -> Discovery:
    """An ``ibnetdiscover`` dump or ibdiagnet db_csv from disk, HCAs renamed by a GUID map when one is given."""
    return read_observed(path, names)[0]


def read_guid_map(path: Path) -> dict[str, str]:
    """Node GUID -> name, from ibnetdiscover's ``--node-name-map`` format or ``H-<guid> <name>`` lines."""
    names = ibnetdiscover.parse_guid_map(path.read_text(errors="replace"))
    if not names:
        raise UsageProblem(f"{path}: no GUID map entries (expected lines like 0x<guid> \"<host> <hca>\" "
                           "or H-<guid> <host>)")
    return names


@dataclass
class Plans:
    cables: list[PlannedCable]
    unread: list[str]  # "FILE:LINE: why" for each row that could not be read; the rest is audited

    def attributes(self) -> dict[frozenset[Endpoint], dict[str, str]]:
        return {cable.ends: dict(cable.attributes) for cable in self.cables if cable.attributes}


def read_plans(paths: Sequence[Path]) -> Plans:
    """Every cable of the cabling plans (UFM ``.ndt``, CSV, spreadsheet exports); a plan with no readable cable
    is refused, a row that cannot be read is reported with its line and the rest still audited."""
    planned: list[PlannedCable] = []
    unread: list[str] = []
    for path in paths:
        try:
            reading = cabling.read_plan(path.read_text(errors="replace"))
            if not reading.cables:
                raise reading.problems[0] if reading.problems else cabling.PlanError("lists no cable", 1)
        except cabling.PlanError as error:
            raise UsageProblem(f"{path}: {error}") from None
        planned += reading.cables
        unread += [f"{path}:{problem.line}: {problem.message}" for problem in reading.problems]
    return Plans(planned, unread)


def shared_description(discovery: Discovery) -> tuple[str, int] | None:
    """The node description several HCAs share (rdma-ndd never ran), with how many share it, or None."""
    shared = Counter(node.description for node in discovery.nodes.values() if node.kind == "ca").most_common(1)
    return shared[0] if shared and shared[0][1] > 1 else None


def cable_at_port(fabric: Fabric, port: str) -> Cable:
    """The designed cable plugged into SWITCH/PORT, or a usage error naming the argument."""
    node, _, number = port.rpartition("/")
    cable = fabric.cable_at((node, int(number))) if number.isdigit() else None
    if cable is None and number.isdigit():  # a plan's fabric is named in lower case, switches report upper case
        cable = fabric.cable_at((node.lower(), int(number)))
    if cable is None:
        raise UsageProblem(f"{port}: no such cabled port in the fabric design (write SWITCH/PORT)")
    return cable


def cabling_label(pair: tuple[tuple[str, str], tuple[str, str]] | None) -> str:
    """``sim01 mlx5_4 - leaf-su01-r2/3``: an HCA end by its description, a switch end as switch/port."""
    if pair is None:
        return ""
    return " - ".join(port if " " in port else f"{device}/{port}" for device, port in pair)


def simulated_dump(loaded: LoadedSpec, state_dir: Path, *, required: bool = True) -> Path | None:
    """The simulated fabric's own ``ibnetdiscover`` dump: the default observation for a simulated cluster."""
    if loaded.spec.simulation is None:
        if required:
            raise UsageProblem("--observed DUMP is required (only a simulated cluster has a dump of its own)")
        return None
    path = fabric_dir(state_dir) / "ibnetdiscover.txt"
    if not path.exists():
        if required:
            raise UsageProblem(f"no simulated fabric dump at {path}: run `provision sim up` first")
        return None
    return path
