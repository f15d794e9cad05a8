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

from topology.cabling import Endpoint, discovered_endpoint, is_internal, node_device
from topology.ibnetdiscover import Discovery

SPEED_RANK = {"SDR": 1, "DDR": 2, "QDR": 3, "FDR": 4, "EDR": 5, "HDR": 6, "NDR": 7, "XDR": 8}


@dataclass(frozen=True)
class Link:
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


def compare(design: list[Link], observed: list[Link], down_ports: set[Endpoint] | None = None) -> list[Finding]:
    down_ports = down_ports or set()
    observed_by_ends = {link.ends: link for link in observed}
    peer: dict[Endpoint, Endpoint] = {}
    for link in observed:
        peer[link.a], peer[link.b] = link.b, link.a
    designed_peer: dict[Endpoint, Endpoint] = {}
    for link in design:
        designed_peer[link.a], designed_peer[link.b] = link.b, link.a
    findings: list[Finding] = []
    explained: set[frozenset[Endpoint]] = set()
    for link in design:
        found = observed_by_ends.get(link.ends)
        if found is not None:
            explained.add(link.ends)
            degradation = _degradation(link, found)
            if degradation:
                findings.append(Finding("degraded", (link.a, link.b), (found.a, found.b), degradation))
            continue
        first, second = peer.get(link.a), peer.get(link.b)
        if first is None and second is None:
            dark = [end for end in (link.a, link.b) if end in down_ports]
            category = "port_down" if dark else "missing"
            detail = f"port {dark[0][0]}/{dark[0][1]} is down" if dark else "neither end is connected"
            findings.append(Finding(category, (link.a, link.b), None, detail))
            continue
        if first is not None:
            actual = (link.a, first)
        else:
            assert second is not None  # one end is connected, or the cable would be missing
            actual = (second, link.b)
        explained.add(frozenset(actual))
        findings.append(Finding("miswired", (link.a, link.b), actual, _miswire_detail(link, actual)))
    _name_swap_partners(findings, designed_peer, peer)
    miswired_ends = {end for finding in findings if finding.category == "miswired" and finding.expected
                     for end in finding.expected}
    for link in observed:
        if link.ends in explained:
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
                        peer: dict[Endpoint, Endpoint]) -> None:
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
        if peer.get(partner_far) == should:
            finding.swap_partner = (partner_far, landed)


def discovered_links(discovery: Discovery) -> list[Link]:
    """Every cable of a dump as a pair of endpoints, director backplane links left out."""
    links = []
    devices: dict[str, str] = {}  # a switch's name is worked out once, not once per port

    def endpoint(node_id: str, port: int) -> Endpoint:
        node = discovery.nodes[node_id]
        if node.kind == "ca":
            return discovered_endpoint(node, port)
        if node_id not in devices:
            devices[node_id] = node_device(node)
        return devices[node_id], str(port)

    for link in discovery.links.values():
        if is_internal(discovery, link.a[0], link.b[0]):
            continue
        links.append(Link(endpoint(*link.a), endpoint(*link.b), link.speed, link.width))
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
