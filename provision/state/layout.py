"""Where things live under a cluster's state directory, for whoever writes or reads them.

A simulated cluster keeps its hosts and its fabric's files (the ``ibnetdiscover`` dump, the subnet manager's
forwarding tables, a day of UFM events, counter snapshots) under ``sim/``: the simulator writes them, and the
topology commands read them as the default evidence where an operator would hand in collected ones. Both sides
name the folder here, so the product reads those files without importing the simulator.
"""

from __future__ import annotations

from pathlib import Path


def sim_dir(state_dir: Path) -> Path:
    """The simulated cluster's folder: hosts, fabric, UFM history."""
    return state_dir / "sim"


def fabric_dir(state_dir: Path) -> Path:
    """The simulated fabric's dump, day of UFM events and counter snapshots."""
    return sim_dir(state_dir) / "fabric"
