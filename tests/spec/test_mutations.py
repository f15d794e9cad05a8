"""``provision validate`` on thousands of mutated specs, in structure and in text: exit 0 or 2, never 3.

Where the hypothesis fuzz (tests/spec/test_fuzz.py) edits the parsed data, this one edits what a user edits: the
file. Keys typed with a bracket, a quote or a colon; a section of the wrong type; a subtree grafted from
elsewhere; bytes inserted, dropped or replaced. Each case is drawn from its own seed, so a failure names the
one case to replay. ``PROVISION_FUZZ_CASES`` sets the count (the long run: 10000 or more); the default keeps
``make test`` quick. The validate command runs in-process, through the same ``main`` that maps exits.
"""

from __future__ import annotations

import copy
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.cli import main
from tests.conftest import EXAMPLES, example_text
from tests.spec.test_fuzz import _paths  # every path into a parsed spec

pytestmark = pytest.mark.fast  # pure: part of make test-fast

CASES = int(os.environ.get("PROVISION_FUZZ_CASES", "600"))
TEXTS = {path.name: example_text(path.name) for path in sorted(EXAMPLES.glob("*.yaml"))}
DATA = {name: yaml.safe_load(text) for name, text in TEXTS.items()}
KEY_NOISE = ["[", "]", '"', "'", ":", "{", "}", "&", "*", "!", "#", ",", "? ", "- ", "|", "%", "@", "`"]
ODD_VALUES: list[Any] = [None, [], {}, "", "[", 0, -1, 1.5e300, True, "x" * 300, ["a", 1], {"k": [None]}, "1:1",
                         "sim[01-99999]", "\u00e9\u4e2d", "0x10", ".inf"]


def _get(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


def _key_edit(rng: random.Random, text: str) -> str:
    """A key (a ``name:`` at the start of a line) typed with a stray bracket, quote or colon."""
    lines = text.splitlines(keepends=True)
    keyed = [index for index, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("#")]
    index = rng.choice(keyed)
    line = lines[index]
    colon = line.index(":")
    indent = len(line) - len(line.lstrip(" -"))
    where = rng.randint(indent, colon)
    lines[index] = line[:where] + rng.choice(KEY_NOISE) + line[where:]
    return "".join(lines)


def _byte_edit(rng: random.Random, text: str) -> bytes:
    raw = bytearray(text.encode())
    for _ in range(rng.randint(1, 4)):
        where = rng.randrange(len(raw))
        action = rng.choice(("insert", "delete", "replace"))
        if action == "insert":
            raw[where:where] = bytes([rng.randrange(256)])
        elif action == "delete":
            del raw[where]
        else:
            raw[where] = rng.randrange(256)
    return bytes(raw)


def _wrong_type(rng: random.Random, data: dict[str, Any]) -> Any:
    """The document, or one top-level section, of the wrong type."""
    if rng.random() < 0.2:
        return rng.choice([[data], "cluster", 42, None, [list(data)]])
    mutated = copy.deepcopy(data)
    mutated[rng.choice(list(mutated))] = rng.choice(ODD_VALUES)
    return mutated


def _graft(rng: random.Random, data: dict[str, Any]) -> Any:
    """A subtree of one example planted at a path of another (or the same) one."""
    donor = DATA[rng.choice(list(DATA))]
    mutated = copy.deepcopy(data)
    targets = [path for path in _paths(mutated) if path]
    path = rng.choice(targets)
    piece = copy.deepcopy(_get(donor, rng.choice(_paths(donor))))
    parent = _get(mutated, path[:-1])
    if isinstance(parent, dict) and rng.random() < 0.3:
        parent[f"{path[-1]}_graft"] = piece
    else:
        parent[path[-1]] = piece
    return mutated


def _structure(rng: random.Random, data: dict[str, Any]) -> Any:
    mutated = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        paths = [path for path in _paths(mutated) if path]
        if not paths:
            break
        path = rng.choice(paths)
        parent = _get(mutated, path[:-1])
        action = rng.choice(("replace", "delete", "rename", "wrap"))
        if action == "replace":
            parent[path[-1]] = rng.choice(ODD_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "rename" and isinstance(parent, dict):
            parent[f"{path[-1]}{rng.choice(KEY_NOISE)}"] = parent.pop(path[-1])
        elif action == "wrap":
            parent[path[-1]] = [parent[path[-1]]]
    return mutated


def mutant(seed: int) -> tuple[str, bytes]:
    """Case ``seed``: which mutation, and the file's bytes."""
    rng = random.Random(seed)
    name = rng.choice(list(TEXTS))
    kind = rng.choice(("key", "bytes", "wrong_type", "graft", "structure"))
    if kind == "key":
        return kind, _key_edit(rng, TEXTS[name]).encode()
    if kind == "bytes":
        return kind, _byte_edit(rng, TEXTS[name])
    change = {"wrong_type": _wrong_type, "graft": _graft, "structure": _structure}[kind]
    return kind, yaml.safe_dump(change(rng, DATA[name]), allow_unicode=True, sort_keys=False).encode()


def test_key_with_a_bracket_is_a_located_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The crash the issue found: ``clu[ster:`` for ``cluster:`` made validate exit 3 (IndexError)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(re.sub(r"^cluster:", "clu[ster:", TEXTS["sim-cluster.yaml"], count=1, flags=re.MULTILINE))
    assert main(["validate", str(spec)]) == 2
    assert re.search(r"spec\.yaml:\d+:1: clu\[ster: unknown key 'clu\[ster' \(hint: did you mean 'cluster'\?\)",
                     capsys.readouterr().err)


def test_mutated_spec_files_never_make_validate_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    kinds: dict[str, int] = {}
    for seed in range(CASES):
        kind, raw = mutant(seed)
        kinds[kind] = kinds.get(kind, 0) + 1
        spec.write_bytes(raw)
        code = main(["validate", str(spec)])
        captured = capsys.readouterr()
        assert code in (0, 2), f"case {seed} ({kind}) exited {code}:\n{captured.err[-2000:]}\n--- spec:\n{raw[:3000]!r}"
        if code == 2:  # every refusal is located: FILE:LINE:COL: ...
            lines = [line for line in captured.err.splitlines() if line.strip()]
            assert lines and all(line.startswith(f"{spec}:") for line in lines), (seed, kind, captured.err[-800:])
    assert len(kinds) == 5 and min(kinds.values()) >= CASES // 10  # every kind of mutation was exercised


def test_a_problem_on_line_100_keeps_its_location(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rich turned ``:100:`` into an emoji: ``spec.yaml:100:5:`` printed as ``spec.yaml💯5:``."""
    lines = TEXTS["sim-cluster.yaml"].splitlines()
    padding = [f"# filler {number}" for number in range(99)]
    spec = tmp_path / "spec.yaml"
    spec.write_text("\n".join([*padding, "bogus_key: 1", *lines]) + "\n")
    assert main(["validate", str(spec)]) == 2
    assert f"{spec}:100:1: bogus_key: unknown key 'bogus_key'" in capsys.readouterr().err


def test_an_address_written_as_a_boolean_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the long run: ``address_start: true`` was taken as 0.0.0.1 (pydantic reads a bool as an int)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(re.sub(r"address_start: \S+", "address_start: true", TEXTS["sim-cluster.yaml"], count=1))
    assert main(["validate", str(spec)]) == 2
    assert "address_start: write the address as a dotted quad (e.g. 10.0.0.1), not True" in capsys.readouterr().err
