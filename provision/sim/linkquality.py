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


def flow_factor(directory: Path, source: str, target: str) -> float:
    """The share of the link rate a flow from HCA ``source`` to HCA ``target`` gets (1.0: every cable on
    its route is healthy)."""
    try:
        document = json.loads((directory / LINK_QUALITY).read_text())
    except FileNotFoundError:
        return 1.0
    if document.get("format") != FORMAT:
        raise StaleLinkQuality(f"{directory / LINK_QUALITY} was written by another release of the simulator: "
                               "run `provision sim up SPEC --rebuild`")
    factor = 1.0
    crossing = [document["leaf_of"].get(source), target]
    for entry in document["degraded"]:
        if entry.get("hca") in (source, target) or crossing in entry.get("from_leaf_to", ()):
            factor = min(factor, float(entry["factor"]))
    return factor


def fabric_dir_of(root: Path) -> Path:
    """The simulated fabric's directory seen from one host's hardware root (``sim/nodes/<host>/root``)."""
    return root.parents[2] / "fabric"
