"""PCI configuration space byte for byte: the capability lists lspci walks, and ACS where the spec puts it (what
the real lspci and setpci read and edit; the parity tests compare their output with recorded real lspci)."""

from __future__ import annotations

import pytest

from provision.hostmodel import pciconfig
from provision.hostmodel.pciconfig import ACS_ENABLED_DEFAULT, ACS_OFFSET, ECAP_ACS, ECAP_AER, LinkConfig, build

pytestmark = pytest.mark.fast
GEN5_X16 = LinkConfig(max_gen=5, max_width=16, gen=5, width=16)


def test_a_bridge_with_acs_lists_it_among_its_extended_capabilities() -> None:
    space = build(vendor=0x1000, device=0xC030, class_code=0x060400, bridge=True, port_type=pciconfig.DOWNSTREAM,
                  link=GEN5_X16, acs_control=ACS_ENABLED_DEFAULT, secondary_bus=0x38, subordinate_bus=0x38)
    assert len(space) == pciconfig.CONFIG_SIZE
    assert (pciconfig.read(space, 0, 2), pciconfig.read(space, 2, 2)) == (0x1000, 0xC030)
    assert pciconfig.capabilities(space).keys() >= {pciconfig.CAP_PM, pciconfig.CAP_EXP}
    extended = pciconfig.extended_capabilities(space)
    assert extended[ECAP_AER][0] == 0x100 and extended[ECAP_ACS][0] == ACS_OFFSET
    assert pciconfig.read(space, ACS_OFFSET + 6, 2) == ACS_ENABLED_DEFAULT  # the ACS control register


def test_setpci_clears_acs_by_writing_the_control_register() -> None:
    space = build(vendor=0x1000, device=0xC030, class_code=0x060400, bridge=True, port_type=pciconfig.DOWNSTREAM,
                  link=GEN5_X16, acs_control=ACS_ENABLED_DEFAULT)
    cleared = pciconfig.write(space, ACS_OFFSET + 6, 2, 0)
    assert pciconfig.read(cleared, ACS_OFFSET + 6, 2) == 0 and pciconfig.read(space, ACS_OFFSET + 6, 2) != 0


def test_an_endpoint_without_acs_and_a_list_that_loops_end() -> None:
    gpu = build(vendor=0x10DE, device=0x2330, class_code=0x030200, bridge=False, port_type=pciconfig.ENDPOINT,
                link=GEN5_X16)
    assert ECAP_ACS not in pciconfig.extended_capabilities(gpu)
    looping = pciconfig.write(gpu, 0x100, 4, ECAP_AER | (1 << 16) | (0x100 << 20))  # next points at itself
    assert pciconfig.extended_capabilities(looping) == {ECAP_AER: (0x100, 1)}
