"""The repair ladder (issue 56, item 5): what the watch does next for a node it quarantined, graded by the class
of the check that failed, with every attempt kept in the store so a watch killed mid-ladder neither repeats a
step nor skips one.

A node's *episode* begins with the watch's quarantine (node-check's drain read back, a cable that cut its rail)
and ends when it returns to service or goes to RMA. Within an episode each rung is an attempt: started (recorded
before anything is done to the node), then its re-validation's outcome. The next action follows from the
attempts alone:

- too many quarantines by the watch within the window (``rma_failures`` in ``rma_window_days``): RMA now, the
  ladder would only postpone it;
- an attempt started and never finished (the watch was killed during it): its step is not done again (a second
  power cycle of a node that may be booting is how BMCs wedge); the node is re-validated, which is safe to repeat;
- otherwise the first rung not yet tried; past the last, RMA.

Pure: the watch's pass records the attempts and carries the action out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provision.spec.model import WatchLadder

#: The checks whose failure is the GPU's (reset it first); the network's; every other is the host's.
GPU_CHECKS = frozenset({"xid", "ecc", "row_remap", "gpu_count", "clocks", "throttle", "nvlink", "nvlink_errors",
                        "vbios", "nvlink5_xid", "gpu_fabric"})
NETWORK_CHECKS = frozenset({"ib_ports", "rail_map"})
#: An attempt's outcomes: its re-validation passed or failed; ``started`` until then.
STARTED, PASSED, FAILED = "started", "passed", "failed"


def check_class(check: str) -> str:
    """``gpu``, ``network`` or ``host``: which of the spec's ladders a failed check climbs."""
    if check in GPU_CHECKS:
        return "gpu"
    return "network" if check in NETWORK_CHECKS else "host"


@dataclass(frozen=True)
class Attempt:
    """One rung tried in the node's current episode, as the store keeps it."""

    step: str
    outcome: str  # started | passed | failed
    at: float  # when it was started (seconds since the epoch)


@dataclass(frozen=True)
class Action:
    """What the watch does next for the node: ``step`` (then re-validate), ``revalidate`` (after a step
    that was interrupted), or ``rma``."""

    kind: str
    step: str
    why: str


def steps_for(policy: WatchLadder, check: str) -> list[str]:
    return list(getattr(policy, check_class(check)))


def next_action(policy: WatchLadder, check: str, attempts: Sequence[Attempt], *, quarantines_in_window: int) -> Action:
    """The next rung for a node whose episode began with ``check`` failing, from its attempts in this episode
    and how often the watch quarantined it within ``rma_window_days`` (this episode's quarantine included)."""
    if quarantines_in_window >= policy.rma_failures:
        return Action("rma", "rma", f"quarantined by the watch {quarantines_in_window} times within "
                                    f"{policy.rma_window_days:g} days (policy: RMA at {policy.rma_failures})")
    steps = steps_for(policy, check)
    if attempts and attempts[-1].outcome == STARTED:
        last = attempts[-1]
        return Action("revalidate", last.step, f"{last.step} was started and its re-validation never ended (the "
                                               "watch stopped): re-validated, the step not repeated")
    tried = [attempt.step for attempt in attempts]
    remaining = [step for step in steps if step not in tried]
    if not remaining:
        return Action("rma", "rma", f"every step of the {check_class(check)} ladder failed "
                                    f"({', '.join(tried) or 'none'})")
    step = remaining[0]
    if step == "rma":
        return Action("rma", "rma", f"the {check_class(check)} ladder ends in RMA after "
                                    f"{', '.join(tried) or 'no other step'}")
    return Action("step", step, f"{check_class(check)} ladder, rung {len(tried) + 1} of {len(steps)}"
                                + (f" (after {', '.join(tried)} failed)" if tried else ""))
