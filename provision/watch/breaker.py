"""The watch's circuit breaker (issue 56, item 6): a watch that quarantines a large share of the fleet at once is
almost always acting on a cause common to all of those nodes (a driver rollout that fails node-check everywhere, a
fabric event, a Slurm reason rewritten), and a loop that keeps acting on it drains a cluster that was working.
NVSentinel stops past half the nodes in five minutes; here the spec says (``watch.breaker``).

Pure: the decision is made on what the watch proposes this pass and what it already did in the window; the watch
keeps the state in the store, and only an operator clears it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from provision.spec.model import WatchBreaker


@dataclass(frozen=True)
class BreakerDecision:
    tripped: bool
    limit: int  # the most nodes the watch may quarantine within the window
    acted: int  # quarantined by the watch within the window before this pass
    proposed: int  # to quarantine this pass
    why: str


def limit_for(policy: WatchBreaker, fleet: int) -> int:
    """The most quarantines a window allows: ``share`` of the admitted fleet, never fewer than ``min_nodes``."""
    return max(policy.min_nodes, math.floor(policy.share * fleet))


def judge(policy: WatchBreaker, *, fleet: int, acted: int, proposed: int) -> BreakerDecision:
    """Trip when this pass would take the window's quarantines past the limit; a pass that proposes none never
    trips it (what an operator sees in Slurm is recorded whatever the breaker says)."""
    limit = limit_for(policy, fleet)
    if proposed == 0 or acted + proposed <= limit:
        return BreakerDecision(False, limit, acted, proposed, f"{acted + proposed} of at most {limit} quarantines "
                               f"in {policy.window_minutes} min")
    return BreakerDecision(True, limit, acted, proposed,
                           f"{acted} quarantined in the last {policy.window_minutes} min and {proposed} more proposed: "
                           f"past {limit} ({policy.share:g} of {fleet} admitted node(s), at least {policy.min_nodes}); "
                           "a cause common to them is likelier than as many bad nodes")
