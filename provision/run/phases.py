"""What a pipeline phase is: the context it runs in, the report it returns, and the protocol it follows.

Kept apart from :mod:`provision.pipeline` (which orders the phases) so a phase module such as
:mod:`provision.burnin.phase` can name these types without importing the pipeline that imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from provision.run.record import RunRecord
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from provision.state import NodeRecord, StateStore
from provision.state.store import Registration


@dataclass
class PhaseContext:
    loaded: LoadedSpec
    store: StateStore
    run: RunRecord
    targets: list[ResolvedNode]
    forks: int = 8
    secrets: dict[str, str] = field(default_factory=dict)  # never logged, stored or written to the run
    retest_quarantined: bool = False  # burn-in takes quarantined nodes back (``provision burnin``)
    campaign: str = ""  # the burn-in campaign the stages run in (its soak's telemetry is kept under it)


@dataclass
class PhaseReport:
    name: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


class PlannedStore(Protocol):
    """What a phase's ``plan`` reads of the store: the store itself, or the store as the phases before it would
    leave it (``pipeline.plan``'s projection), so ``plan`` names the nodes ``apply`` will take."""

    @property
    def state_dir(self) -> Path: ...

    def node(self, name: str) -> NodeRecord | None: ...

    def compare(self, spec_nodes: Iterable[tuple[str, str]]) -> Registration: ...


class Phase(Protocol):
    name: str
    description: str

    def plan(self, loaded: LoadedSpec, store: PlannedStore | None, targets: list[ResolvedNode],
             forks: int) -> PhaseReport: ...

    def run(self, context: PhaseContext) -> PhaseReport: ...


class SystemicFailure(RuntimeError):
    """Too many nodes failed one stage for the cause to be the nodes: the phase stops the run."""
