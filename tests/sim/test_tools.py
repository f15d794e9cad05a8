"""The vendor tools' stand-ins: every name the registry gives leads to a function of its module, and the entry
point every node's ``bin/`` calls runs them against that node's hardware root (what they print is the parity
tests', tests/sim/test_parity.py, against the real tools' recorded output)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from provision.sim.tools import __main__ as entry
from provision.sim.tools import apt, common, dcgm, ib, imex, nvidia_smi, pci, perftest, portstate, system
from tests.conftest import run_cli
from tests.simhelpers import SimHost, write_spec

MODULES = {module.__name__.rsplit(".", 1)[1]: module
           for module in (apt, dcgm, ib, imex, nvidia_smi, pci, perftest, portstate, system)}


def test_every_stand_in_leads_to_a_function_and_every_module_is_named() -> None:
    for tool, target in entry.TOOLS.items():
        module, function = target.split(":")
        assert module in MODULES, f"{tool}: no module {module}"
        assert callable(getattr(MODULES[module], function, None)), f"{tool}: {target} is not a function"
    assert {target.split(":")[0] for target in entry.TOOLS.values()} == set(MODULES)
    assert not set(entry.TOOLS) & set(entry.GUARDED), "a guarded command is never simulated"
    assert importlib.import_module("provision.sim.tools.common") is common


def test_the_entry_point_runs_a_stand_in_against_its_nodes_root(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, [], hosts="sim01")
    assert run_cli("sim", "up", str(spec)).returncode == 0
    root = SimHost(tmp_path / ".provision" / "sim16", "sim01").root
    assert entry.main(["--root", str(root), "lspci"]) == 0
    gpus = [row for row in capsys.readouterr().out.splitlines() if "3D controller" in row]
    assert len(gpus) == 8 and all("NVIDIA" in row for row in gpus), gpus
    # a delivery as it arrives: no driver yet, so no nvidia-smi, as on a stock image
    assert entry.main(["--root", str(root), "nvidia-smi", "-L"]) == 127
    assert "nvidia-smi: command not found" in capsys.readouterr().err
    assert entry.main(["--root", str(root), "mlxlink", "-d", "mlx5_0"]) == 64
    assert "not simulated: mlxlink -d mlx5_0" in capsys.readouterr().err
    assert entry.main(["nvidia-smi"]) == 64 and "usage" in capsys.readouterr().err
