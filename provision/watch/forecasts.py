"""The watch's forecasts (issue 54): each cabled port's error counters, as the passes kept their changes, projected
to the count ``fabric.link_health`` calls erroring over its window; a forecast inside ``forecast.horizon`` flags
the port's host (or switch) in the store: a warning in ``status``, the report and the metrics, never an action.

The series is the window's own: its changes counted from the window's start. Events leaving the window as it
moves on are not taken off, so on a growing counter the projection errs early, never late.
"""

from __future__ import annotations

from provision.forecast import components
from provision.spec.model import Forecasting, LinkHealth
from provision.state.store import ForecastRecord, StateStore
from topology import counters
from topology.model import HCA, Fabric

#: The store's source name of the watch's forecasts.
SOURCE = "watch"


def port_series(store: StateStore, fabric: Fabric, health: LinkHealth, *, until: float) -> list[components.Series]:
    """Per cabled port and counter with a threshold, its changes over the window ending ``until``."""
    thresholds = {**counters.THRESHOLDS, **health.counter_thresholds}
    since = until - health.window_hours * 3600.0
    _, _, deltas = store.watch_signals_since(since)
    grouped: dict[tuple[str, int, str, int, str], list[tuple[float, float, float]]] = {}
    for delta in deltas:
        if delta.end <= until and thresholds.get(delta.counter, 0) > 0:
            grouped.setdefault((delta.cable_node, delta.cable_port, delta.port_node, delta.port, delta.counter),
                               []).append((delta.start, delta.end, float(delta.delta)))
    found = []
    for (cable_node, cable_port, port_node, port, counter), changes in sorted(grouped.items()):
        cable = fabric.cable_at((cable_node, cable_port))
        if cable is None:  # a cable the spec no longer has
            continue
        host_end = fabric.host_end(cable)
        data = fabric.graph.nodes[host_end[0]] if host_end is not None else {}
        owner = str(data["host"]) if data.get("kind") == HCA else port_node
        found.append(components.counted_series(owner, f"{port_node}/{port} {counter}", changes,
                                               float(thresholds[counter])))
    return found


def forecast_pass(store: StateStore, fabric: Fabric, health: LinkHealth, policy: Forecasting, *, until: float,
                  run_id: str | None) -> list[components.ComponentForecast]:
    """Every port counter's forecast as of ``until``, kept in the store; the flagged ones returned first."""
    judged = components.judge(port_series(store, fabric, health, until=until), horizon_h=policy.horizon_hours,
                              window_h=policy.window_hours)
    store.record_forecasts(SOURCE, [ForecastRecord(*one.record()) for one in judged], run_id=run_id)
    return sorted(judged, key=lambda one: (not one.flagged, one.node, one.component))
