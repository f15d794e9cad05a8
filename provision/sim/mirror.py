"""The package repositories a simulated host can reach, as a stock Ubuntu 22.04 host reaches the real ones.

A stock image knows Ubuntu's archive only (``/etc/apt/sources.list``); NVIDIA's CUDA repository (the driver, the
fabric manager, the toolkit) and NVIDIA's DOCA or MLNX_OFED repositories (the InfiniBand stack) answer only once
a source names them *and* its ``signed-by`` keyring holds the key their Release files are signed with. The
simulator recognises the vendors' public URLs for Ubuntu 22.04 on x86_64 (another distribution's path is a 404,
as on the real server; a DOCA or MLNX_OFED repository serves the release its path names, whatever the spec
pins) and signs each with a stand-in key of its own (:func:`stand_in_key`): the keys in ``examples/keys/``.
A site's own mirror at another URL is not simulated: its host does not resolve, as an unknown host would not.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

UBUNTU = "ubuntu"
#: What a stock image's sources.list names (the jammy archive; updates and security add newer versions only).
UBUNTU_LINE = "deb http://archive.ubuntu.com/ubuntu jammy main restricted universe multiverse"

_VENDORS = (
    ("cuda", re.compile(r"^https?://developer\.download\.nvidia\.com/compute/cuda/repos/(?P<path>[^/]+/[^/]+)/?$"),
     "ubuntu2204/x86_64"),
    ("doca", re.compile(r"^https?://linux\.mellanox\.com/public/repo/doca/(?P<release>[0-9][0-9.-]*)/"
                        r"(?P<path>[^/]+/[^/]+)/?$"), "ubuntu22.04/x86_64"),
    ("mlnx_ofed", re.compile(r"^https?://linux\.mellanox\.com/public/repo/mlnx_ofed/(?P<release>[0-9][0-9.-]*)/"
                             r"(?P<path>[^/]+/[^/]+)/?$"), "ubuntu22.04/x86_64"),
)
#: The package each InfiniBand-stack repository serves at the release its URL names.
STACK_PACKAGE = {"doca": "doca-ofed", "mlnx_ofed": "mlnx-ofed-all"}


@dataclass(frozen=True)
class Origin:
    """A repository as the simulated network answers for it: which vendor, which release (DOCA, MLNX_OFED), or
    why it does not answer (``missing``: the server has no such path; ``unresolved``: no such host)."""

    vendor: str | None
    release: str | None = None
    failure: str | None = None


def origin(url: str) -> Origin:
    if url.rstrip("/") == "http://archive.ubuntu.com/ubuntu":
        return Origin(UBUNTU)
    for vendor, pattern, path in _VENDORS:
        found = pattern.match(url)
        if found:
            if found.group("path") != path:
                return Origin(None, failure="missing")
            return Origin(vendor, found.groupdict().get("release"))
    host = re.sub(r"^[a-z]+://([^/]+).*$", r"\1", url)
    if host in ("developer.download.nvidia.com", "linux.mellanox.com"):
        return Origin(None, failure="missing")
    return Origin(None, failure="unresolved")


def stand_in_key(vendor: str) -> str:
    """The armored public key the simulated ``vendor`` signs its repository with (not the vendor's real key: a
    host given the real one is refused, as a real host given the wrong key is)."""
    body = base64.b64encode(f"provision simulator: stand-in signing key of the {vendor} repository".encode())
    lines = [body[index : index + 64].decode() for index in range(0, len(body), 64)]
    return "\n".join(["-----BEGIN PGP PUBLIC KEY BLOCK-----", "Comment: provision's simulated package mirror", "",
                      *lines, "-----END PGP PUBLIC KEY BLOCK-----", ""])


def key_id(vendor: str) -> str:
    """The key id apt names in its NO_PUBKEY error for ``vendor``'s repository."""
    return hashlib.sha256(stand_in_key(vendor).encode()).hexdigest()[:16].upper()


def list_name(url: str, suite: str) -> str:
    """The file apt keeps a repository's package index in under ``/var/lib/apt/lists`` (its URI, scheme dropped,
    ``_`` escaped and ``/`` turned into ``_``)."""
    uri = re.sub(r"^[a-z]+://", "", url.rstrip("/")).replace("_", "%5f")
    if suite.endswith("/"):
        path = uri + ("_" + suite.strip("./").replace("/", "_") if suite.strip("./") else "")
        return path.replace("/", "_") + "_Packages"
    return (uri + f"/dists/{suite}/main/binary-amd64").replace("/", "_") + "_Packages"


def packages_text(packages: dict[str, list[str]]) -> str:
    """A Packages index in apt's own stanza format."""
    stanzas = [f"Package: {name}\nArchitecture: amd64\nVersion: {version}\n"
               for name in sorted(packages) for version in packages[name]]
    return "\n".join(stanzas)


def read_packages(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        if "Package" in fields and "Version" in fields:
            found.setdefault(fields["Package"], []).append(fields["Version"])
    return found
