"""A fact: what is read from a host (a command, a file, or a folder's symlinks) and the pure parser of it.

The pyinfra way: the command sits beside its parser in the fact's module, so what runs on a host and how its
output is understood are read, changed and tested together. ``needs_root`` says the read is refused to an
unprivileged user on a real host (``dmesg`` under ``kernel.dmesg_restrict=1``, ``lspci -vvv``'s capability
blocks), so the session runs it through the become method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

Source = Literal["command", "file", "links"]
Parsed = TypeVar("Parsed")


@dataclass(frozen=True)
class Fact(Generic[Parsed]):
    """``Fact[T]``: what its parser returns is a ``T`` (a dataclass, or a list or dict of them), so a check that
    reads it is type-checked against the fields it names."""

    name: str
    source: Source
    target: tuple[str, ...]  # argv for a command; (path,) for a file or a folder of links
    parse: Callable[[Any], Parsed]  # text for a command or a file; {name: link target} for a folder of links
    needs_root: bool = False

    @property
    def argv(self) -> list[str]:
        assert self.source == "command", self.name
        return list(self.target)

    @property
    def path(self) -> str:
        assert self.source in ("file", "links"), self.name
        return self.target[0]


def command(name: str, argv: list[str], parse: Callable[[str], Parsed], *,
            needs_root: bool = False) -> Fact[Parsed]:
    return Fact(name, "command", tuple(argv), parse, needs_root)


def file(name: str, path: str, parse: Callable[[str], Parsed]) -> Fact[Parsed]:
    return Fact(name, "file", (path,), parse)


def links(name: str, path: str, parse: Callable[[dict[str, str]], Parsed]) -> Fact[Parsed]:
    return Fact(name, "links", (path,), parse)
