"""The one way to write a file inside a simulated host's root.

Hosts of one hardware profile share most files with a template through hard
links, so a file is never modified in place: it is written beside itself and
renamed over, which gives the host its own copy and never leaves half a file.
"""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(content, bytes):
        temporary.write_bytes(content)
    else:
        temporary.write_text(content)
    temporary.replace(path)


def clone_tree(template: Path, target: Path) -> None:
    """Copy ``template`` to ``target``: directories made, files hard-linked, symlinks copied."""
    for directory, dirs, names in os.walk(template):
        relative = os.path.relpath(directory, template)
        destination = target if relative == "." else target / relative
        destination.mkdir(parents=True, exist_ok=True)
        for name in dirs:
            source = os.path.join(directory, name)
            if os.path.islink(source):
                os.symlink(os.readlink(source), destination / name)
        for name in names:
            source = os.path.join(directory, name)
            if os.path.islink(source):
                os.symlink(os.readlink(source), destination / name)
            else:
                os.link(source, destination / name)
