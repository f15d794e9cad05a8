"""Whether the admitted nodes meet the delivery: ``admission.spare_fraction`` is the share of the delivered nodes
bought as spares, so the cluster needs ``ceil(nodes x (1 - spare_fraction))`` of them admitted."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Capacity:
    nodes: int
    admitted: int
    needed: int
    spare_fraction: float

    @property
    def short(self) -> int:
        return max(0, self.needed - self.admitted)

    @property
    def met(self) -> bool:
        return self.admitted >= self.needed

    def line(self) -> str:
        head = (f"capacity: {self.admitted} of {self.nodes} node(s) admitted; the delivery needs {self.needed} "
                f"(spare_fraction {self.spare_fraction:g})")
        if self.met:
            return f"{head}: met, {self.admitted - self.needed} spare"
        return f"{head}: short by {self.short}"

    def as_dict(self) -> dict[str, object]:
        return {"nodes": self.nodes, "admitted": self.admitted, "needed": self.needed,
                "spare_fraction": self.spare_fraction, "met": self.met, "short": self.short}


def capacity(nodes: int, admitted: int, spare_fraction: float) -> Capacity:
    # a tolerance keeps 16 x 0.75 = 12.000000000000002 from needing 13
    return Capacity(nodes, admitted, math.ceil(nodes * (1 - spare_fraction) - 1e-9), spare_fraction)
