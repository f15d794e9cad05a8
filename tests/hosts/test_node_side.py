"""What runs on the nodes holds to what a fresh node has: the burn-in runtime's Python (3.10 on Ubuntu 22.04), the
standard library, and what the runtime installs (torch, numpy) — never the controller's package or its
dependencies. The node-side modules are :data:`provision.hosts.runtime.NODE_MODULES` (carried in the runtime wheel
beside ``fabric_tests``): every import they make stays among them or the standard library, vermin finds nothing
newer than 3.10 in them, ruff is told the same floor for them, and ``provision node-check`` runs from the wheel's
files alone with no site-packages at all."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from fnmatch import fnmatch
from pathlib import Path

import pytest

from provision.hosts import runtime
from tests.conftest import ROOT
from tests.test_layering import MODULES, all_imports

NODE_SIDE = {name for name, path in MODULES.items() if path.relative_to(ROOT).as_posix() in runtime.NODE_MODULES}
FABRIC_TESTS = {name for name in MODULES if name.split(".")[0] == "fabric_tests"}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
#: What the runtime installs besides the wheel (pyproject's ``nodes`` extra), for ``fabric_tests`` only.
RUNTIME_PACKAGES = {"torch", "numpy"}


def test_every_node_side_module_is_a_module() -> None:
    assert len(NODE_SIDE) == len(runtime.NODE_MODULES)


@pytest.mark.parametrize("name", sorted(NODE_SIDE | FABRIC_TESTS))
def test_node_side_code_imports_only_itself_and_the_standard_library(name: str) -> None:
    allowed = NODE_SIDE | FABRIC_TESTS | ({"provision"} if name in NODE_SIDE else set())
    outside = sorted(target for target in all_imports()[name] if target.split(".")[0] not in STDLIB
                     and target not in allowed and not (name in FABRIC_TESTS and target.split(".")[0]
                                                        in RUNTIME_PACKAGES))
    assert not outside, f"{name} runs on the nodes, where these are absent: {outside}"
    if name in NODE_SIDE:
        assert not any(target.split(".")[0] == "fabric_tests" for target in all_imports()[name])


def test_node_check_needs_nothing_outside_the_node_modules() -> None:
    seen, todo = set(), ["provision.node_check.on_node"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [target for target in all_imports()[module] if target in MODULES]
    assert seen <= NODE_SIDE, sorted(seen - NODE_SIDE)


def test_ruff_holds_the_node_side_to_its_python() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["per-file-target-version"]
    floor = "py{}{}".format(*runtime.NODE_PYTHON)
    for path in [*runtime.NODE_MODULES, *(f"fabric_tests/{p.name}" for p in (ROOT / "fabric_tests").glob("*.py"))]:
        assert any(fnmatch(path, pattern) and version == floor for pattern, version in settings.items()), path


VERMIN = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
NO_VERMIN = "vermin is a dev dependency: make test installs it"


def _vermin(paths: list[str]) -> subprocess.CompletedProcess[str]:
    target = "{}.{}".format(*runtime.NODE_PYTHON)
    return subprocess.run([str(VERMIN), f"-t={target}-", "--violations", "--no-tips",
                           "--eval-annotations", *paths], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(VERMIN is None, reason=NO_VERMIN)
def test_the_node_side_code_runs_on_python_3_10() -> None:
    found = _vermin([*runtime.NODE_MODULES, "fabric_tests"])
    assert found.returncode == 0, found.stdout + found.stderr


@pytest.mark.skipif(VERMIN is None, reason=NO_VERMIN)
def test_vermin_catches_what_3_10_lacks(tmp_path: Path) -> None:
    # enum.StrEnum (3.11) was in the node-side Outcome until this check; tomllib and except* are 3.11 too
    sample = tmp_path / "newer.py"
    sample.write_text("from enum import StrEnum\nimport tomllib\n")
    found = _vermin([str(sample)])
    assert found.returncode != 0 and "StrEnum" in found.stdout and "tomllib" in found.stdout


def test_node_check_runs_from_the_wheel_alone(tmp_path: Path) -> None:
    """The runtime wheel's files and the interpreter's standard library, nothing else: no site-packages
    (``-S``), so pydantic, fabric, paramiko and the controller's own package are out of reach."""
    wheel = runtime.build_wheel(tmp_path / "wheel")
    node = tmp_path / "node"
    zipfile.ZipFile(wheel).extractall(node)
    check_file = tmp_path / "node-check.json"
    check_file.write_text(json.dumps({"format": 1, "node": "gpu001"}))  # damaged: no expectations
    argv = [sys.executable, "-S", "-m", "provision.node_check.on_node", "--file", str(check_file), "--json"]
    env = {"PYTHONPATH": str(node), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr  # Nagios UNKNOWN
    assert json.loads(result.stdout)["status"] == "UNKNOWN" and "damaged" in result.stdout
    leaked = subprocess.run([sys.executable, "-S", "-c", "import provision.node_check.on_node, sys; print(sorted("
                             "m.split('.')[0] for m in sys.modules))"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    loaded = set(eval(leaked.stdout))  # a list of module names printed by the line above
    assert not loaded - STDLIB - {"provision", "__main__"}, loaded - STDLIB
    assert str(node) in subprocess.run([sys.executable, "-S", "-c", "import provision; print(provision.__file__)"],
                                       cwd=tmp_path, env=env, capture_output=True, text=True).stdout
