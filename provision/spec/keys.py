"""What a repository key file must be before any node is told to trust it."""

from __future__ import annotations

ARMOR_HEADER = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"


def key_form(data: bytes) -> str | None:
    """``armored``, ``binary`` (an OpenPGP public-key packet first, in the old or the new packet format), or
    None when the bytes are not a public key (an HTML error page saved by a failed download, a private key).

    apt reads a ``signed-by`` keyring by its file name (sources.list(5)): ``.asc`` must hold an armored key and
    ``.gpg`` a binary one, so the form decides the name the key is copied to."""
    if data.lstrip().startswith(ARMOR_HEADER):
        return "armored"
    if data[:1] and data[0] & 0x80:
        first = data[0]
        tag = (first & 0x3F) if first & 0x40 else (first >> 2) & 0x0F
        if tag == 6:
            return "binary"
    return None
