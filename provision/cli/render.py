"""Tables shared by several commands: the cluster's nodes by lifecycle state and the quarantined ones."""

from __future__ import annotations

from typing import Any, cast

from rich.table import Table

from provision.cli.common import out
from provision.fleet.capacity import capacity
from provision.state import NodeRecord, NodeState, StateStore
from topology import hostlist

#: The words node-check's drain begins with (``provision.node_check.on_node.DRAIN_PREFIX``, tied by a test): a
#: view names who drained a node without importing what drains.
NODE_CHECK_DRAIN = "provision node-check:"


def print_status(cluster: str, store: StateStore, spare_fraction: float | None = None) -> None:
    counts = store.counts()
    records = store.nodes()
    table = Table(title=f"{cluster}: {sum(counts.values())} nodes", title_justify="left")
    table.add_column("state")
    table.add_column("nodes", justify="right")
    table.add_column("hosts")
    for state in NodeState:
        names = [record.name for record in records if record.in_spec and record.state is state]
        table.add_row(state.value, str(counts[state.value]), hostlist.compress(names) if names else "")
    out.print(table)
    gone = [record.name for record in records if not record.in_spec]
    if gone:
        out.print(f"not in the spec any more (history kept): {hostlist.compress(gone)}")
    _print_reasons("quarantined", "reason", [record for record in records if record.in_spec
                                             and record.state is NodeState.QUARANTINED])
    # a stage could not judge them alone: not failed, not admitted (the next apply takes them)
    _print_reasons("waiting for burn-in partners", "why", [record for record in records if record.in_spec
                                                          and record.state is NodeState.BURNING_IN and record.reason])
    if spare_fraction is not None:
        in_spec = [record for record in records if record.in_spec]
        admitted = sum(1 for record in in_spec if record.state is NodeState.ADMITTED)
        out.print(capacity(len(in_spec), admitted, spare_fraction).line(), markup=False)
    print_sinks(store)
    print_breaker(store)
    print_forecasts(store)


def print_forecasts(store: StateStore) -> None:
    """The components forecast to reach their threshold within the spec's horizon: warnings, not verdicts."""
    flagged = [row for row in store.forecasts() if row["flagged"]]
    if not flagged:
        return
    table = Table(title="forecast to fail (a warning: no node is drained for it)", title_justify="left")
    for column in ("node", "component", "in", "from", "why"):
        table.add_column(column)
    for row in flagged:
        table.add_row(row["node"], row["component"], forecast_span(row), row["source"], row["why"])
    out.print(table)


def forecast_span(row: dict[str, Any]) -> str:
    """``12 h (8-20 h)``: the projection and its interval, as of the forecast."""
    if row["hours"] is None:
        return "no trend"
    low, high = row["low"], row["high"]
    interval = f" ({low:.0f}-{high:.0f} h)" if low is not None and high is not None and low != high else ""
    return f"{row['hours']:.0f} h{interval}"


def print_breaker(store: StateStore) -> None:
    """The watch's breaker, when tripped: the fleet is in a systemic state and the watch acts on no node."""
    state = store.breaker()
    if state and state["tripped"]:
        held = state["detail"].get("held", [])
        out.print(f"systemic: the watch's breaker tripped at {state['at']} (run {state['run_id']}): "
                  f"{state['detail'].get('why', '')}; it holds {len(held)} quarantine(s) "
                  f"({hostlist.compress([entry['node'] for entry in held])}) until `provision watch SPEC "
                  "--clear-breaker`", markup=False)


def _print_reasons(title: str, why: str, records: list[NodeRecord]) -> None:
    """A table of nodes with their stage, the reason they are where they are, and since when (none: nothing)."""
    if not records:
        return
    table = Table(title=title, title_justify="left")
    for column in ("node", "stage", why, "since"):
        table.add_column(column)
    for record in records:
        table.add_row(record.name, record.stage or "", record.reason, record.updated_at)
    out.print(table)


def print_sinks(store: StateStore) -> None:
    """A line per outside system that has not caught up with the store (Slurm unreachable at the last run)."""
    for sink, status in store.sink_status().items():
        if status["pending"]:
            out.print(f"{sink} sync pending since {status['at']} (run {status['run_id']}): "
                      f"{status['detail'].get('error', '')}; the next run retries it, or `provision {sink} sync`",
                      markup=False)
        held = status["detail"].get("held_by_admin") or {}
        for node, reason in sorted(held.items()):
            # node-check's own drain, not read back (the watch has not run since, or its breaker holds it)
            who = "node-check" if reason.startswith(NODE_CHECK_DRAIN) else "an administrator"
            out.print(f"{sink}: {node} is admitted here but stays drained in {sink} by {who}: {reason}",
                      markup=False)


def quarantine_check(store: StateStore, name: str) -> str | None:
    """The check named in the node's latest quarantine evidence."""
    for row in reversed(store.history(name)):
        if row["to_state"] == NodeState.QUARANTINED.value:
            return cast("str | None", row["evidence"].get("check") or row["evidence"].get("failed_task"))
    return None
