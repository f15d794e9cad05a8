"""Compare a designed fabric with an as-built one, cable by cable.

Categories, as UFM's cabling check names them plus two it cannot see:

* ``missing`` (UFM: missing_in_ufm): a designed cable with neither end connected;
* ``miswired`` (UFM: miss_wired): a designed cable whose first end is connected elsewhere (or, if that end is
  dark, whose second end is); with ``swap_partner`` when two cables are simply crossed;
* ``extra`` (UFM: missing_in_ndt): a discovered cable the design does not have, and that no miswire explains
  (a cable whose two plugs both belong to designed cables already reported miswired is the far half of a
  crossing, not an extra cable);
* ``degraded``: the designed cable, trained at a lower speed or width than designed;
* ``port_down``: a designed cable missing where the dump reports the port itself down.

The first-end rule reproduces UFM's oracle on its own data (see the conformance test).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from topology.bulk import bulk
from topology.cabling import Endpoint, discovered_endpoint, node_device
from topology.ibnetdiscover import Discovery

SPEED_RANK = {"SDR": 1, "DDR": 2, "QDR": 3, "FDR": 4, "EDR": 5, "HDR": 6, "NDR": 7, "XDR": 8}


class Link(NamedTuple):
    """A cable between two named endpoints (a tuple: a fabric of 200,000 cables makes 400,000 of them)."""

    a: Endpoint
    b: Endpoint
    speed: str | None = None
    width: int | None = None

    @property
    def ends(self) -> frozenset[Endpoint]:
        return frozenset((self.a, self.b))


def label(a: Endpoint, b: Endpoint) -> str:
    return f"{a[0]}/{a[1]} - {b[0]}/{b[1]}"


@dataclass
class Finding:
    category: str
    expected: tuple[Endpoint, Endpoint] | None = None
    actual: tuple[Endpoint, Endpoint] | None = None
    detail: str = ""
    swap_partner: tuple[Endpoint, Endpoint] | None = None
    rules: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "category": self.category,
            "expected": label(*self.expected) if self.expected else None,
            "actual": label(*self.actual) if self.actual else None,
            "swap_partner": label(*self.swap_partner) if self.swap_partner else None,
            "detail": self.detail,
            "rules": self.rules,
        }


@bulk
def compare(design: list[Link], observed: list[Link], down_ports: set[Endpoint] | None = None) -> list[Finding]:
    down_ports = down_ports or set()
    at: dict[Endpoint, Link] = {}  # endpoint -> the observed cable plugged into it
    for link in observed:
        at[link.a] = at[link.b] = link
    designed_peer: dict[Endpoint, Endpoint] = {}
    for link in design:
        designed_peer[link.a], designed_peer[link.b] = link.b, link.a
    findings: list[Finding] = []
    explained: set[int] = set()  # id() of the observed cables a designed cable accounts for
    for link in design:
        a, b = link.a, link.b
        found = at.get(a)
        if found is not None and (found.b == b if found.a == a else found.a == b):
            explained.add(id(found))
            if found.speed != link.speed or found.width != link.width:
                degradation = _degradation(link, found)
                if degradation:
                    findings.append(Finding("degraded", (a, b), (found.a, found.b), degradation))
            continue
        first, second = found, at.get(b)
        if first is None and second is None:
            dark = [end for end in (a, b) if end in down_ports]
            category = "port_down" if dark else "missing"
            detail = f"port {dark[0][0]}/{dark[0][1]} is down" if dark else "neither end is connected"
            findings.append(Finding(category, (a, b), None, detail))
            continue
        if first is not None:
            actual = (a, first.b if first.a == a else first.a)
            explained.add(id(first))
        else:
            assert second is not None  # one end is connected, or the cable would be missing
            actual = (second.b if second.a == b else second.a, b)
            explained.add(id(second))
        findings.append(Finding("miswired", (a, b), actual, _miswire_detail(link, actual)))
    _name_swap_partners(findings, designed_peer, at)
    miswired_ends = {end for finding in findings if finding.category == "miswired" and finding.expected
                     for end in finding.expected}
    for link in observed:
        if id(link) in explained:
            continue
        if link.a in miswired_ends and link.b in miswired_ends:
            continue  # the far half of cables already reported crossed: both its plugs are accounted for
        findings.append(Finding("extra", None, (link.a, link.b), "discovered but not in the design"))
    return findings


def _degradation(design: Link, found: Link) -> str:
    problems = []
    if design.speed and found.speed and SPEED_RANK.get(found.speed, 0) < SPEED_RANK.get(design.speed, 0):
        problems.append(f"running at {found.speed}, designed {design.speed}")
    if found.speed is None and design.speed:
        problems.append("speed unknown (???)")
    if design.width and found.width and found.width < design.width:
        problems.append(f"{found.width}x wide, designed {design.width}x")
    return "; ".join(problems)


def _miswire_detail(link: Link, actual: tuple[Endpoint, Endpoint]) -> str:
    fixed = actual[0] if actual[0] in (link.a, link.b) else actual[1]
    landed = actual[1] if fixed == actual[0] else actual[0]
    should = link.b if fixed == link.a else link.a
    return f"{fixed[0]}/{fixed[1]} reaches {landed[0]}/{landed[1]} instead of {should[0]}/{should[1]}"


def _name_swap_partners(findings: list[Finding], designed_peer: dict[Endpoint, Endpoint],
                        at: dict[Endpoint, Link]) -> None:
    """Two cables crossed: A-B and C-D designed, A-D and C-B found. Each names the other."""
    by_expected = {frozenset(f.expected): f for f in findings if f.category == "miswired" and f.expected}
    for finding in by_expected.values():
        assert finding.expected is not None and finding.actual is not None
        a, b = finding.expected
        fixed = finding.actual[0] if finding.actual[0] in (a, b) else finding.actual[1]
        landed = finding.actual[1] if fixed == finding.actual[0] else finding.actual[0]
        partner_far = designed_peer.get(landed)
        if partner_far is None:
            continue
        should = b if fixed == a else a
        plugged = at.get(partner_far)
        if plugged is not None and (plugged.b if plugged.a == partner_far else plugged.a) == should:
            finding.swap_partner = (partner_far, landed)


@bulk
def discovered_links(discovery: Discovery) -> list[Link]:
    """Every cable of a dump as a pair of endpoints, director backplane links left out.

    What names a node's ports is worked out once per node, not once per port: an HCA with a description is one
    endpoint whatever its port, a switch is its device name and the port number. Two switches of one director
    chassis (same system image GUID) are joined by its backplane, not a cable.
    """
    named: dict[str, tuple[str, Endpoint | None, str]] = {}  # node id -> (device, fixed endpoint, chassis GUID)
    for node_id, node in discovery.nodes.items():
        fixed = discovered_endpoint(node, 0) if node.kind == "ca" and node.description.strip() else None
        chassis = node.system_guid if node.kind == "switch" else ""
        named[node_id] = (node_device(node), fixed, chassis)
    links = []
    for link in discovery.links.values():
        (a, a_port), (b, b_port) = link.a, link.b
        a_device, a_fixed, a_chassis = named[a]
        b_device, b_fixed, b_chassis = named[b]
        if a_chassis and a_chassis == b_chassis:
            continue
        links.append(Link(a_fixed or (a_device, str(a_port)), b_fixed or (b_device, str(b_port)), link.speed,
                          link.width))
    return links


def down_endpoints(discovery: Discovery) -> set[Endpoint]:
    return {discovered_endpoint(discovery.nodes[node], port) for node, port, _state in discovery.down_ports}


def finding_key(finding: Finding) -> tuple[str, frozenset[Endpoint] | None, frozenset[Endpoint] | None]:
    return (finding.category, frozenset(finding.expected) if finding.expected else None,
            frozenset(finding.actual) if finding.actual else None)


@dataclass
class ChangeReport:
    added: list[Link]  # cables in the new snapshot only
    removed: list[Link]  # cables in the old snapshot only
    fixed: list[Finding]
    still_broken: list[Finding]
    newly_broken: list[Finding]
    untouched: list[Finding]  # problems the change did not touch (carried over, not re-checked)


def compare_change(design: list[Link], before: list[Link], after: list[Link], *,
                   down_before: set[Endpoint] | None = None, down_after: set[Endpoint] | None = None) -> ChangeReport:
    """What a cable change did: only cables and design links touching a changed port are re-checked."""
    old_ends = {link.ends: link for link in before}
    new_ends = {link.ends: link for link in after}
    added = [link for ends, link in new_ends.items() if ends not in old_ends]
    removed = [link for ends, link in old_ends.items() if ends not in new_ends]
    touched = {end for link in (*added, *removed) for end in link.ends}
    touched |= (down_before or set()) ^ (down_after or set())
    old_findings = compare(design, before, down_before)

    def touches(finding: Finding) -> bool:
        return any(end in touched for pair in (finding.expected, finding.actual) if pair for end in pair)

    local_design = [link for link in design if link.ends & touched]
    local_after = [link for link in after if link.ends & touched]
    rechecked = [finding for finding in compare(local_design, local_after, down_after) if touches(finding)]
    old_keys = {finding_key(finding) for finding in old_findings if touches(finding)}
    new_keys = {finding_key(finding) for finding in rechecked}
    return ChangeReport(
        added=added,
        removed=removed,
        fixed=[f for f in old_findings if touches(f) and finding_key(f) not in new_keys],
        still_broken=[f for f in rechecked if finding_key(f) in old_keys],
        newly_broken=[f for f in rechecked if finding_key(f) not in old_keys],
        untouched=[f for f in old_findings if not touches(f)],
    )
