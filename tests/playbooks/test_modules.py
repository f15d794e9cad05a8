"""The custom Ansible modules' decisions, as pure functions, on real-format inputs."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.simhelpers import SimHost, bring_up

sys.path.insert(0, str(ROOT / "playbooks" / "library"))

import gpu_host_facts
import host_tuning
import kernel_module
import pcie_acs
import pinned_packages


def test_acs_is_found_by_walking_the_extended_capabilities(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [{"kind": "acs_enabled", "node": "sim01"}])
    root = str(SimHost(state, "sim01").root)
    in_scope = pcie_acs.bridges_in_scope(root, "gpu_hca_paths")
    everything = pcie_acs.bridges_in_scope(root, "all_bridges")
    assert set(in_scope) < set(everything)
    assert "0000:04:01.0" not in in_scope  # the NVSwitch root port is on no GPU/HCA path
    controls = pcie_acs.current_controls(root, in_scope)
    assert controls and all(control == 0x1D and offset == 0x220 for offset, control in controls.values())
    assert "0000:16:00.0" in in_scope and "0000:16:00.0" not in controls  # switch upstream port: no ACS


def test_package_pins_match_debian_revisions() -> None:
    assert pinned_packages.matches("535.183.01-1", "535.183.01")
    assert not pinned_packages.matches("535.183.011-1", "535.183.01")
    assert pinned_packages.matches("5.15.0-112.122", "*") and not pinned_packages.matches(None, "*")
    current = pinned_packages.parse_query("nvidia-driver-550\t550.54.15-1\thi \ndoca-ofed\t2.9.1-1\tii \n")
    assert current == {"nvidia-driver-550": ("550.54.15-1", True), "doca-ofed": ("2.9.1-1", False)}
    install, hold = pinned_packages.plan(current, {"nvidia-driver-535": "535.183.01", "doca-ofed": "2.9.1"},
                                         hold=True, reinstall=False)
    assert install == ["nvidia-driver-535"] and hold == ["nvidia-driver-535", "doca-ofed"]


def test_tuning_helpers() -> None:
    fstab = "/dev/sda1 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n# /old none swap sw 0 0\n"
    rewritten = host_tuning.fstab_without_swap(fstab)
    assert rewritten.count("# disabled by provision") == 1 and host_tuning.fstab_without_swap(rewritten) == rewritten
    swaps = "Filename\tType\tSize\tUsed\tPriority\n/swap.img file 8388604 0 -2\n"
    assert host_tuning.active_swaps(swaps) == ["/swap.img"]
    assert kernel_module.loaded_modules("nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 1 x, Live 0x0\n") == {
        "nvidia_peermem", "nvidia"}


def test_a_host_that_runs_another_kernel_than_the_pin_is_refused() -> None:
    found = {"gpus": ["0000:18:00.0"], "hcas": {"mlx5_0": {}}, "kernel": "5.15.0-105-generic"}
    assert gpu_host_facts.mismatches(found, 1, ["mlx5_0"]) == []
    assert gpu_host_facts.mismatches(found, 1, ["mlx5_0"], "5.15.0-105-generic") == []
    assert gpu_host_facts.mismatches(found, 1, ["mlx5_0"], "5.15.0-112-generic") == [
        "it runs kernel 5.15.0-105-generic, the spec pins 5.15.0-112-generic (software.kernel): install it and "
        "make it the default boot entry"]


def test_host_files_reads_each_entry_and_names_what_is_wrong_with_it(tmp_path: Path) -> None:
    import base64

    import host_files

    script = host_files.wanted({"path": "/usr/local/sbin/x", "mode": "0755", "content": "#!/bin/sh\n"})
    assert script == host_files.Wanted("/usr/local/sbin/x", 0o755, b"#!/bin/sh\n")
    key = host_files.wanted({"path": "/etc/apt/keyrings/k.gpg", "mode": "0644",
                             "content_base64": base64.b64encode(b"\x99\x01\x0d").decode()})
    assert key.content == b"\x99\x01\x0d"  # a binary key (apt reads .gpg as binary) arrives byte for byte
    for entry, words in [({"path": "etc/x", "mode": "0644", "content": ""}, "absolute file path"),
                         ({"path": "/etc/x", "mode": "rw-r--r--", "content": ""}, "/etc/x: mode must be an octal"),
                         ({"path": "/etc/x", "mode": "0644"}, "/etc/x: give exactly one of"),
                         ({"path": "/etc/x", "mode": "0644", "content": "", "content_base64": ""}, "exactly one"),
                         ({"path": "/etc/x", "mode": "0644", "content_base64": "not base64!"}, "is not base64")]:
        with pytest.raises(ValueError, match=re.escape(words)):
            host_files.wanted(entry)
    target = tmp_path / "etc" / "systemd" / "system" / "unit.service"
    assert host_files.current(str(target)) is None
    host_files.write(str(target), b"[Unit]\n", 0o644)  # the folders are made on the way, no temporary file left
    assert host_files.current(str(target)) == (b"[Unit]\n", 0o644) and os.listdir(target.parent) == ["unit.service"]
    host_files.write(str(target), b"[Unit]\n", 0o600)
    assert host_files.current(str(target)) == (b"[Unit]\n", 0o600)
    with pytest.raises(IsADirectoryError):
        host_files.current(str(target.parent))


def test_a_unit_is_read_once_and_brought_where_it_is_wanted_in_one_command() -> None:
    import unit_state

    # systemd prints the properties in its own order, whatever order they were asked in
    fresh = unit_state.unit_properties("LoadState=loaded\nActiveState=inactive\nUnitFileState=disabled\n")
    assert unit_state.actions_for(fresh, enabled=True, started=True) == ["enable", "--now"]
    assert unit_state.actions_for(fresh, enabled=False, started=True) == ["start"]
    crashed = unit_state.unit_properties("LoadState=loaded\nActiveState=failed\nUnitFileState=enabled\n")
    assert unit_state.actions_for(crashed, enabled=True, started=True) == ["start"]
    static = unit_state.unit_properties("LoadState=loaded\nActiveState=inactive\nUnitFileState=static\n")
    assert unit_state.actions_for(static, enabled=True, started=False) == []  # static: started by another unit
    running = unit_state.unit_properties("LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n")
    assert unit_state.actions_for(running, enabled=True, started=True) == []
    missing = unit_state.unit_properties("LoadState=not-found\nActiveState=inactive\nUnitFileState=\n")
    assert unit_state.actions_for(missing, enabled=True, started=True) == ["enable", "--now"]  # systemctl says why


def test_the_wheel_cache_is_sent_only_the_wheels_the_node_lacks_and_places_them_whole(tmp_path: Path) -> None:
    import importlib.util

    import wheel_cache
    from ansible.errors import AnsibleActionFail

    loaded = importlib.util.spec_from_file_location(
        "wheel_cache_action", ROOT / "playbooks" / "action_plugins" / "wheel_cache.py")
    assert loaded and loaded.loader
    action = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(action)

    house, extra = tmp_path / "wheelhouse", tmp_path / "built"
    (house / "nested").mkdir(parents=True)
    extra.mkdir()
    for name, size in (("torch-2.13.0-cp311-none-any.whl", 300), ("numpy-2.4.6-cp311-none-any.whl", 100)):
        (house / name).write_bytes(b"w" * size)
        os.utime(house / name, (1_795_720_626, 1_795_720_626))
    (house / ".complete").write_text("")  # hidden: not a wheel
    (house / "nested" / "old.whl").write_text("")  # below the folder: pip's --find-links does not look there
    (extra / "provision_fabric_tests-0.1.0-py3-none-any.whl").write_bytes(b"f" * 10)
    files = action.local_files([str(house), str(extra / "provision_fabric_tests-0.1.0-py3-none-any.whl")])
    assert sorted(files) == ["numpy-2.4.6-cp311-none-any.whl", "provision_fabric_tests-0.1.0-py3-none-any.whl",
                             "torch-2.13.0-cp311-none-any.whl"]
    (extra / "numpy-2.4.6-cp311-none-any.whl").write_bytes(b"other")
    with pytest.raises(AnsibleActionFail, match=re.escape("are both named numpy-2.4.6")):
        action.local_files([str(house), str(extra)])
    with pytest.raises(AnsibleActionFail, match="neither a folder nor a file"):
        action.local_files([str(tmp_path / "absent")])
    wanted = action.described(files)

    cache = tmp_path / "node" / "var" / "cache" / "provision" / "wheels"
    assert wheel_cache.present(str(cache)) == {}
    assert wheel_cache.missing(wanted, {}) == [entry["name"] for entry in wanted]  # a fresh node: every wheel
    staged = tmp_path / "staged"
    staged.mkdir()
    for entry in wanted:
        (staged / entry["name"]).write_bytes(Path(files[entry["name"]]).read_bytes())
    cache.mkdir(parents=True)
    for entry in wanted:
        wheel_cache.place(str(staged), str(cache), entry, 0o644)
    assert wheel_cache.missing(wanted, wheel_cache.present(str(cache))) == []  # the quick check finds them all
    assert sorted(os.listdir(cache)) == sorted(files) and not os.listdir(staged)  # no temporary name left
    torch = cache / "torch-2.13.0-cp311-none-any.whl"
    assert torch.stat().st_mode & 0o777 == 0o644 and int(torch.stat().st_mtime) == 1_795_720_626
    torch.write_bytes(b"w" * 120)  # an interrupted copy by other means: another size
    os.utime(torch, (1_795_720_626, 1_795_720_626))
    assert wheel_cache.missing(wanted, wheel_cache.present(str(cache))) == ["torch-2.13.0-cp311-none-any.whl"]


def test_a_node_is_sent_only_the_wheels_built_for_its_machine() -> None:
    """A site's wheelhouse for x86_64 hosts and aarch64 Grace trays: each node gets its own machine's wheels and
    the pure ones; a distribution with no wheel for the node at all is refused by name before anything is sent."""
    import importlib.util

    from ansible.errors import AnsibleActionFail

    loaded = importlib.util.spec_from_file_location(
        "wheel_cache_action", ROOT / "playbooks" / "action_plugins" / "wheel_cache.py")
    assert loaded and loaded.loader
    action = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(action)

    x86 = "torch-2.13.0-cp310-cp310-manylinux_2_28_x86_64.whl"
    arm = "torch-2.13.0-cp310-cp310-manylinux_2_28_aarch64.whl"
    numpy_both = "numpy-2.2.6-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    ours = "provision_fabric_tests-0.1.0-py3-none-any.whl"
    assert action.architectures(x86) == {"x86_64"} and action.architectures(arm) == {"aarch64"}
    assert action.architectures(ours) is None and action.architectures("sdist-1.0.tar.gz") is None
    assert action.architectures(numpy_both) == {"x86_64"}
    assert action.for_machine([x86, arm, ours], "aarch64") == ([arm, ours], [x86])
    assert action.for_machine([x86, arm, ours], "x86_64") == ([x86, ours], [arm])
    with pytest.raises(AnsibleActionFail, match=r"no wheel of numpy for this node's aarch64 \(only for x86_64\)"):
        action.for_machine([arm, numpy_both, ours], "aarch64")
    assert os.uname().machine in action.ARCHITECTURES, "the simulated nodes run this machine's Python"
