"""Evidence a person hands a command (an event log, a syslog, a dump, a map, a plan): the silence rule for files.

Silence is not health. A file of which nothing was understood — empty, binary, another tool's format — is refused
with :class:`EvidenceError` (exit 2), naming the file, what was expected and the first lines that could not be read,
and nothing is concluded from it. A file partly understood is read; its :class:`Reading` says how many lines were
not, with samples, and the command puts that in its verdict (human and JSON), never only in a notice above a
"nothing found". Every evidence option of every command is walked by ``tests/test_evidence_inputs.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import Refusal

#: Lines of a refused file shown in the error, and samples of a partly read file kept.
SHOWN = 3


class EvidenceError(Refusal, ValueError):
    """An evidence file that cannot be used at all (as opposed to lines inside it that cannot)."""


@dataclass
class Reading:
    """What was understood of one evidence file."""

    path: str
    expected: str
    lines: int  # non-blank lines (or entries) in the file
    not_understood: int
    samples: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return self.not_understood > 0

    def line(self) -> str:
        """``FILE: 3 of 40 line(s) not understood as EXPECTED, e.g. '...'``."""
        example = f", e.g. {self.samples[0]!r}" if self.samples else ""
        return (f"{self.path}: {self.not_understood} of {self.lines} line(s) not understood as {self.expected}"
                f"{example}")

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.path, "expected": self.expected, "lines": self.lines,
                "not_understood": self.not_understood, "samples": self.samples}


def nonblank(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def refused(path: Path | str, expected: str, text: str) -> EvidenceError:
    """The error for a file nothing of which could be read: the file, what it should have been, how it begins."""
    lines = nonblank(text)
    if not lines:
        return EvidenceError(f"{path}: the file is empty; expected {expected}")
    shown = "; ".join(repr(line[:100]) for line in lines[:SHOWN])
    return EvidenceError(f"{path}: nothing in it could be read as {expected} ({len(lines)} line(s)); "
                         f"it begins: {shown}")


def reading(path: Path | str, expected: str, text: str, *, understood: int, lines: int | None = None,
            samples: list[str] | None = None, log: bool = False) -> Reading:
    """The :class:`Reading` of a file of which ``understood`` lines (or entries) were read; refused when none was.

    ``log``: the file is a log a daemon appends whole lines to (UFM's event.log, a syslog), so a last line without
    its end of line was cut (a copy taken mid-write, a truncated transfer): it counts as not understood, whatever
    it parsed as."""
    if understood <= 0:
        raise refused(path, expected, text)
    total = len(nonblank(text)) if lines is None else lines
    missing = max(0, total - understood)
    shown = list(samples or [])
    if log and text.strip() and not text.endswith("\n"):
        last = text.rsplit("\n", 1)[-1]
        missing, shown = missing + 1, [f"{last[-60:]} (cut: no end of line)", *shown]
    return Reading(str(path), expected, total, min(missing, total), [sample[:200] for sample in shown[:SHOWN]])


def read_text(path: Path) -> str:
    """A file's text (bytes that are not UTF-8 replaced, so a binary file is refused by what it holds)."""
    try:
        return path.read_text(errors="replace")
    except OSError as error:
        raise EvidenceError(f"{path}: {error.strerror or error}") from None
