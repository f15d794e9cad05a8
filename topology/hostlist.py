"""Slurm hostlist expressions: ``gpu[001-004,009],spare01`` and back.

Operators already think in Slurm's notation (``scontrol show hostnames`` /
``scontrol show hostlist``), so the spec, ``--limit`` and every report use it.
The rules follow Slurm's, because a list that expands differently here than in
``srun -w`` would put a job on the wrong machines:

* commas at bracket depth 0 separate hosts; inside brackets they separate ranges;
* the zero padding of a range is the length of its lower bound (``[001-100]``
  gives ``001`` … ``100``; ``[9-10]`` gives ``9``, ``10``);
* several bracket groups in one name form a product, last group fastest
  (``r[1-2]n[1-2]`` → ``r1n1 r1n2 r2n1 r2n2``);
* a descending range (``[9-1]``) is an error, as in Slurm.

Compression works on the trailing number of each name, sorts and removes
duplicates, which is what ``scontrol show hostlist`` prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

#: Upper bound on the hosts one expression may produce. A typo such as
#: ``gpu[001-99999999]`` must become an error, not a 100-million-entry list.
MAX_HOSTS = 100_000

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """A hostlist expression that cannot be expanded.

    ``column`` is the 1-based position in the expression, so a caller that
    knows where the expression sits in a file can point at the exact character.
    """

    def __init__(self, message: str, expression: str, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression
        self.column = column

    def __str__(self) -> str:
        return f"{self.message} (in {self.expression!r} at column {self.column})"


def expand(expression: str, *, limit: int = MAX_HOSTS) -> list[str]:
    """Return the host names of ``expression`` in Slurm's order, duplicates kept."""
    hosts: list[str] = []
    for start, token in _split_top_level(expression):
        if not token:
            raise HostlistError("empty host name", expression, start + 1)
        for name in _expand_token(expression, start, token, limit - len(hosts)):
            hosts.append(name)
    return hosts


def _split_top_level(expression: str) -> list[tuple[int, str]]:
    """Split on commas outside brackets, remembering each piece's offset."""
    pieces: list[tuple[int, str]] = []
    depth = 0
    start = 0
    for index, char in enumerate(expression):
        if char == "[":
            if depth:
                raise HostlistError("nested '['", expression, index + 1)
            depth = 1
        elif char == "]":
            if not depth:
                raise HostlistError("']' without '['", expression, index + 1)
            depth = 0
        elif char == "," and not depth:
            pieces.append((start, expression[start:index].strip()))
            start = index + 1
    if depth:
        raise HostlistError("'[' is never closed", expression, expression.rindex("[") + 1)
    pieces.append((start, expression[start:].strip()))
    if len(pieces) == 1 and not pieces[0][1]:
        raise HostlistError("empty hostlist", expression, 1)
    return [(offset + _leading_space(expression, offset), text) for offset, text in pieces]


def _leading_space(expression: str, offset: int) -> int:
    count = 0
    while offset + count < len(expression) and expression[offset + count].isspace():
        count += 1
    return count


def _expand_token(expression: str, start: int, token: str, budget: int) -> list[str]:
    """Expand one comma-free token such as ``rack[1-2]-gpu[01-04]``."""
    literals: list[str] = []
    choices: list[list[str]] = []
    cursor = 0
    for match in re.finditer(r"\[([^\]]*)\]", token):
        literals.append(token[cursor : match.start()])
        choices.append(_expand_brackets(expression, start + match.start(1), match.group(1), budget))
        cursor = match.end()
    literals.append(token[cursor:])
    outside_brackets = re.sub(r"\[[^\]]*\]", lambda m: "[" * len(m.group()), token)
    bad = re.search(r"[^A-Za-z0-9._\-\[]", outside_brackets)
    if bad:
        raise HostlistError(
            f"character {bad.group()!r} is not allowed in a host name", expression, start + bad.start() + 1
        )
    total = 1
    for options in choices:
        total *= len(options)
    if total > budget:
        raise HostlistError(
            f"expands to {total:,} hosts, more than the limit of {MAX_HOSTS:,}", expression, start + 1
        )
    names = []
    for combination in product(*choices):
        parts = [literals[0]]
        for value, literal in zip(combination, literals[1:], strict=True):
            parts.append(value)
            parts.append(literal)
        names.append("".join(parts))
    return names


def _expand_brackets(expression: str, start: int, body: str, budget: int) -> list[str]:
    values: list[str] = []
    offset = 0
    for item in body.split(","):
        column = start + offset + 1
        offset += len(item) + 1
        item = item.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not match:
            raise HostlistError(f"bad range {item!r}: expected N or N-M with decimal numbers", expression, column)
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise HostlistError(f"range {item!r} runs backwards ({low} > {high})", expression, column)
        if high - low + 1 + len(values) > budget:
            raise HostlistError(
                f"range {item!r} expands to {high - low + 1:,} hosts, more than the limit of {MAX_HOSTS:,}",
                expression,
                column,
            )
        width = len(low_text)
        values.extend(f"{number:0{width}d}" for number in range(low, high + 1))
    return values


@dataclass
class _Run:
    prefix: str
    low: int
    high: int
    width: int

    def accepts(self, prefix: str, digits: str) -> bool:
        return prefix == self.prefix and f"{self.high + 1:0{self.width}d}" == digits

    def render(self) -> str:
        low = f"{self.low:0{self.width}d}"
        if self.low == self.high:
            return low
        return f"{low}-{self.high:0{self.width}d}"


def sort_key(name: str) -> tuple[str, int, int, str]:
    """Order names the way ``scontrol show hostlist`` does: prefix, then number."""
    match = _TRAILING_NUMBER.match(name)
    if not match:
        return (name, -1, 0, name)
    prefix, digits = match.groups()
    return (prefix, int(digits), len(digits), name)


def compress(names: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return the shortest Slurm expression for ``names`` (sorted, duplicates removed)."""
    ordered = sorted(set(names), key=sort_key)
    groups: list[tuple[str, list[_Run] | None]] = []  # (prefix, runs) or (name, None)
    for name in ordered:
        match = _TRAILING_NUMBER.match(name)
        if not match:
            groups.append((name, None))
            continue
        prefix, digits = match.groups()
        if groups and groups[-1][1] is not None and groups[-1][0] == prefix:
            runs = groups[-1][1]
            if runs[-1].accepts(prefix, digits):
                runs[-1].high += 1
            else:
                runs.append(_Run(prefix, int(digits), int(digits), len(digits)))
        else:
            groups.append((prefix, [_Run(prefix, int(digits), int(digits), len(digits))]))
    rendered = []
    for head, maybe_runs in groups:
        if maybe_runs is None:
            rendered.append(head)
            continue
        runs = maybe_runs
        if len(runs) == 1 and runs[0].low == runs[0].high:
            rendered.append(head + runs[0].render())
        else:
            rendered.append(f"{head}[{','.join(run.render() for run in runs)}]")
    return ",".join(rendered)
