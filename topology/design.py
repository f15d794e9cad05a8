"""Dimensions of a rail-optimized fat tree, derived from its design parameters.

Validation needs this before anything is built: a spec whose fabric cannot be
wired non-blocking must be rejected with the parameter that breaks it, and the
graph builder uses the same numbers so the two can never disagree.

The design follows the DGX SuperPOD pattern:

* a *scalable unit* (SU) of ``hosts_per_su`` hosts has one leaf per rail; the
  rail-*i* HCA of every host lands on the SU's rail-*i* leaf;
* a leaf has ``hosts_per_su`` host ports and ``ceil(hosts_per_su / oversubscription)``
  uplinks, spread evenly over every spine of its *spine group*;
* two tiers when every leaf can reach every spine (at most ``radix`` leaves);
  otherwise three: leaves are grouped (``su_block``: whole SUs, all rails;
  ``rail_plane``: the same rail across SUs), each group has its own spines with
  half their ports down and half up, and spine *j* of every group connects to
  the cores of plane *j*.

Oversubscription is applied at the leaf only; spines and cores are always
non-blocking. A 3-tier design holds at most ``radix`` spine groups, which is the
``radix**3 / 4`` endpoint limit of a 3-tier fat tree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

#: Unidirectional data rate of one 4x InfiniBand port, in Gb/s.
LINK_RATES_GBPS: dict[str, int] = {"EDR": 100, "HDR": 200, "NDR": 400, "XDR": 800}

SpineGrouping = Literal["auto", "su_block", "rail_plane"]


class DesignError(ValueError):
    """A fabric that the parameters cannot build; ``parameter`` names the culprit."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.message = message


@dataclass(frozen=True)
class FabricParameters:
    hosts: int
    rails: int
    hosts_per_su: int
    switch_radix: int
    link_rate: str = "NDR"
    oversubscription: Fraction = Fraction(1)
    tiers: int | None = None  # None: the fewest that work
    spine_groups: SpineGrouping = "auto"


@dataclass(frozen=True)
class FabricDimensions:
    tiers: int
    scalable_units: int
    leaves: int
    leaf_host_ports: int
    leaf_uplinks: int
    spine_grouping: str  # "none" for two tiers
    spine_groups: int
    leaves_per_group: int
    spines_per_group: int
    spines: int
    spine_downlinks: int
    spine_uplinks: int
    core_planes: int
    cores_per_plane: int
    cores: int
    host_cables: int
    leaf_spine_cables: int
    spine_core_cables: int

    @property
    def switches(self) -> int:
        return self.leaves + self.spines + self.cores

    @property
    def cables(self) -> int:
        return self.host_cables + self.leaf_spine_cables + self.spine_core_cables


def dimension(params: FabricParameters) -> FabricDimensions:
    """Return the switch and cable counts, or raise :class:`DesignError`."""
    k = params.switch_radix
    _require(params.rails >= 1, "rails", "must be at least 1")
    _require(params.hosts_per_su >= 1, "hosts_per_su", "must be at least 1")
    _require(params.hosts >= 1, "nodes", "the spec has no hosts")
    _require(k >= 4 and k % 2 == 0, "switch_radix", f"must be an even number of ports >= 4, not {k}")
    _require(params.oversubscription >= 1, "oversubscription", "must be 1:1 or more (e.g. 2:1), never below 1")
    _require(params.link_rate in LINK_RATES_GBPS, "link_rate", f"unknown rate {params.link_rate!r}")

    down = params.hosts_per_su
    up = math.ceil(Fraction(down) / params.oversubscription)
    if down + up > k:
        ratio = params.oversubscription
        most = math.floor(k * ratio / (ratio + 1))
        raise DesignError(
            "hosts_per_su",
            f"a leaf needs {down} host ports + {up} uplinks = {down + up} ports but switch_radix is {k}; "
            f"at {_ratio_text(ratio)} at most {most} hosts per scalable unit fit",
        )
    units = math.ceil(params.hosts / params.hosts_per_su)
    leaves = units * params.rails
    host_cables = params.hosts * params.rails

    if leaves == 1:
        _require(params.tiers in (None, 1), "tiers", "a single leaf switch is a one-tier fabric")
        return FabricDimensions(1, units, 1, down, 0, "none", 0, 1, 0, 0, 0, 0, 0, 0, 0, host_cables, 0, 0)

    two_tier_fits = leaves <= k
    tiers = params.tiers or (2 if two_tier_fits else 3)
    if tiers == 2:
        _require(
            two_tier_fits,
            "tiers",
            f"two tiers connect at most {k} leaves (switch_radix) but this fabric has {leaves} "
            f"({units} scalable units x {params.rails} rails); use three tiers",
        )
        spines = _smallest_divisor_at_least(up, math.ceil(leaves * up / k))
        return FabricDimensions(
            tiers=2,
            scalable_units=units,
            leaves=leaves,
            leaf_host_ports=down,
            leaf_uplinks=up,
            spine_grouping="none",
            spine_groups=1,
            leaves_per_group=leaves,
            spines_per_group=spines,
            spines=spines,
            spine_downlinks=leaves * up // spines,
            spine_uplinks=0,
            core_planes=0,
            cores_per_plane=0,
            cores=0,
            host_cables=host_cables,
            leaf_spine_cables=leaves * up,
            spine_core_cables=0,
        )
    _require(tiers == 3, "tiers", f"must be 2 or 3, not {tiers}")
    return _three_tier(params, units, leaves, down, up, host_cables)


def _three_tier(
    params: FabricParameters, units: int, leaves: int, down: int, up: int, host_cables: int
) -> FabricDimensions:
    k = params.switch_radix
    half = k // 2
    grouping = params.spine_groups
    if grouping == "auto":
        grouping = "su_block" if params.rails <= half else "rail_plane"
    if grouping == "su_block":
        _require(
            params.rails <= half,
            "spine_groups",
            f"su_block groups whole scalable units, but {params.rails} rails exceed the {half} "
            f"downlinks of a spine (switch_radix/2); use rail_plane",
        )
        units_per_group = half // params.rails
        groups = math.ceil(units / units_per_group)
        leaves_per_group = units_per_group * params.rails
    else:
        units_per_group = half
        groups = params.rails * math.ceil(units / units_per_group)
        leaves_per_group = min(units, units_per_group)
    spines_per_group = _smallest_divisor_at_least(up, math.ceil(leaves_per_group * up / half))
    spine_down = leaves_per_group * up // spines_per_group
    if groups > k:
        largest = _three_tier_host_limit(params)
        raise DesignError(
            "nodes",
            f"{params.hosts} hosts need {groups} spine groups but a core switch of radix {k} reaches at most "
            f"{k}; three tiers hold at most {largest} hosts with hosts_per_su={params.hosts_per_su}, "
            f"rails={params.rails}, switch_radix={k}",
        )
    spine_up = spine_down  # non-blocking spines
    cores_per_plane = next(c for c in range(1, spine_up + 1) if spine_up % c == 0 and groups * spine_up // c <= k)
    cores = spines_per_group * cores_per_plane
    spines = groups * spines_per_group
    return FabricDimensions(
        tiers=3,
        scalable_units=units,
        leaves=leaves,
        leaf_host_ports=down,
        leaf_uplinks=up,
        spine_grouping=grouping,
        spine_groups=groups,
        leaves_per_group=leaves_per_group,
        spines_per_group=spines_per_group,
        spines=spines,
        spine_downlinks=spine_down,
        spine_uplinks=spine_up,
        core_planes=spines_per_group,
        cores_per_plane=cores_per_plane,
        cores=cores,
        host_cables=host_cables,
        leaf_spine_cables=leaves * up,
        spine_core_cables=spines * spine_up,
    )


def _three_tier_host_limit(params: FabricParameters) -> int:
    half = params.switch_radix // 2
    if params.spine_groups == "rail_plane" or params.rails > half:
        units = (params.switch_radix // params.rails) * half
    else:
        units = params.switch_radix * (half // params.rails)
    return units * params.hosts_per_su


def _smallest_divisor_at_least(number: int, floor: int) -> int:
    """The fewest spines that still let every leaf spread its uplinks evenly."""
    return next(d for d in range(max(1, floor), number + 1) if number % d == 0)


def _ratio_text(ratio: Fraction) -> str:
    return f"{ratio.numerator}:{ratio.denominator}" if ratio.denominator != 1 else f"{ratio.numerator}:1"


def _require(condition: bool, parameter: str, message: str) -> None:
    if not condition:
        raise DesignError(parameter, message)
