"""tests/ mirrors the code: a module's tests are found where its path says, and every module has tests of its own.

A folder of tests is named for the package it tests (``tests/burnin/`` for ``provision/burnin/``, ``tests/topology/``
for ``topology/``). A module has tests of its own when a test module imports it; a command module of the CLI also
when a test runs one of its commands as a user would (``run_cli("watch", ...)``); a package whose ``__init__`` only
says what the package is for has nothing of its own to test. This test is the rule and names what breaks it.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_layering import MODULES

pytestmark = pytest.mark.fast

TESTS = ROOT / "tests"
#: Folders of tests and what they mirror, beyond provision's packages (named alike).
TOP_LEVEL = {"topology": "topology", "fabric_tests": "fabric_tests", "bench": "bench", "playbooks": "playbooks"}
#: Folders under tests/ that hold data, not tests.
DATA = {"data", "facts", "specs", "__pycache__"}
RUNNERS = {"run_cli", "run_cli_process"}
#: Tests of the whole house, at the top of tests/ (the others sit in their package's folder, or beside a
#: top-level module's name: tests/test_evidence.py).
HOUSE = {"test_layering", "test_mirror"}
PROGRAM = re.compile(r"-m ([A-Za-z_][\w.]*)")


def _test_modules() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts)


@functools.cache
def _imported_and_run() -> tuple[frozenset[str], frozenset[str]]:
    """Every module the tests import (dotted), and every first word they hand the CLI."""
    imported: set[str] = set()
    commands: set[str] = set()
    for path in _test_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in RUNNERS:
                commands.update(word for argument in node.args if isinstance(argument, ast.Constant)
                                and isinstance(argument.value, str) for word in argument.value.split())
            elif isinstance(node, ast.List | ast.Tuple):  # [sys.executable, "-m", "provision", ...]
                words = [item.value for item in node.elts if isinstance(item, ast.Constant)]
                imported.update(str(after) for before, after in itertools.pairwise(words) if before == "-m")
                if words and isinstance(words[0], str):  # an argv: main(["metrics", ...]), ["quarantine", "sim03"]
                    commands.add(words[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # f"{python} -m fabric_tests.version"
                imported.update(PROGRAM.findall(node.value))
    return frozenset(imported), frozenset(commands)


def _commands(path: Path) -> set[str]:
    """The names a CLI module gives its commands and groups (``@...command(name="watch")``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", None) in {"command", "group"}:
                    named = [keyword.value for keyword in decorator.keywords if keyword.arg == "name"]
                    given = decorator.args[:1] or named
                    if given and isinstance(given[0], ast.Constant):
                        names.add(str(given[0].value))
                    else:
                        names.add(node.name.replace("_", "-"))
    return names


def _only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return all(isinstance(node, ast.Expr) or (isinstance(node, ast.ImportFrom) and node.module == "__future__")
               for node in body)


#: Programs that only a simulated node's own interpreter runs, never this process: importing one here would
#: install a node's faults into the test run itself. Every burn-in test on the simulated cluster runs them (the
#: node's ``python3`` loads the first at its start and hands agents to the second); tests/sim/test_zygote.py
#: watches the second's process tree.
NODE_PROGRAMS = {
    "provision.sim.nodepython.sitecustomize": "the node interpreter's site hook: rank faults, NCCL semantics",
    "provision.sim.zygote": "the node interpreter's warm fork server for agents",
}


def untested(modules: dict[str, Path], imported: frozenset[str], commands: frozenset[str]) -> list[str]:
    """The modules no test imports (nor, for the CLI's command modules, runs a command of)."""
    missing = []
    for name, path in sorted(modules.items()):
        if name in imported or name in NODE_PROGRAMS or (path.name == "__init__.py" and _only_a_docstring(path)):
            continue
        if name.endswith(".__main__") and name.removesuffix(".__main__") in imported:
            continue  # a program: the tests run it (``python -m provision``), which is how it is used
        if name.startswith("provision.cli.") and _commands(path) & commands:
            continue
        missing.append(name)
    return missing


def test_every_module_has_tests_that_import_it() -> None:
    imported, commands = _imported_and_run()
    assert untested(MODULES, imported, commands) == []


def test_a_module_no_test_imports_is_named() -> None:
    imported, commands = _imported_and_run()
    tested = {"provision.spec": MODULES["provision.spec"], "provision.newcomer": ROOT / "provision" / "errors.py"}
    assert untested(tested, imported, commands) == ["provision.newcomer"]
    watch = {"provision.cli.watch": MODULES["provision.cli.watch"]}
    assert untested(watch, frozenset(), frozenset({"watch"})) == []
    assert untested(watch, frozenset(), frozenset({"status"})) == ["provision.cli.watch"]


def test_every_folder_of_tests_is_named_for_a_package() -> None:
    stray = []
    for folder in sorted(path for path in TESTS.iterdir() if path.is_dir() and path.name not in DATA):
        mirrored = ROOT / TOP_LEVEL.get(folder.name, f"provision/{folder.name}")
        if not mirrored.is_dir():
            stray.append(folder.name)
        if not (folder / "__init__.py").exists():
            stray.append(f"{folder.name} (no __init__.py: two test_x.py in two folders would collide)")
    assert stray == []
    top_level = {path.stem for path in (ROOT / "provision").glob("*.py")}  # errors, evidence, pipeline, ...
    assert not [path.name for path in TESTS.glob("test_*.py") if path.stem not in HOUSE
                and path.stem.removeprefix("test_").split("_")[0] not in top_level], \
        "a test module at the top of tests/ belongs in its package's folder"


def test_the_node_programs_are_run_by_the_simulated_nodes_and_imported_by_nothing_here() -> None:
    imported, _ = _imported_and_run()
    assert set(NODE_PROGRAMS) <= set(MODULES) and not set(NODE_PROGRAMS) & imported
