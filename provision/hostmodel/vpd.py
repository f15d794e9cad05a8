"""PCI Vital Product Data, byte for byte, as a card's firmware exposes it in sysfs ``vpd`` (PCI Local Bus spec
6.4): the identifier string (large resource tag 0x82), the read-only fields (0x90: two-letter keywords, a length
byte, the value; closed by ``RV``, whose first byte makes the sum of every byte so far zero), the end tag (0x78).

The simulated host writes these bytes for its ConnectX functions and the simulated ``lspci -vv`` decodes them, so
the fields preflight reads (an HGX B200's NVSwitch bridge ports say ``SMDL=SW_MNG`` in theirs) reach it the way
the real card's do: through the kernel's file and lspci's print of it.
"""

from __future__ import annotations

import struct

IDENTIFIER, READ_ONLY, END = 0x82, 0x90, 0x78


def encode(product: str, fields: list[tuple[str, str]]) -> bytes:
    """The VPD image: ``product`` as the identifier string, ``fields`` (keyword, value) as the read-only block,
    then ``RV`` with the checksum and one reserved byte (what ConnectX cards print: "1 byte(s) reserved")."""
    name = product.encode("ascii")
    data = bytearray([IDENTIFIER]) + struct.pack("<H", len(name)) + name
    body = bytearray()
    for keyword, value in fields:
        raw = value.encode("ascii")
        if len(keyword) != 2 or len(raw) > 255:
            raise ValueError(f"VPD field {keyword!r}: a keyword is two characters, a value at most 255 bytes")
        body += keyword.encode("ascii") + bytes([len(raw)]) + raw
    body += b"RV" + bytes([2])
    data += bytes([READ_ONLY]) + struct.pack("<H", len(body) + 2) + body
    data.append((-sum(data)) & 0xFF)  # the checksum: every byte from the first through this one sums to zero
    data.append(0)  # the reserved byte
    data.append(END)
    return bytes(data)


def decode(data: bytes) -> tuple[str, list[tuple[str, str]], bool]:
    """The identifier string, the read-only fields (``RV`` left out) and whether the checksum holds. Raises
    ``ValueError`` on an image that ends inside a resource (what lspci reports as an unreadable VPD)."""
    product, fields, checksum_good, offset = "", [], False, 0
    while offset < len(data):
        tag = data[offset]
        if tag == END or tag & 0x80 == 0:
            break
        if offset + 3 > len(data):
            raise ValueError("VPD ends inside a resource header")
        length = struct.unpack_from("<H", data, offset + 1)[0]
        start, stop = offset + 3, offset + 3 + length
        if stop > len(data):
            raise ValueError("VPD ends inside a resource")
        if tag == IDENTIFIER:
            product = data[start:stop].decode("ascii", "replace")
        elif tag == READ_ONLY:
            position = start
            while position + 3 <= stop:
                keyword = data[position:position + 2].decode("ascii", "replace")
                size = data[position + 2]
                value = data[position + 3:position + 3 + size]
                if keyword == "RV":
                    checksum_good = sum(data[:position + 4]) & 0xFF == 0
                else:
                    fields.append((keyword, value.decode("ascii", "replace")))
                position += 3 + size
        offset = stop
    return product, fields, checksum_good
