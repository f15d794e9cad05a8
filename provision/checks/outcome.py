"""What a check concludes: five outcomes, merged by precedence, each non-ok one with a remediation.

The model follows the field guide's survey of Imbue's runner: a check that could not finish is ``unknown`` and
is never read as healthy; ``silenced`` is a known, judged-harmless condition that is shown but blocks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Outcome(str, Enum):
    """A ``str`` whose text is its value (``enum.StrEnum`` is Python 3.11: this runs on a node's 3.10 too)."""

    OK = "ok"
    SILENCED = "silenced"
    WARNING = "warning"
    FAILED = "failed"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @property
    def rank(self) -> int:
        """Precedence when results merge: unknown > failed > warning > silenced > ok."""
        return _RANK[self]


_RANK = {Outcome.OK: 0, Outcome.SILENCED: 1, Outcome.WARNING: 2, Outcome.FAILED: 3, Outcome.UNKNOWN: 4}


@dataclass
class CheckResult:
    check: str
    outcome: Outcome
    message: str
    remediation: str = ""
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "outcome": str(self.outcome), "message": self.message,
                "remediation": self.remediation, "evidence": self.evidence}


def worst(results: list[CheckResult]) -> Outcome:
    return max((result.outcome for result in results), key=lambda outcome: outcome.rank, default=Outcome.OK)


def blocking(results: list[CheckResult], *, warnings_block: bool, unknown_blocks: bool) -> list[CheckResult]:
    """The results that keep a node out, under the admission policy; most severe first."""
    blocked = {Outcome.FAILED}
    if warnings_block:
        blocked.add(Outcome.WARNING)
    if unknown_blocks:
        blocked.add(Outcome.UNKNOWN)
    chosen = [result for result in results if result.outcome in blocked]
    return sorted(chosen, key=lambda result: -result.outcome.rank)
