"""The one error shape every line-oriented parser here raises: the message, located by line number."""

from __future__ import annotations


class LineError(ValueError):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message
