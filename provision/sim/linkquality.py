"""Reading the simulated fabric's link quality from a host's stand-in, cheaply (no fabric model loaded).

``provision.sim.fabric.write_link_quality`` writes the file at ``sim up``; every ``ib_write_bw`` looks up its
own flow in it.
"""

from __future__ import annotations

import json
from pathlib import Path

LINK_QUALITY = "link_quality.json"
FORMAT = 2  # 2: adaptive routing's pairs of leaves listed with their share of the cable


class StaleLinkQuality(RuntimeError):
    """The file was written by another release of the simulator."""


def flow_factors(directory: Path, flows: list[tuple[str, str]]) -> list[float]:
    """The share of the link rate each flow (source HCA, target HCA) gets (1.0: every cable on its route is
    healthy); the file is read once for all of them."""
    try:
        document = json.loads((directory / LINK_QUALITY).read_text())
    except FileNotFoundError:
        return [1.0] * len(flows)
    if document.get("format") != FORMAT:
        raise StaleLinkQuality(f"{directory / LINK_QUALITY} was written by another release of the simulator: "
                               "run `provision sim up SPEC --rebuild`")
    factors = []
    sprayed = [{(str(pair[0]), str(pair[1])): float(pair[2]) for pair in entry.get("leaf_pairs", ())}
               for entry in document["degraded"]]
    by_leaf = [{tuple(pair) for pair in entry.get("from_leaf_to", ())} for entry in document["degraded"]]
    for source, target in flows:
        found = 1.0
        for entry, leaf_flows, shares in zip(document["degraded"], by_leaf, sprayed, strict=True):
            factor = float(entry["factor"])
            if entry.get("hca") in (source, target) or (document["leaf_of"].get(source), target) in leaf_flows:
                found = min(found, factor)
            elif (leaves := (document["leaf_of"].get(source), document["leaf_of"].get(target))) in shares:
                found = min(found, factor / shares[leaves])  # adaptive routing: a share of the stream crosses it
        factors.append(min(found, 1.0))
    return factors


def fabric_dir_of(root: Path) -> Path:
    """The simulated fabric's directory seen from one host's hardware root (``sim/nodes/<host>/root``)."""
    return root.parents[2] / "fabric"
