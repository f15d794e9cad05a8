"""Reading the simulated fabric's link quality from a host's stand-in, cheaply (no fabric model loaded).

``provision.sim.fabric.write_link_quality`` writes the file at ``sim up``; every ``ib_write_bw`` looks up its
own flow in it.
"""

from __future__ import annotations

import json
from pathlib import Path

LINK_QUALITY = "link_quality.json"
FORMAT = 1


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
    for source, target in flows:
        crossing = [document["leaf_of"].get(source), target]
        factors.append(min((float(entry["factor"]) for entry in document["degraded"]
                            if entry.get("hca") in (source, target) or crossing in entry.get("from_leaf_to", ())),
                           default=1.0))
    return factors


def fabric_dir_of(root: Path) -> Path:
    """The simulated fabric's directory seen from one host's hardware root (``sim/nodes/<host>/root``)."""
    return root.parents[2] / "fabric"
