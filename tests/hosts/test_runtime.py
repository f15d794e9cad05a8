"""The node runtime's pure parts: the fabric_tests wheel built from this controller's sources, and the
``runtime/version`` judgement of what a node's runtime says it is."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from provision.checks.outcome import Outcome
from provision.hosts import runtime

pytestmark = pytest.mark.fast

#: What ``python -m fabric_tests.version`` printed in a runtime the node_runtime role installed (recorded here).
INSTALLED = ('{"fabric_tests": "0.1.0+g1a38d4a718f7", "numpy": "2.4.6", '
             '"python": "/opt/provision/runtime/bin/python", "torch": "2.13.0+cpu"}\n')


def test_the_wheel_is_a_function_of_the_sources(tmp_path: Path) -> None:
    first = runtime.build_wheel(tmp_path / "a").read_bytes()
    second = runtime.build_wheel(tmp_path / "b")
    assert second.read_bytes() == first, "copying the wheel again must change nothing on the nodes"
    version = runtime.wheel_version()
    assert second.name == f"provision_fabric_tests-{version}-py3-none-any.whl"
    assert version.split("+")[1].startswith("g") and len(version.split("+")[1]) == 13


def test_the_wheel_records_every_file_with_its_hash(tmp_path: Path) -> None:
    with zipfile.ZipFile(runtime.build_wheel(tmp_path)) as archive:
        names = archive.namelist()
        assert {path.relative_to(runtime.PROJECT).as_posix() for path in runtime.sources()} <= set(names)
        assert "fabric_tests/version.py" in names and "fabric_tests/agent.py" in names
        assert set(runtime.NODE_MODULES) <= set(names)  # node-check runs from the runtime
        assert not {name for name in names if name.startswith("provision/")} - set(runtime.NODE_MODULES)
        record = next(name for name in names if name.endswith(".dist-info/RECORD"))
        rows = [line.split(",") for line in archive.read(record).decode().splitlines()]
        assert {row[0] for row in rows} == set(names)
        for path, digest, size in rows:
            if path == record:
                assert digest == size == ""
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data)), path
        metadata = archive.read(next(name for name in names if name.endswith("METADATA"))).decode()
        assert f"Version: {runtime.wheel_version()}" in metadata and "Name: provision-fabric-tests" in metadata
        assert "Requires-Dist: numpy>=1.26" in metadata


def _judge(found: runtime.RuntimeFound | None, problem: str = "", fabric_tests: str = "0.1.0+g1a38d4a718f7"):
    return runtime.judge_runtime(found, problem, python="/opt/provision/runtime/bin/python", torch="2.13.0",
                                 fabric_tests_version=fabric_tests)


def test_the_installed_runtime_passes() -> None:
    result = _judge(runtime.parse_runtime(INSTALLED))
    assert result.outcome is Outcome.OK and result.check == "runtime/version"
    assert "torch 2.13.0+cpu" in result.message  # a local build label is the pinned release


def test_a_missing_interpreter_fails_never_passes() -> None:
    result = _judge(None, "exit 127: sh: 1: /opt/provision/runtime/bin/python: not found")
    assert result.outcome is Outcome.FAILED and "no burn-in runtime at /opt/provision/runtime/bin/python" in \
        result.message


def test_stale_tests_and_another_torch_are_each_named() -> None:
    found = runtime.parse_runtime('{"fabric_tests": "0.1.0+g000000000000", "torch": "2.5.1+cu124"}')
    result = _judge(found)
    assert result.outcome is Outcome.FAILED
    assert "fabric_tests 0.1.0+g000000000000, this controller's is 0.1.0+g1a38d4a718f7" in result.message
    assert "torch 2.5.1+cu124, the spec pins 2.13.0" in result.message
    source = _judge(runtime.parse_runtime('{"fabric_tests": null, "torch": null, "numpy": null}'))
    assert "fabric_tests not installed" in source.message and "torch not installed" in source.message
    assert "numpy not installed" in source.message


def test_output_without_a_description_is_not_read_as_one() -> None:
    with pytest.raises(ValueError):
        runtime.parse_runtime("Traceback (most recent call last):\n  ...\nModuleNotFoundError: fabric_tests\n")


def test_the_oldest_accepted_torch_is_the_one_ci_runs_the_node_tests_on() -> None:
    """A runtime pin below the torch ``make test`` installs (constraints.txt) is refused: nothing tested it."""
    import re
    from pathlib import Path

    from provision.spec.semantics import OLDEST_TORCH

    constraints = (Path(__file__).parents[2] / "constraints.txt").read_text()
    assert re.search(r"^torch==(\S+)$", constraints, re.MULTILINE).group(1) == OLDEST_TORCH
