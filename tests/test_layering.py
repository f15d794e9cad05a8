"""The layering of the house, enforced from its map: docs/architecture.md's table says who may import whom, and
this test reads that table and checks every import against it (lazy imports included), so the map and the code
cannot drift apart without a failure. Beside it: no import cycles, only the CLI imports the CLI, small CLI
modules, one run lifecycle. ``test_an_edited_map_fails`` shows on a copy of the map that a drift is caught.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.fast

PACKAGES = ("provision", "topology", "fabric_tests")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``path`` imports anywhere in its body, as absolute dotted names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in MODULES)
    return names


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


MAP = ROOT / "docs" / "architecture.md"
OURS = ("provision", "topology", "fabric_tests")
ALWAYS = set(sys.stdlib_module_names) | {"__future__", "provision"}  # the standard library, our package's version


@dataclass(frozen=True)
class Row:
    owns: tuple[str, ...]  # dotted names: a folder's (``provision/spec/``) owns its modules, a file's only itself
    folders: tuple[str, ...]
    may_import: tuple[str, ...]  # ours, as dotted prefixes, and third-party top-level names
    everything: bool


def _dotted(path: str) -> str:
    path = path.strip().strip("/").removesuffix(".py").removesuffix("/__init__")
    return path.replace("/", ".")


def read_map(text: str) -> list[Row]:
    """The package table: each row's modules (first column) and what they may import (last column)."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`") or cells[0].startswith("`playbooks"):
            continue
        paths = re.findall(r"`([^`]+)`", cells[0])
        owns = tuple(_dotted(path) for path in paths)
        folders = tuple(_dotted(path) for path in paths if path.endswith("/"))
        names = re.findall(r"`([^`]+)`", cells[2])
        allowed = tuple(name if name.split(".")[0] in OURS or name not in _OUR_SHORT_NAMES else f"provision.{name}"
                        for name in names)
        rows.append(Row(owns, folders, allowed, cells[2] == "everything"))
    return rows


_OUR_SHORT_NAMES = {name.split(".")[1] for name in MODULES if name.startswith("provision.")}


def _row_of(module: str, rows: list[Row]) -> Row | None:
    best: tuple[int, Row] | None = None
    for row in rows:
        for owned in row.owns:
            inside = module == owned or (owned in row.folders and module.startswith(owned + "."))
            if inside and (best is None or len(owned) > best[0]):
                best = (len(owned), row)
    return best[1] if best else None


def _within(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == prefix or target.startswith(prefix + ".") for prefix in prefixes)


def violations(rows: list[Row], imports: dict[str, set[str]]) -> list[str]:
    """Every import the map does not allow, every module it does not place, every name in it that is no module."""
    problems = []
    for row in rows:
        for name in (*row.owns, *row.may_import):
            if name.split(".")[0] in OURS and not any(_within(module, (name,)) for module in imports):
                problems.append(f"the map names {name}, which is not a module")
    for module, targets in sorted(imports.items()):
        row = _row_of(module, rows)
        if row is None:
            problems.append(f"{module} is on no row of the map")
            continue
        if row.everything:
            continue
        externals = {name for name in row.may_import if name.split(".")[0] not in OURS}
        for target in sorted(targets):
            top = target.split(".")[0]
            if top in OURS:
                if target != "provision" and not _within(target, (*row.owns, *row.may_import)):
                    problems.append(f"{module} imports {target}: the map does not allow it")
            elif top not in ALWAYS and externals and top not in externals:
                problems.append(f"{module} imports {target}: the map allows only {sorted(externals)}")
    return problems


def test_the_imports_are_what_the_map_says() -> None:
    assert violations(read_map(MAP.read_text()), IMPORTS) == []


def test_an_edited_map_fails(tmp_path: Path) -> None:
    """A copy of the map that forgets one dependency, one that lets topology import provision and one that leaves
    a module off: each drift is named."""
    text = MAP.read_text()
    edited = text.replace("| `provision/checks/` |", "| `provision/checks/` |", 1)
    line = next(line for line in edited.splitlines() if line.startswith("| `provision/checks/` |"))
    forgetful = edited.replace(line, line.replace(", `catalog` |", " |"))
    assert forgetful != text
    assert "provision.checks.spec_expectations imports provision.catalog: the map does not allow it" in \
        violations(read_map(forgetful), IMPORTS)
    leaky = dict(IMPORTS, **{"topology.hostlist": IMPORTS["topology.hostlist"] | {"provision.spec"}})
    assert "topology.hostlist imports provision.spec: the map does not allow it" in violations(read_map(text), leaky)
    unplaced = dict(IMPORTS, **{"provision.newcomer": {"provision.spec"}})
    assert "provision.newcomer is on no row of the map" in violations(read_map(text), unplaced)
    third_party = dict(IMPORTS, **{"fabric_tests.agent": IMPORTS["fabric_tests.agent"] | {"numpy"}})
    assert "fabric_tests.agent imports numpy: the map allows only ['torch']" in \
        violations(read_map(text), third_party)


def test_only_the_cli_imports_the_cli() -> None:
    bad = sorted(f"{module} imports {target}" for module, targets in IMPORTS.items()
                 if not module.startswith("provision.cli") and module != "provision.__main__"
                 for target in targets if target == "provision.cli" or target.startswith("provision.cli."))
    assert bad == []


def test_no_import_cycles() -> None:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    graph.add_edges_from((module, target) for module, targets in IMPORTS.items()
                         for target in targets if target in MODULES and target != module)
    # a package's __init__ importing its own submodules is how packages are assembled, not a cycle
    cycles = [cycle for cycle in nx.simple_cycles(graph)
              if not any(cycle[(i + 1) % len(cycle)].startswith(cycle[i] + ".") for i in range(len(cycle)))]
    assert cycles == []


def test_each_cli_module_stays_small() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in (ROOT / "provision" / "cli").glob("*.py")}
    assert sizes and max(sizes.values()) < 250, sizes


def test_one_run_lifecycle() -> None:
    """Only provision/run_context.py takes the lock, opens and ends runs: no command writes its own copy."""
    lifecycle = ("ClusterLock(", "RunRecord(", ".start_run(", ".finish_run(", ".close_abandoned_runs(")
    copies = sorted(f"{name} calls {call}" for name, path in MODULES.items()
                    if name.startswith("provision") and name not in ("provision.run_context", "provision.state.store",
                                                                      "provision.state.lock", "provision.runs")
                    for call in lifecycle if call in path.read_text())
    assert copies == []
