"""What readers see of the store: narrow protocols of its read side, so a report, the metrics or a node's story
is typed against what it reads, can be handed anything that answers those calls, and shows in its signature
that it changes nothing (Terraform's way: small state interfaces, the full store built from them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from provision.state.lifecycle import NodeState
from provision.state.store import BaselineSample, NodeRecord


class NodeHistory(Protocol):
    """A node's story: where it stands, every move it made, the runs that made them."""

    def node(self, name: str) -> NodeRecord | None: ...

    def nodes(self) -> list[NodeRecord]: ...

    def history(self, name: str) -> list[dict[str, Any]]: ...

    def runs(self, limit: int = 20) -> list[dict[str, Any]]: ...


class ReadStore(NodeHistory, Protocol):
    """Everything the report and the metrics read: nodes, runs and their results, the soak's series, the cables
    found, the baseline and the sinks' status."""

    def counts(self) -> dict[str, int]: ...

    def results(self, run_id: str) -> list[dict[str, Any]]: ...

    def soak_latest(self) -> tuple[str | None, list[tuple[str, str, float, float]]]: ...

    def soak_series(self, campaign: str, node: str) -> dict[str, list[tuple[float, float]]]: ...

    def cables_found(self, run_id: str) -> list[str]: ...

    def cable_history(self, cable: str) -> list[dict[str, Any]]: ...

    def baseline_samples(self, profile: str | None = None) -> list[BaselineSample]: ...

    def sink_status(self) -> dict[str, dict[str, Any]]: ...

    def breaker(self) -> dict[str, Any] | None: ...

    def campaign_runs(self, campaign: str) -> set[str] | None: ...

    def campaigns_of(self, run_ids: Sequence[str]) -> set[str]: ...

    def soak_campaigns(self) -> list[str]: ...

    def soak_nodes(self, campaign: str) -> list[str]: ...


__all__ = ["NodeHistory", "NodeState", "ReadStore"]
