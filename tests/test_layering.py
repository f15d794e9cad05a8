"""The layering of the house, enforced: who may import whom, and no import cycles (lazy imports included).

- ``topology`` is the pure fabric model: it imports nothing from ``provision``.
- ``fabric_tests`` runs on the nodes: the standard library, torch and itself, nothing else.
- ``provision.spec`` describes what the user may declare: never the simulator, the pipeline or the CLI.
- ``provision.hostmodel`` is the pure model of a host's hardware: never the simulator.
- Only ``provision.cli`` imports ``provision.cli``.
- No module reaches itself through imports, at module level or inside functions.
"""

from __future__ import annotations

import ast
import sys
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


def _offenders(prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{module} imports {target}" for module, targets in IMPORTS.items()
                  if module == prefix or module.startswith(prefix + ".")
                  for target in targets if target.startswith(forbidden))


def test_topology_imports_nothing_from_provision() -> None:
    assert _offenders("topology", ("provision",)) == []


def test_fabric_tests_import_only_the_standard_library_and_torch() -> None:
    allowed = set(sys.stdlib_module_names) | {"torch", "fabric_tests", "__future__"}
    bad = sorted(f"{module} imports {target}" for module, targets in IMPORTS.items()
                 if module.startswith("fabric_tests") for target in targets if target.split(".")[0] not in allowed)
    assert bad == []


def test_the_spec_does_not_know_the_simulator_the_pipeline_or_the_cli() -> None:
    forbidden = ("provision.sim", "provision.pipeline", "provision.cli", "provision.burnin", "provision.ansible")
    assert _offenders("provision.spec", forbidden) == []


def test_the_host_model_does_not_know_the_simulator() -> None:
    assert _offenders("provision.hostmodel", ("provision.sim",)) == []


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
