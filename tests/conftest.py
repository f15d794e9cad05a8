"""Shared test helpers: paths into the repository and a way to run the real CLI."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BROKEN = Path(__file__).resolve().parent / "specs" / "broken"
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


os.environ.setdefault("COLUMNS", "200")  # before the CLI's consoles are made: tables as wide as a log line


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``provision`` as a user would, in this process: ``main(argv)``, the exit code it returns and what it
    printed. A process costs ~0.6 s of imports a call; tests of signals, locks and process exit use
    :func:`run_cli_process`. ``timeout`` is the process variant's; in process a call ends as its command does."""
    from provision.cli import main

    if args[:2] == ("sim", "shell"):  # it execs into the host's namespace: in here it would replace the test run
        return run_cli_process(*args, cwd=cwd, env=env, timeout=timeout)
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        os.environ.update(env or {})
        os.chdir(cwd or ROOT)
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), stdout, stderr
        code = main(list(args))
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["provision", *args], code, stdout.getvalue(), stderr.getvalue())


def run_cli_process(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                    timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``provision`` as a separate process, real exit code: for what only a process shows."""
    return subprocess.run([sys.executable, "-m", "provision", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def example_text(name: str = "sim-cluster.yaml") -> str:
    """An example's text with the files it names beside itself (its repositories' keys) given by absolute path, so
    a copy can be written to any folder."""
    return (EXAMPLES / name).read_text().replace("key: keys/", f"key: {EXAMPLES / 'keys'}/")


@pytest.fixture
def sim_spec(tmp_path: Path) -> Path:
    """A private copy of the simulated example, so its state lands in tmp_path."""
    target = tmp_path / "sim-cluster.yaml"
    target.write_text(example_text())
    return target


# -- where the time goes ------------------------------------------------------------------------------------------
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """``PROVISION_TEST_TIMES=FILE``: each phase of each test and its seconds, appended as it ends (a run cut short
    still says where its time went)."""
    path = os.environ.get("PROVISION_TEST_TIMES")
    if path:
        with open(path, "a") as times:
            times.write(f"{report.duration:.2f} {report.when} {report.nodeid}\n")


# -- fast by default ----------------------------------------------------------------------------------------------
#: What makes a test slow: starting a cluster, a daemon, a browser or a process. A test that reaches any of these
#: (itself, through a helper of the tests, or through a fixture) is marked ``slow``; every other test is ``fast``
#: and in ``make test-fast`` without anyone marking it. An explicit ``fast`` mark (a CLI call that only validates)
#: or ``slow`` mark (pure, but minutes of computation) is the author's word and stands.
HEAVY_MODULES = {"subprocess", "multiprocessing", "tests.sshd", "tests.slurmcluster", "tests.promstack",
                 "tests.redfish", "tests.browser", "provision.sim.cluster", "provision.sim.namespace"}
#: The same reached by a name alone (an import inside the test: ``import subprocess`` puts only the name in its code).
HEAVY_NAMES = {"subprocess", "multiprocessing", "Popen", "sshd", "slurmcluster", "promstack", "redfish", "browser"}
HEAVY_HELPERS = {"tests.conftest.run_cli", "tests.conftest.run_cli_process", "tests.simhelpers.provision",
                 "tests.simhelpers.provision_then_burn_in", "tests.simhelpers.bring_up", "tests.simhelpers.SimHost"}


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


def _reaches_heavy(function: Any, seen: set[int]) -> bool:
    code = getattr(function, "__code__", None)
    if code is None or id(function) in seen:
        return False
    seen.add(id(function))
    names = _names(code)
    if names & HEAVY_NAMES:
        return True
    for name in names:
        target = function.__globals__.get(name)
        if target is None:
            continue
        if isinstance(target, types.ModuleType):
            if target.__name__ in HEAVY_MODULES:
                return True
            continue
        module = getattr(target, "__module__", "") or ""
        if f"{module}.{getattr(target, '__qualname__', '')}" in HEAVY_HELPERS or module in HEAVY_MODULES:
            return True
        if module.startswith("tests") and _reaches_heavy(target, seen):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") or item.get_closest_marker("fast"):
            continue
        seen: set[int] = set()
        functions = [getattr(item, "function", None)]
        info = getattr(item, "_fixtureinfo", None)
        for definitions in (info.name2fixturedefs.values() if info else ()):
            functions.extend(definition.func for definition in definitions)
        heavy = any(_reaches_heavy(function, seen) for function in functions if function is not None)
        item.add_marker(pytest.mark.slow if heavy else pytest.mark.fast)
