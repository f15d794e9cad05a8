"""Located spec problems, printed the way compilers print them.

``FILE:LINE:COL: path.to.field: message (hint: ...)`` lets an editor jump to the
line and lets a person fix every problem in one pass, because all of them are
collected before anything is reported.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from provision.errors import Refusal


@dataclass(frozen=True, order=True)
class Location:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class SpecIssue:
    location: Location
    path: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.location}: {self.path}: " if self.path else f"{self.location}: "
        return where + self.message + (f" (hint: {self.hint})" if self.hint else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.location.file,
            "line": self.location.line,
            "column": self.location.column,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
        }


class SpecError(Refusal):
    """One or more problems that make a spec unusable; nothing may run."""

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues = sorted(issues, key=lambda issue: (issue.location, issue.path))
        super().__init__("\n".join(str(issue) for issue in self.issues))


def dotted(path: tuple[str | int, ...]) -> str:
    """``("nodes", "groups", 0, "hosts")`` → ``nodes.groups[0].hosts``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + part
    return text


def did_you_mean(word: str, choices: Iterable[str], *, list_all: bool = True) -> str:
    """A hint for a misspelt name; ``list_all=False`` for long lists such as host names."""
    options = sorted(choices)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "allowed here: " + ", ".join(options) if options and list_all else ""
