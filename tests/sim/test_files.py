"""How a simulated host's files are written: hosts share a template's files through hard links, so a file is
written beside itself and renamed over (the host gets its own copy, its template and neighbours keep theirs), and
faults that develop are brought to the host's clock only on a host that carries one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from provision.sim import develop
from provision.sim.files import clone_tree, replace_file

pytestmark = pytest.mark.fast


def test_a_clone_shares_the_templates_files_until_one_is_written(tmp_path: Path) -> None:
    template = tmp_path / "template"
    replace_file(template / "etc" / "os-release", "ID=ubuntu\n")
    os.symlink("os-release", template / "etc" / "alias")
    clone_tree(template, tmp_path / "sim01")
    clone_tree(template, tmp_path / "sim02")
    mine, theirs = tmp_path / "sim01" / "etc" / "os-release", tmp_path / "sim02" / "etc" / "os-release"
    assert mine.stat().st_ino == theirs.stat().st_ino == (template / "etc" / "os-release").stat().st_ino
    assert os.readlink(tmp_path / "sim01" / "etc" / "alias") == "os-release"
    replace_file(mine, b"ID=changed\n")
    assert mine.read_text() == "ID=changed\n" and theirs.read_text() == "ID=ubuntu\n"
    assert mine.stat().st_ino != theirs.stat().st_ino
    assert not list((tmp_path / "sim01" / "etc").glob(".*.tmp")), "no half-written file left beside it"


def test_only_a_host_marked_as_developing_a_fault_is_advanced(tmp_path: Path) -> None:
    root = tmp_path / "sim01" / "root"
    root.mkdir(parents=True)
    develop.advance(root)  # no marker: nothing to read, nothing written
    assert not (root.parent / ".lock").exists()
    develop.schedule(root)
    assert (root / develop.MARKER).exists()
    assert develop.hours_since({"time_scale": 3600}, since=0) > 1e6, "the simulator's clock runs time_scale fast"
    assert develop.hours_since({}, since=2**40) == 0.0, "a start in the future is no time at all"
