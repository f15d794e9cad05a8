"""How long a soak must run for an acceptance to mean something: the zero-failure demonstration of an MTBF.

With a constant failure rate (what is left once the soak has removed the early-life failures), zero failures in
``T`` node-hours of test demonstrate ``MTBF >= T / -ln(1 - confidence)``: the chance of seeing no failure in ``T``
hours from a node population whose MTBF were only ``m`` is ``exp(-T / m)``. So a target MTBF ``m`` at confidence
``c`` needs ``T = m * -ln(1 - c)`` node-hours, shared by every node of the delivery, and a soak of ``T / nodes``
hours. The same formula, read the other way, says what a soak that ran demonstrated.
"""

from __future__ import annotations

import math


def required_node_hours(mtbf_hours: float, confidence: float) -> float:
    return mtbf_hours * -math.log(1.0 - confidence)


def required_soak_hours(mtbf_hours: float, confidence: float, nodes: int) -> float:
    return required_node_hours(mtbf_hours, confidence) / max(nodes, 1)


def demonstrated_confidence(node_hours: float, mtbf_hours: float) -> float:
    """The confidence that the MTBF is at least ``mtbf_hours`` after ``node_hours`` without a failure."""
    return 1.0 - math.exp(-node_hours / mtbf_hours)


def statement(node_hours: float, failures: int, mtbf_hours: float) -> str:
    """What the soak demonstrated, in the words the acceptance report prints."""
    if failures:
        return (f"{failures} failure(s) in {node_hours:,.0f} node-hours: the zero-failure demonstration of "
                f"MTBF >= {mtbf_hours:,.0f} h does not hold (the failing nodes were quarantined; soak the rest again)")
    confidence = demonstrated_confidence(node_hours, mtbf_hours)
    return (f"no failure in {node_hours:,.0f} node-hours: MTBF >= {mtbf_hours:,.0f} h at "
            f"{math.floor(confidence * 100):.0f}% confidence")
