"""Faults that develop over time on a simulated host, on the simulator's clock.

What fails a delivery in its first weeks does not show in a one-minute test: a GPU that throttles once it has been
hot for hours, a link whose symbol errors pile up. A host with such a fault carries a marker file, and whenever
one of its tools runs (every stand-in calls :func:`advance`) the fault is brought to where the host's clock says it
has got to: hours since it was injected, times ``simulation.time_scale``. The tools then report the host's state as
they always do, so nothing reading them knows the fault was scheduled.
"""

from __future__ import annotations

import fcntl
import math
import time
from pathlib import Path
from typing import Any

from provision.sim.files import replace_file

MARKER = "var/lib/provision-sim/developing"
#: What a GPU reports once its cooling can no longer keep up under load (nvidia-smi's names).
THROTTLED = ["sw_thermal_slowdown", "hw_slowdown", "hw_thermal_slowdown"]
#: SymbolErrorCounter and PortRcvErrors are 16-bit PMA counters (IBA PortCounters) that saturate rather than wrap:
#: sysfs shows them stopping at 65535.
COUNTER_MAX = 65535


def counted(per_hour: float, doubling_h: float, hours: float) -> int:
    """Events a counter gained in ``hours`` at ``per_hour``, that rate doubling every ``doubling_h`` (0: steady)."""
    if doubling_h <= 0:
        return int(per_hour * hours)
    return int(per_hour * doubling_h / math.log(2) * (2 ** min(hours / doubling_h, 60.0) - 1))


def hours_since(state: dict[str, Any], since: float) -> float:
    return max(0.0, time.time() - since) * float(state.get("time_scale", 1.0)) / 3600


def schedule(root: Path) -> None:
    """Mark the host as carrying a fault that develops (the injectors call it)."""
    replace_file(root / MARKER, "")


def advance(root: Path) -> None:
    """Bring the host's developing faults to the present; a host without one pays a single stat."""
    if not (root / MARKER).exists():
        return
    from provision.sim.node import load_state, save_state

    with (root.parent / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state(root)
        changed = False
        for gpu in state["gpus"]:
            after = gpu.get("throttle_after")
            if after and not after.get("struck") and hours_since(state, after["since"]) >= after["after_h"]:
                gpu["throttle_reasons"] = list(THROTTLED)
                gpu["temperature_c"] = after["temperature_c"]
                after["struck"] = True
                changed = True
        for growth in state.get("ib_counter_growth", []):
            grown = counted(growth["per_hour"], growth.get("doubling_h", 0.0), hours_since(state, growth["since"]))
            path = root / "sys/class/infiniband" / growth["hca"] / "ports/1/counters" / growth["counter"]
            # the PMA's 16-bit error counters stop at their largest value rather than wrap (IBA PortCounters)
            value = min(growth["base"] + grown, COUNTER_MAX)
            replace_file(path.resolve(), f"{value}\n")  # a new file: templates stay shared
        if changed:
            save_state(root, state)
