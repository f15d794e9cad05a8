"""Fat-tree dimensions against the DGX SuperPOD reference table (field guide 1.2)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from topology.design import DesignError, FabricParameters, dimension

pytestmark = pytest.mark.fast  # pure: part of make test-fast


@pytest.mark.parametrize(
    ("hosts", "tiers", "leaves", "spines", "cores", "cables"),
    [
        (128, 2, 32, 16, 0, 1024 + 1024),  # 4 SUs
        (256, 2, 64, 32, 0, 2048 + 2048),  # 8 SUs
        (512, 3, 128, 128, 64, 12_288),  # 16 SUs: the 4,096-GPU reference
    ],
)
def test_superpod_reference_sizes(hosts: int, tiers: int, leaves: int, spines: int, cores: int, cables: int) -> None:
    dims = dimension(FabricParameters(hosts=hosts, rails=8, hosts_per_su=32, switch_radix=64))
    assert (dims.tiers, dims.leaves, dims.spines, dims.cores, dims.cables) == (tiers, leaves, spines, cores, cables)
    assert dims.switches == leaves + spines + cores


def test_every_switch_is_non_blocking() -> None:
    dims = dimension(FabricParameters(hosts=4096, rails=8, hosts_per_su=32, switch_radix=64))
    assert dims.leaf_uplinks >= dims.leaf_host_ports
    assert dims.spine_uplinks >= dims.spine_downlinks
    assert dims.leaf_host_ports + dims.leaf_uplinks <= 64
    assert dims.spine_downlinks + dims.spine_uplinks <= 64
    assert dims.leaf_uplinks % dims.spines_per_group == 0  # uplinks spread evenly
    assert dims.spine_core_cables == dims.leaf_spine_cables == dims.host_cables


def test_three_tier_limit_is_radix_cubed_over_four() -> None:
    largest = dimension(FabricParameters(hosts=8192, rails=8, hosts_per_su=32, switch_radix=64))
    assert largest.host_cables == 64**3 // 4
    with pytest.raises(DesignError) as caught:
        dimension(FabricParameters(hosts=8193, rails=8, hosts_per_su=32, switch_radix=64))
    assert caught.value.parameter == "nodes"
    assert "at most 8192 hosts" in caught.value.message


def test_oversubscription_halves_the_uplinks() -> None:
    dims = dimension(FabricParameters(hosts=64, rails=8, hosts_per_su=40, switch_radix=64,
                                      oversubscription=Fraction(2)))
    assert (dims.leaf_host_ports, dims.leaf_uplinks) == (40, 20)


@pytest.mark.parametrize(
    ("overrides", "parameter", "words"),
    [
        ({"hosts_per_su": 40}, "hosts_per_su", "80 ports"),
        ({"switch_radix": 7}, "switch_radix", "even"),
        ({"tiers": 2, "hosts": 512}, "tiers", "use three tiers"),
        ({"rails": 40, "hosts": 512, "spine_groups": "su_block"}, "spine_groups", "rail_plane"),
        ({"oversubscription": Fraction(1, 2)}, "oversubscription", "never below 1"),
    ],
)
def test_impossible_designs_name_the_parameter(overrides: dict, parameter: str, words: str) -> None:
    params = {"hosts": 64, "rails": 8, "hosts_per_su": 32, "switch_radix": 64, **overrides}
    with pytest.raises(DesignError) as caught:
        dimension(FabricParameters(**params))
    assert caught.value.parameter == parameter
    assert words in caught.value.message


def test_rail_planes_when_rails_exceed_half_the_radix() -> None:
    dims = dimension(FabricParameters(hosts=16, rails=8, hosts_per_su=4, switch_radix=8))
    assert dims.spine_grouping == "rail_plane"
    assert (dims.tiers, dims.leaves, dims.spines, dims.cores) == (3, 32, 32, 16)
