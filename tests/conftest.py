"""Shared test helpers: paths into the repository and a way to run the real CLI."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BROKEN = Path(__file__).resolve().parent / "specs" / "broken"
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


os.environ.setdefault("COLUMNS", "200")  # before the CLI's consoles are made: tables as wide as a log line
# pytest rewrites each test module's asserts at import and caches the result as bytecode, unless bytecode is not
# written: where PYTHONDONTWRITEBYTECODE is set (CI images set it) every worker rewrote all 80 modules on every run,
# a third of test-fast's collection. The suite's own process writes its bytecode; what it starts inherits the
# environment unchanged (``make bytecode`` covers the project for those).
sys.dont_write_bytecode = False


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
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):  # under xdist: the controller writes, once a report
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "-")
        with open(path, "a") as times:
            times.write(f"{report.duration:.2f} {report.when} {report.nodeid} {worker}\n")


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
    _mark_fast_or_slow(items)
    _order_longest_first(items)


def _mark_fast_or_slow(items: list[pytest.Item]) -> None:
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


# -- the workers --------------------------------------------------------------------------------------------------
#: Modules that change one thing of this machine's and so never run beside each other: the login user's password
#: and sudoers (the SSH modules), the probe for free consecutive ports (the Slurm modules).
SHARED_MACHINE_STATE = {
    "hosts/test_connection": "login-user", "hosts/test_fanout": "login-user",
    "hosts/test_provisioning_ssh": "login-user", "sinks/test_slurm": "slurm", "burnin/test_slurm_launcher": "slurm",
}
#: The longest modules, longest first (seconds of a clean-clone run on two cores, PROVISION_TEST_TIMES): handed
#: out first, so that the last module a worker starts is a short one and the workers end together.
LONGEST_FIRST = ("sim/test_namespace", "hosts/test_provisioning", "burnin/test_multinode",
                 "fleet/test_baseline_campaigns", "watch/test_week_slurm", "sinks/test_slurm",
                 "burnin/test_slurm_launcher",
                 "hosts/test_recovery", "burnin/test_soak", "hosts/test_provisioning_ssh", "burnin/test_training",
                 "sim/test_sim", "burnin/test_invariant", "cli/test_cli", "hosts/test_provisioning_budget",
                 "hosts/test_fanout", "hosts/test_connection", "burnin/test_pairs", "burnin/test_resume",
                 "spec/test_fuzz", "hosts/test_bmc", "run/test_lifecycle", "spec/test_mutations")


def _module(nodeid: str) -> str:
    """``tests/burnin/test_soak.py::test_x`` -> ``burnin/test_soak``: the path names a module, never its base name
    alone (``burnin/test_soak`` and ``checks/test_soak`` are two)."""
    return nodeid.split("::")[0].removeprefix("tests/").removesuffix(".py")


def _unit(nodeid: str) -> str:
    """The unit of work a test belongs to under ``make test``'s workers: its module, or the shared
    unit of the modules in :data:`SHARED_MACHINE_STATE`."""
    return SHARED_MACHINE_STATE.get(_module(nodeid), _module(nodeid))


def _order_longest_first(items: list[pytest.Item]) -> None:
    """The units in :data:`LONGEST_FIRST`'s order, then the others as collected; a unit's tests stay together, in
    their own order. Serial runs see the same order."""
    ranks = {}
    for index, name in enumerate(LONGEST_FIRST):
        ranks.setdefault(SHARED_MACHINE_STATE.get(name, name), index)
    items.sort(key=lambda item: ranks.get(_unit(item.nodeid), len(LONGEST_FIRST)))  # stable


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs three pytest-xdist workers, each handed whole units (:func:`_unit`): a module's
    module-scoped cluster is set up once, on one worker, and modules that change the same thing of this machine's
    never run beside each other. (``--dist loadgroup`` would do it with marks, but pytest 9 ignores the node ids
    pytest-xdist 3.8 rewrites for it.)"""
    if config.getvalue("dist") != "loadscope":  # make test-fast spreads single tests: pytest-xdist's own
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # its own order is by count of tests: a pure module's 300 come first

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return UnitScheduling(config, log)


_SHARED_KEY = pytest.StashKey[str]()  # the run's shared folder, where this process made it


def pytest_configure(config: pytest.Config) -> None:
    """One folder for the whole run, workers included (they inherit this environment): the clusters provisioned
    once a run (:mod:`tests.simhelpers`) live there, whichever worker provisioned them."""
    if not hasattr(config, "workerinput") and "PROVISION_TEST_SHARED" not in os.environ:
        os.environ["PROVISION_TEST_SHARED"] = tempfile.mkdtemp(prefix="provision-tests-")
        config.stash[_SHARED_KEY] = os.environ["PROVISION_TEST_SHARED"]


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED_KEY, None)
    if shared:
        shutil.rmtree(shared, ignore_errors=True)
        os.environ.pop("PROVISION_TEST_SHARED", None)

