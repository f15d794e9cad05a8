"""A fact: what is read from a host (a command, a file, or a folder's symlinks) and the pure parser of it.

The pyinfra way: the command sits beside its parser in the fact's module, so what runs on a host and how its
output is understood are read, changed and tested together. ``needs_root`` says the read is refused to an
unprivileged user on a real host (``dmesg`` under ``kernel.dmesg_restrict=1``, ``lspci -vvv``'s capability
blocks), so the session runs it through the become method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Source = Literal["command", "file", "links"]


@dataclass(frozen=True)
class Fact:
    name: str
    source: Source
    target: tuple[str, ...]  # argv for a command; (path,) for a file or a folder of links
    parse: Callable[[Any], Any]
    needs_root: bool = False

    @property
    def argv(self) -> list[str]:
        assert self.source == "command", self.name
        return list(self.target)

    @property
    def path(self) -> str:
        assert self.source in ("file", "links"), self.name
        return self.target[0]


def command(name: str, argv: list[str], parse: Callable[[str], Any], *, needs_root: bool = False) -> Fact:
    return Fact(name, "command", tuple(argv), parse, needs_root)


def file(name: str, path: str, parse: Callable[[str], Any]) -> Fact:
    return Fact(name, "file", (path,), parse)


def links(name: str, path: str, parse: Callable[[dict[str, str]], Any]) -> Fact:
    return Fact(name, "links", (path,), parse)
