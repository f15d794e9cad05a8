"""The layering of the house, enforced from its map: docs/architecture.md's table says who may import whom, and
this test reads that table and checks every import against it (lazy imports included), so the map and the code
cannot drift apart without a failure. Beside it: no import cycles, only the CLI imports the CLI, small CLI
modules, one run lifecycle. ``test_an_edited_map_fails`` shows on a copy of the map that a drift is caught.
"""

from __future__ import annotations

import ast
import functools
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
            submodules = {f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in MODULES}
            if len(submodules) < len(node.names):  # ``from package import module`` imports the module
                names.add(module)
            names.update(submodules)
    return names


@functools.cache
def all_imports() -> dict[str, set[str]]:
    """Module -> what it imports, parsed once, when a test first asks (not at collection: every worker collects)."""
    return {name: _imports(name, path) for name, path in MODULES.items()}


def with_edges(*edges: tuple[str, str]) -> dict[str, set[str]]:
    """A copy of the import graph with ``(module, target)`` imports added: what the tests feed the rules."""
    graph = {name: set(targets) for name, targets in all_imports().items()}
    for module, target in edges:
        graph.setdefault(module, set()).add(target)
    return graph


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
        allowed = tuple(name if name.split(".")[0] in OURS or name.split(".")[0] not in _OUR_SHORT_NAMES
                        else f"provision.{name}"
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


def read_roles(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The map's readers and mutating modules (its "Reading never repairs" paragraph), as dotted names."""
    found = {}
    for role in ("Readers", "Mutating"):
        match = re.search(rf"^{role}: (.*?)\.$", text, re.MULTILINE | re.DOTALL)
        assert match, f"the map has no '{role}:' list"
        found[role] = tuple(_dotted(path) for path in re.findall(r"`([^`]+)`", match.group(1)))
    return found["Readers"], found["Mutating"]


def reader_violations(readers: tuple[str, ...], mutating: tuple[str, ...], imports: dict[str, set[str]]) -> list[str]:
    """Each reader module that reaches a mutating one, with the chain of imports that gets it there."""
    graph = nx.DiGraph((module, target) for module, targets in imports.items() for target in targets
                       if target in imports)
    problems = []
    for reader in sorted(module for module in imports if _within(module, readers)):
        if reader not in graph:
            continue
        for target in sorted(nx.descendants(graph, reader)):
            if _within(target, mutating):
                problems.append(f"{reader} reaches {target}: " + " -> ".join(nx.shortest_path(graph, reader, target)))
    return problems


def test_reading_never_repairs() -> None:
    readers, mutating = read_roles(MAP.read_text())
    assert readers and mutating
    assert reader_violations(readers, mutating, all_imports()) == []


def test_a_reader_reaching_a_mutating_module_fails() -> None:
    """An edited copy of the import graph in which the report reaches the repair loop through a helper."""
    readers, mutating = read_roles(MAP.read_text())
    edited = with_edges(("provision.report.gather", "provision.fleet.capacity"),
                        ("provision.fleet.capacity", "provision.repairs.cables"))
    problems = reader_violations(readers, mutating, edited)
    assert any(problem.startswith("provision.report.gather reaches provision.repairs.cables: "
                                  "provision.report.gather -> provision.fleet.capacity -> provision.repairs.cables")
               for problem in problems), problems


#: The composition points: the only product modules that may import the simulator (docs/architecture.md).
COMPOSITION = ("provision.hosts.inventory", "provision.pipeline", "provision.cli")


def simulator_leaks(imports: dict[str, set[str]]) -> list[str]:
    """Product modules (not the simulator, not a composition point) that import ``provision.sim``."""
    return [f"{module} imports {target}" for module, targets in sorted(imports.items())
            if not _within(module, ("provision.sim", *COMPOSITION)) and module.startswith("provision")
            for target in sorted(targets) if _within(target, ("provision.sim",))]


def test_the_simulator_is_behind_its_wall() -> None:
    assert simulator_leaks(all_imports()) == []
    edited = with_edges(("provision.network.routes", "provision.sim.cluster"))
    assert simulator_leaks(edited) == ["provision.network.routes imports provision.sim.cluster"]


def package_cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between packages (``provision.sim`` -> ``provision.network.sources`` -> ``provision.sim``): each module
    stands for its package (a top-level module for itself), so a cycle the module graph cannot see shows."""
    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else module

    graph = nx.DiGraph((package(module), package(target)) for module, targets in imports.items()
                       for target in targets if target in imports and package(module) != package(target))
    return [sorted(cycle) for cycle in nx.simple_cycles(graph)]


def test_no_cycles_between_packages() -> None:
    assert package_cycles(all_imports()) == []
    edited = with_edges(("provision.network.sources", "provision.sim.fabric"))
    assert ["provision.network", "provision.sim"] in package_cycles(edited)


def test_the_imports_are_what_the_map_says() -> None:
    assert violations(read_map(MAP.read_text()), all_imports()) == []


def test_an_edited_map_fails(tmp_path: Path) -> None:
    """A copy of the map that forgets one dependency, one that lets topology import provision and one that leaves
    a module off: each drift is named."""
    text = MAP.read_text()
    edited = text.replace("| `provision/checks/` |", "| `provision/checks/` |", 1)
    line = next(line for line in edited.splitlines() if line.startswith("| `provision/checks/` |"))
    forgetful = edited.replace(line, line.replace(", `catalog` |", " |"))
    assert forgetful != text
    assert "provision.checks.spec_expectations imports provision.catalog: the map does not allow it" in \
        violations(read_map(forgetful), all_imports())
    leaky = dict(all_imports(), **{"topology.hostlist": all_imports()["topology.hostlist"] | {"provision.spec"}})
    assert "topology.hostlist imports provision.spec: the map does not allow it" in violations(read_map(text), leaky)
    unplaced = dict(all_imports(), **{"provision.newcomer": {"provision.spec"}})
    assert "provision.newcomer is on no row of the map" in violations(read_map(text), unplaced)
    third_party = dict(all_imports(), **{"fabric_tests.agent": all_imports()["fabric_tests.agent"] | {"numpy"}})
    assert "fabric_tests.agent imports numpy: the map allows only ['torch']" in \
        violations(read_map(text), third_party)


def test_the_top_level_is_the_composition_root_and_its_leaves() -> None:
    """``provision/`` keeps at most six files at its top (issue 52: thirty had grown there); every other module is
    in a package whose docstring says its job."""
    top = sorted(path.name for path in (ROOT / "provision").glob("*.py"))
    assert len(top) <= 6, top
    packages = {path.parent for name, path in MODULES.items() if name.startswith("provision.")} - {ROOT / "provision"}
    silent = sorted(str(package.relative_to(ROOT)) for package in packages if not (package / "__init__.py").exists()
                    or not ast.get_docstring(ast.parse((package / "__init__.py").read_text())))
    assert silent == []


def test_only_the_cli_imports_the_cli() -> None:
    bad = sorted(f"{module} imports {target}" for module, targets in all_imports().items()
                 if not module.startswith("provision.cli") and module != "provision.__main__"
                 for target in targets if target == "provision.cli" or target.startswith("provision.cli."))
    assert bad == []


def test_no_import_cycles() -> None:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    graph.add_edges_from((module, target) for module, targets in all_imports().items()
                         for target in targets if target in MODULES and target != module)
    # a package's __init__ importing its own submodules is how packages are assembled, not a cycle
    cycles = [cycle for cycle in nx.simple_cycles(graph)
              if not any(cycle[(i + 1) % len(cycle)].startswith(cycle[i] + ".") for i in range(len(cycle)))]
    assert cycles == []


def test_each_cli_module_stays_small() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in (ROOT / "provision" / "cli").glob("*.py")}
    assert sizes and max(sizes.values()) < 250, sizes


def test_one_run_lifecycle() -> None:
    """Only provision/run/context.py takes the lock, opens and ends runs: no command writes its own copy."""
    lifecycle = ("ClusterLock(", "RunRecord(", ".start_run(", ".finish_run(", ".close_abandoned_runs(")
    copies = sorted(f"{name} calls {call}" for name, path in MODULES.items()
                    if name.startswith("provision") and name not in ("provision.run.context", "provision.state.store",
                                                                      "provision.state.lock", "provision.run.record")
                    for call in lifecycle if call in path.read_text())
    assert copies == []
