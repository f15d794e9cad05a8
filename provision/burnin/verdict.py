"""What a stage concludes about each node, in the shape admission and the state store need."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provision.checks.outcome import CheckResult, blocking
from provision.spec.model import Admission


@dataclass
class NodeVerdict:
    node: str
    stage: str
    results: list[CheckResult] = field(default_factory=list)
    blockers: list[CheckResult] = field(default_factory=list)
    #: What the stage measured on the node, per figure (``provision.checks.baseline``): what its baseline keeps.
    figures: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    #: Where the figures were measured: "gpu", "cpu" (a CPU build of torch: the simulator, CI), or "" (none).
    measured_on: str = ""
    #: Why the stage could not judge the node on its own measurements (its group became too small once the nodes
    #: that stopped it were removed, or group testing had no healthy partner to split it from): neither passed nor
    #: failed, it waits in burning-in for partners (issue 55). Empty: the stage judged it.
    waiting: str = ""

    @property
    def passed(self) -> bool:
        return not self.blockers and not self.waiting

    @property
    def failed(self) -> bool:
        """Failed on its own measurements: what quarantines a node (a waiting node has not been judged)."""
        return bool(self.blockers) and not self.waiting

    @property
    def check(self) -> str:
        return self.blockers[0].check if self.blockers else ""

    @property
    def reason(self) -> str:
        if self.waiting:  # the domain stage's trays wait on their rack (its finding, or its other trays)
            on = "waits on its NVLink domain" if self.stage == "nvlink_domain" else "waits for partners"
            return f"{self.stage}: {on}: {self.waiting}"
        if not self.blockers:
            return ""
        first = self.blockers[0]
        more = f" (+{len(self.blockers) - 1} more)" if len(self.blockers) > 1 else ""
        return f"{self.stage}/{first.check}: {first.message}{more}"

    @property
    def remediation(self) -> str:
        return "; ".join(dict.fromkeys(result.remediation for result in self.blockers if result.remediation))

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "stage": self.stage, "passed": self.passed, "check": self.check,
                "reason": self.reason, "remediation": self.remediation, "waiting": self.waiting,
                "results": [result.as_dict() for result in self.results]}


def waits(node: str, stage: str, why: str) -> NodeVerdict:
    """A node the stage could not judge on its own measurements (see :attr:`NodeVerdict.waiting`)."""
    return NodeVerdict(node, stage, waiting=why)


def judge(admission: Admission, node: str, stage: str, results: list[CheckResult]) -> NodeVerdict:
    """The node's verdict under the spec's admission policy (do warnings, do unknowns keep it out)."""
    return NodeVerdict(node, stage, results, blocking(results, warnings_block=admission.warnings_block_admission,
                                                      unknown_blocks=admission.unknown_blocks_admission))
