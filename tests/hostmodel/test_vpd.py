"""The product data a simulated ConnectX card's firmware serves (sysfs ``vpd``) as the PCI spec lays it out: what
the simulated ``lspci -vv`` decodes is what was written, its checksum holds, and an image changed or cut is told
(lspci's "checksum bad", or not readable)."""

from __future__ import annotations

import pytest

from provision.hostmodel import vpd
from provision.hostmodel.devices import RAIL_CARD, card_vpd

pytestmark = pytest.mark.fast


def test_a_cards_fields_come_back_as_written_with_a_good_checksum() -> None:
    (_, product), *fields = card_vpd(RAIL_CARD, "MT2314XZ0JUZ", 0)
    image = vpd.encode(product, fields)
    assert image[0] == vpd.IDENTIFIER and image[-1] == vpd.END
    assert sum(image[:-2]) & 0xFF == 0  # through the checksum byte; then the reserved byte and the end tag
    assert vpd.decode(image) == (product, fields, True)


def test_a_changed_byte_fails_the_checksum_and_a_cut_image_is_unreadable() -> None:
    image = bytearray(vpd.encode("NVIDIA ConnectX-7", [("SN", "MT2314XZ0JUZ")]))
    image[image.index(b"MT23")] ^= 0x01
    assert vpd.decode(bytes(image))[2] is False
    with pytest.raises(ValueError, match="ends inside"):
        vpd.decode(bytes(image[:12]))


def test_a_bridge_function_says_it_manages_the_nvswitches() -> None:
    fields = dict(card_vpd(RAIL_CARD, "MT2314XZ0JUZ", 1, management=True))
    assert fields["VA"].endswith(":SMDL=SW_MNG") and fields["VU"].endswith("S0D0F1")
    assert "SMDL" not in dict(card_vpd(RAIL_CARD, "MT2314XZ0JUZ", 0))["VA"]
