"""GB200/GB300 NVL72 racks described: compute trays (platform: nvl72, aarch64, no NVSwitch or fabric manager of
their own) grouped into NVLink domains whose size the spec gives; what cannot be is refused where it is written,
and what cannot be done yet (provisioning, burn-in) is refused by the commands that would do it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.spec import SpecError, load_spec
from tests.conftest import EXAMPLES, run_cli

pytestmark = pytest.mark.fast
EXAMPLE = EXAMPLES / "gb200-nvl72.yaml"


def _written(tmp_path: Path, edit: Any) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    edit(data)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def test_the_example_racks_are_two_domains_of_72() -> None:
    loaded = load_spec(EXAMPLE)
    tray = loaded.spec.hardware["gb200-tray"]
    assert (tray.platform, tray.architecture, tray.nvlink.nvswitch) == ("nvl72", "aarch64", False)
    assert [(domain.name, domain.size, domain.on_tray_failure) for domain in loaded.spec.nvlink_domains] == [
        ("rack1", 72, "shrink"), ("rack2", 72, "hold")]
    result = run_cli("validate", str(EXAMPLE))
    assert result.returncode == 0 and "2 NVLink domain(s) of 18 trays (72 GPUs), 18 trays (72 GPUs)" in result.stdout


def _size(data: dict) -> None:
    data["nvlink_domains"][1]["size"] = 64


def _overlap(data: dict) -> None:
    data["nvlink_domains"][1]["hosts"] = "gb[018-036]"


def _loose(data: dict) -> None:
    data["nvlink_domains"].pop()


def _fabric_manager(data: dict) -> None:
    data["software"]["fabric_manager"] = data["software"]["gpu_driver"]


def _x86_tray(data: dict) -> None:
    data["hardware"]["gb200-tray"]["arch"] = "x86_64"


def _tray_nvswitch(data: dict) -> None:
    data["hardware"]["gb200-tray"]["nvlink"]["nvswitch"] = True


def _tray_pcie(data: dict) -> None:
    data["hardware"]["gb200-tray"]["pcie"]["gpu"] = {"gen": 5, "width": 16}


def _tray_on_hgx(data: dict) -> None:
    del data["hardware"]["gb200-tray"]["platform"]
    del data["nvlink_domains"]


def _min_trays_hold(data: dict) -> None:
    data["nvlink_domains"][1]["min_trays"] = 16


def _nineteen(data: dict) -> None:
    data["nodes"]["groups"][1]["hosts"] = "gb[019-037]"
    data["nvlink_domains"][1].update(hosts="gb[019-037]", size=76)


@pytest.mark.parametrize(("edit", "where", "says"), [
    (_size, "nvlink_domains[1].size", "18 trays x 4 GPUs = 72, not 64"),
    (_overlap, "nvlink_domains[1].hosts", "gb018 already in domain 'rack1'"),
    (_loose, "nvlink_domains", "NVL72 trays in no NVLink domain: gb[019-036]"),
    (_fabric_manager, "software.fabric_manager", "no fabric manager runs on a compute tray"),
    (_x86_tray, "hardware.gb200-tray.arch", "a GB200/GB300 compute tray is Grace: aarch64"),
    (_tray_nvswitch, "hardware.gb200-tray.nvlink", "it has no NVSwitch of its own"),
    (_tray_pcie, "hardware.gb200-tray.pcie.gpu", "reads Gen4 x1 while healthy and is not judged"),
    (_tray_on_hgx, "hardware.gb200-tray.gpu.model", "is the GPU of a GB200/GB300 compute tray"),
    (_min_trays_hold, "nvlink_domains[1].min_trays", "the smallest domain on_tray_failure: shrink admits"),
    (_nineteen, "nvlink_domains[1].hosts", "at most 18 compute trays"),
], ids=lambda value: value.__name__.strip("_") if callable(value) else None)
def test_what_cannot_be_is_refused_where_it_is_written(tmp_path: Path, edit: Any, where: str, says: str) -> None:
    with pytest.raises(SpecError) as refused:
        load_spec(_written(tmp_path, edit))
    shown = str(refused.value)
    assert says in shown, shown
    assert where.replace("[", ".").replace("]", "") in shown.replace("[", ".").replace("]", ""), shown


def test_keys_nothing_reads_yet_are_refused_where_written(tmp_path: Path) -> None:
    def edit(data: dict) -> None:
        data["nvlink_domains"][0].update(switch_trays=9, chassis_serial="1820625880038")

    with pytest.raises(SpecError) as refused:
        load_spec(_written(tmp_path, edit))
    shown = str(refused.value)
    assert "nvlink_domains[0].switch_trays: not supported yet" in shown
    assert "nvlink_domains[0].chassis_serial: not supported yet" in shown


def test_domains_without_a_tray_profile_are_refused(tmp_path: Path) -> None:
    sim = yaml.safe_load((EXAMPLES / "sim-cluster.yaml").read_text())
    sim["nvlink_domains"] = [{"name": "r1", "hosts": "sim[01-02]", "size": 16}]
    spec = tmp_path / "sim.yaml"
    spec.write_text(yaml.safe_dump(sim, sort_keys=False))
    with pytest.raises(SpecError, match="a domain's trays share one platform: nvl72 profile"):
        load_spec(spec)


@pytest.mark.parametrize("command", ["apply", "plan", "burnin"])
def test_trays_are_not_burned_in_without_their_domain_stage_and_the_refusal_says_why(command: str,
                                                                                    tmp_path: Path) -> None:
    spec = _written(tmp_path, lambda data: (data["burnin"].update(stages=["preflight", "node", "collectives"]),
                                            data["burnin"].pop("soak")))
    result = run_cli(command, str(spec))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gb[001-036]: NVL72 compute trays are burned in with their NVLink domain: add nvlink_domain" \
        in result.stderr
    assert not (tmp_path / ".provision").exists(), "refused before anything was written"
