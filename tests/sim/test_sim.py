"""The simulated cluster: materialised hosts that behave like real ones through the real tools' formats."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from provision.facts.infiniband import parse_ibstat, parse_infiniband_class, read_tree
from provision.facts.kernel_log import find_xids, parse_kernel_log
from provision.facts.lspci import parse_lspci_verbose
from provision.facts.nvidia_smi import parse_nvlink_status, parse_query_csv, parse_query_report, parse_topo_matrix
from provision.facts.packages import parse_dpkg_status, parse_proc_modules
from provision.sim import cluster
from provision.sim.mirror import key_id, stand_in_key
from provision.sim.node import load_state, save_state
from provision.spec.faults import CATALOG
from tests.conftest import ROOT, run_cli
from tests.simhelpers import SimHost, bring_up, free_loopback_port, write_spec

PINNED = "535.183.01"


def _hardware(host: SimHost):
    from provision.sim.host import hardware_from_dict, read_recipe

    return hardware_from_dict(read_recipe(host.root.parent)["hardware"])


def _install_driver(host: SimHost) -> None:
    host.add_vendor_sources()
    host.run("apt-get", "install", "-y", f"nvidia-driver-535={PINNED}-1")
    host.run("modprobe", "nvidia")


def test_cli_up_is_idempotent_and_reconciles_a_changed_spec_host_by_host(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [{"kind": "xid", "node": "sim01", "target": "gpu1", "params": {"code": 48}}],
                      hosts="sim[01-03]")
    first = run_cli("sim", "up", str(spec), "--json")
    assert first.returncode == 0, first.stderr
    payload = json.loads(first.stdout)
    assert payload["changed"] and payload["nodes"] == ["sim01", "sim02", "sim03"]
    assert payload["hosts"]["added"] == ["sim01", "sim02", "sim03"]
    assert run_cli("sim", "up", str(spec), "--json").stdout.count('"changed": false') == 1
    state = tmp_path / ".provision" / "sim16"
    touched = SimHost(state, "sim02").add_vendor_sources()
    touched.run("apt-get", "install", "-y", f"nvidia-driver-535={PINNED}-1")
    # drop sim03 and change sim01's fault: sim01 is rebuilt, sim02 keeps its installed driver
    text = spec.read_text().replace("sim[01-03]", "sim[01-02]").replace("code: 48", "code: 79")
    spec.write_text(text)
    second = json.loads(run_cli("sim", "up", str(spec), "--json").stdout)
    assert second["hosts"] == {"added": [], "rebuilt": ["sim01"], "kept": ["sim02"], "removed": ["sim03"]}
    assert "nvidia-driver-535" in touched.run("dpkg-query", "-W").stdout
    assert "79," in SimHost(state, "sim01").run("dmesg").stdout
    assert run_cli("sim", "up", str(spec), "--rebuild", "--json").returncode == 0
    assert "nvidia-driver-535" not in SimHost(state, "sim02").run("dpkg-query", "-W").stdout
    assert run_cli("sim", "down", str(spec)).returncode == 0
    assert not (state / "sim").exists()


def test_faults_listing_names_stage_and_check(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [{"kind": "gpu_missing", "node": "sim02", "target": "gpu3"},
                                 {"kind": "missing_cable", "target": "leaf-su01-r0/5"}])
    rows = json.loads(run_cli("sim", "faults", "--json", str(spec)).stdout)["faults"]
    assert [(row["kind"], row["stage"], row["check"]) for row in rows] == [
        ("gpu_missing", "provision", "preflight"), ("missing_cable", "fabric", "audit")]
    assert all(row["expected"] for row in rows)


def test_bad_fault_parameters_are_spec_errors(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [{"kind": "pcie_downtrained", "node": "sim01", "target": "gpu0",
                                  "params": {"width": 12}}])
    result = run_cli("sim", "up", str(spec))
    assert result.returncode == 2
    assert "simulation.faults[0].params.width: width: must be one of 1, 2, 4, 8, 16" in result.stderr


def test_the_namespace_presentation_needs_ssh(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [])
    data = yaml.safe_load(spec.read_text())
    data["simulation"]["presentation"] = "namespace"  # the example connects locally
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_cli("validate", str(spec))
    assert result.returncode == 2
    assert "simulation.presentation: the namespace presentation reaches each host over SSH" in result.stderr


def test_acs_read_clear_and_read_back_like_the_real_tools(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [{"kind": "acs_enabled", "node": "sim01"}])
    host = SimHost(state, "sim01")
    before = parse_lspci_verbose(host.run("lspci", "-vvv").stdout)
    enabled = [device for device in before if device.acs_redirects]
    assert enabled and all(device.is_bridge for device in enabled)
    bridge = enabled[0].address
    assert host.run("setpci", "-s", bridge, "ECAP_ACS+0x6.w").stdout.strip() == "001d"
    host.run("setpci", "-s", bridge, "ECAP_ACS+0x6.w=0000")
    assert host.run("setpci", "-s", bridge, "ECAP_ACS+0x6.w").stdout.strip() == "0000"
    after = {device.address: device for device in parse_lspci_verbose(host.run("lspci", "-vvv").stdout)}
    assert not after[bridge].acs_redirects
    assert len([device for device in after.values() if device.acs_redirects]) == len(enabled) - 1
    # setpci does not survive a reboot: firmware puts ACS back
    host.run("reboot")
    assert host.run("setpci", "-s", bridge, "ECAP_ACS+0x6.w").stdout.strip() == "001d"
    # a healthy host ships with ACS off
    healthy = parse_lspci_verbose(SimHost(state, "sim02").run("lspci", "-vvv").stdout)
    assert not any(device.acs_redirects for device in healthy)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the stand-ins as nobody through setpriv, which needs root")
def test_an_unprivileged_user_meets_the_refusals_of_a_real_host() -> None:
    """Ubuntu's kernel.dmesg_restrict, lspci without the capability blocks, config space and umad devices closed:
    the stand-ins refuse a user that is not root with the real tools' words (a check must never read the
    silence as health)."""
    import shutil
    import subprocess
    import tempfile

    from provision.sim import cluster

    work = Path(tempfile.mkdtemp(prefix="provision-nobody-", dir="/tmp"))
    try:
        work.chmod(0o755)
        state, _ = bring_up(work, [{"kind": "acs_enabled", "node": "sim01"}])
        host = SimHost(state, "sim01")
        for directory in [work, *work.rglob("*")]:
            if directory.is_dir():
                directory.chmod(directory.stat().st_mode | 0o555)

        def as_nobody(*command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command],
                                  env=cluster.environment(host.paths), capture_output=True, text=True, timeout=60,
                                  check=False)

        dmesg = as_nobody("dmesg")
        assert dmesg.returncode == 1
        assert dmesg.stderr.strip() == "dmesg: read kernel buffer failed: Operation not permitted"
        devices = parse_lspci_verbose(as_nobody("lspci", "-vvv").stdout)
        assert devices and all(device.access_denied and not device.acs_redirects for device in devices)
        bridge = next(device for device in parse_lspci_verbose(host.run("lspci", "-vvv").stdout)
                      if device.acs_redirects).address
        written = as_nobody("setpci", "-s", bridge, "ECAP_ACS+0x6.w=0000")
        assert written.returncode == 1 and "Operation not permitted" in written.stderr
        assert host.run("setpci", "-s", bridge, "ECAP_ACS+0x6.w").stdout.strip() == "001d", "nothing was written"
        port = as_nobody("ibportstate", "-G", "0x1", "1", "query")
        assert port.returncode != 0 and "can't open UMAD port" in port.stderr
        assert as_nobody("lsmod").returncode == 0  # what needs no root on a real host works
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_setpci_on_a_device_without_acs_fails(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [])
    host = SimHost(state, "sim01")
    gpu = next(d for d in parse_lspci_verbose(host.run("lspci", "-vvv").stdout) if d.kind == "3D controller")
    result = host.run("setpci", "-s", gpu.address, "ECAP_ACS+0x6.w", check=False)
    assert result.returncode != 0 and "Capability ACS not found" in result.stderr


def test_the_first_boot_refreshes_apts_lists_and_pinned_packages_waits_for_it(tmp_path: Path) -> None:
    """A stock image's first boot runs apt-daily's refresh, which holds apt's lists lock: apt-get update fails at
    once, DPkg::Lock::Timeout or not (apt 2.4 waits for dpkg's lock only); pinned_packages waits, then installs."""
    import subprocess
    import sys
    import time

    state, _ = bring_up(tmp_path, [], hosts="sim01")
    host = SimHost(state, "sim01")
    booted = load_state(host.root)
    assert booted["lists_lock_until"] > time.time() - 60, "the first boot holds apt's lists lock"
    for listed in (host.root / "var/lib/apt/lists").glob("*_Packages"):  # lists gone: a pin needs a refresh
        listed.unlink()
    save_state(host.root, {**booted, "dpkg_lock_until": 0.0, "lists_lock_until": time.time() + 60})
    refused = host.run("apt-get", "-o", "DPkg::Lock::Timeout=30", "update", check=False)
    assert refused.returncode == 100, refused
    assert refused.stderr.splitlines() == [
        "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1841 (apt-get)",
        "N: Be aware that removing the lock file is not a solution and may break your system.",
        "E: Unable to lock directory /var/lib/apt/lists/"]
    started = time.monotonic()
    save_state(host.root, {**load_state(host.root), "lists_lock_until": time.time() + 8})  # past Ansible's start
    module = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-i", "localhost,",
         "-M", str(ROOT / "playbooks" / "library"), "-m", "pinned_packages",
         "-a", json.dumps({"packages": {"python3-venv": "*"}}), "-e", f"ansible_python_interpreter={sys.executable}"],
        env={**cluster.environment(host.paths), "ANSIBLE_HOME": str(tmp_path / "ansible"),
             "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible" / "tmp")},
        capture_output=True, text=True, timeout=120)
    assert module.returncode == 0, module.stdout + module.stderr
    assert time.monotonic() - started >= 8, "installed before apt's lists were free"
    assert parse_dpkg_status((host.root / "var/lib/dpkg/status").read_text())["python3-venv"].held


def test_a_stock_image_reaches_the_vendors_only_through_signed_sources(tmp_path: Path) -> None:
    """What a stock Ubuntu 22.04 server install refuses: NVIDIA's and DOCA's packages (not in Ubuntu's archive),
    python3 -m venv (no python3-venv), a vendor source without its key, a release or distribution the server lacks."""
    state, _ = bring_up(tmp_path, [], hosts="sim01")
    host = SimHost(state, "sim01")
    locked = host.run("apt-get", "install", "-y", "python3-venv", check=False)  # first boot: upgrades running
    assert locked.returncode == 100 and "It is held by process 1873 (unattended-upgr)" in locked.stderr
    waited = host.run("apt-get", "-o", "DPkg::Lock::Timeout=30", "install", "-y", "python3-venv", check=False)
    assert waited.returncode == 0 and "Waiting for cache lock" in waited.stderr, waited.stderr
    host.run("apt-get", "remove", "-y", "python3-venv")
    for package in ("doca-ofed", "nvidia-driver-535", "cuda-toolkit-12-2"):
        refused = host.run("apt-get", "install", "-y", package, check=False)
        assert refused.returncode == 100 and f"Unable to locate package {package}" in refused.stderr
    venv = host.run("python3", "-m", "venv", str(tmp_path / "runtime"), check=False)
    assert venv.returncode == 1 and "ensurepip is not\navailable" in venv.stdout and not (tmp_path / "runtime").exists()
    sources = host.root / "etc/apt/sources.list.d"
    keyring = host.root / "etc/apt/keyrings/doca.asc"
    keyring.write_text(stand_in_key("cuda"))  # another repository's key
    (sources / "doca.list").write_text("deb [signed-by=/etc/apt/keyrings/doca.asc] "
                                       "https://linux.mellanox.com/public/repo/doca/2.8.0/ubuntu22.04/x86_64/ ./\n")
    unsigned = host.run("apt-get", "update", check=False)
    assert unsigned.returncode == 100 and f"NO_PUBKEY {key_id('doca')}" in unsigned.stderr
    assert host.run("apt-get", "install", "-y", "doca-ofed", check=False).returncode == 100
    keyring.write_text(stand_in_key("doca"))
    host.run("apt-get", "update")
    wrong_release = host.run("apt-get", "install", "-y", "doca-ofed=2.9.1*", check=False)
    assert wrong_release.returncode == 100 and "Version '2.9.1*' for 'doca-ofed' was not found" in wrong_release.stderr
    (sources / "doca.list").write_text("deb [signed-by=/etc/apt/keyrings/doca.asc] "
                                       "https://linux.mellanox.com/public/repo/doca/2.9.1/ubuntu20.04/x86_64/ ./\n")
    missing = host.run("apt-get", "update", check=False)
    assert missing.returncode == 100 and "does not have a Release file" in missing.stderr
    dropped = host.run("apt-get", "install", "-y", "doca-ofed", check=False)  # 2.8.0's list went with its source
    assert "Unable to locate package doca-ofed" in dropped.stderr
    (sources / "doca.list").write_text("deb [signed-by=/etc/apt/keyrings/doca.asc] "
                                       "http://mirror.site.internal/doca ./\n")
    unresolved = host.run("apt-get", "update", check=False)
    assert unresolved.returncode == 0 and "Temporary failure resolving 'mirror.site.internal'" in unresolved.stderr
    host.add_vendor_sources()
    host.run("apt-get", "install", "-y", "doca-ofed=2.9.1*", "python3-venv")
    assert host.run("python3", "-m", "venv", "--without-pip", str(tmp_path / "runtime")).returncode == 0


def test_kernel_parameters_take_effect_at_the_boot_after_update_grub(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [], hosts="sim01")
    host = SimHost(state, "sim01")
    booted = (host.root / "proc/cmdline").read_text()
    (host.root / "etc/default/grub.d/60-provision.cfg").write_text(
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt"\n')
    host.run("reboot")
    assert (host.root / "proc/cmdline").read_text() == booted, "a drop-in alone changes nothing: grub.cfg does"
    generated = host.run("update-grub")
    assert "Sourcing file `/etc/default/grub.d/60-provision.cfg'" in generated.stderr
    assert (host.root / "proc/cmdline").read_text() == booted, "the running kernel keeps its command line"
    host.run("reboot")
    words = (host.root / "proc/cmdline").read_text().split()
    assert words[-2:] == ["intel_iommu=on", "iommu=pt"] and words[0].startswith("BOOT_IMAGE=/vmlinuz-"), words


def test_driver_lifecycle_install_load_mismatch_reboot(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [{"kind": "wrong_driver", "node": "sim01", "params": {"version": "550.54.15"}}])
    fresh, drifted = SimHost(state, "sim02").add_vendor_sources(), SimHost(state, "sim01").add_vendor_sources()
    assert fresh.run("nvidia-smi", "-L", check=False).returncode == 127  # no driver delivered
    assert parse_query_csv(drifted.run("nvidia-smi", "--query-gpu=index,driver_version",
                                       "--format=csv").stdout)[0]["driver_version"] == "550.54.15"
    held = parse_dpkg_status((drifted.root / "var/lib/dpkg/status").read_text())
    assert held["nvidia-driver-550"].held and drifted.run("apt-mark", "showhold").stdout.split()[0] == \
        "nvidia-driver-550"
    refused = drifted.run("apt-get", "install", "-y", f"nvidia-driver-535={PINNED}-1", check=False)
    assert refused.returncode == 100 and "--allow-change-held-packages" in refused.stderr
    drifted.run("apt-get", "install", "-y", "--allow-change-held-packages", f"nvidia-driver-535={PINNED}-1")
    mismatch = drifted.run("nvidia-smi", "-L", check=False)
    assert mismatch.returncode == 18 and "Driver/library version mismatch" in mismatch.stderr
    drifted.run("reboot")
    report = parse_query_report(drifted.run("nvidia-smi", "-q").stdout)
    assert report.header["Driver Version"] == PINNED and len(report.gpus) == 8
    missing = fresh.run("apt-get", "install", "-y", "nvidia-driver-535=999.1-1", check=False)
    assert missing.returncode == 100 and "Version '999.1-1' for 'nvidia-driver-535' was not found" in missing.stderr


def test_peermem_loaded_registered_and_the_ofed_build_trap(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [{"kind": "peermem_unregistered", "node": "sim02"}])
    host = SimHost(state, "sim01")
    _install_driver(host)
    host.run("apt-get", "install", "-y", "doca-ofed")  # OFED after the driver: peermem no longer matches ib_core
    trapped = host.run("modprobe", "nvidia-peermem", check=False)
    assert trapped.returncode == 1 and "Invalid argument" in trapped.stderr
    assert "disagrees about version of symbol" in host.run("dmesg").stdout
    host.run("apt-get", "install", "-y", "--reinstall", f"nvidia-driver-535={PINNED}-1")
    # rebuilt against OFED's ib_core, but the kernel's own ib_core is still the one in memory until a reboot
    in_memory = (host.root / "sys/module/ib_core/srcversion").read_text().strip()
    assert in_memory != host.run("modinfo", "-F", "srcversion", "ib_core").stdout.strip()
    assert host.run("modprobe", "nvidia-peermem", check=False).returncode == 1
    host.run("reboot")
    assert (host.root / "sys/module/ib_core/srcversion").read_text().strip() == \
        host.run("modinfo", "-F", "srcversion", "ib_core").stdout.strip()
    host.run("modprobe", "nvidia-peermem")
    assert "nvidia_peermem" in parse_proc_modules((host.root / "proc/modules").read_text())
    assert (host.root / "sys/kernel/mm/memory_peers/nv_mem/version").read_text().strip()
    # not persistent: gone after a reboot unless listed in modules-load.d
    host.run("reboot")
    assert "nvidia_peermem" not in parse_proc_modules((host.root / "proc/modules").read_text())
    (host.root / "etc/modules-load.d/nvidia-peermem.conf").write_text("nvidia-peermem\n")
    host.run("reboot")
    assert "nvidia_peermem" in host.run("lsmod").stdout
    # the unregistered fault: loaded, listed by lsmod, yet no registration
    broken = SimHost(state, "sim02")
    _install_driver(broken)
    broken.run("modprobe", "nvidia-peermem")
    assert "nvidia_peermem" in broken.run("lsmod").stdout
    assert not (broken.root / "sys/kernel/mm/memory_peers/nv_mem/version").exists()


def test_services_run_their_exec_start_through_the_stand_ins(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [{"kind": "acs_enabled", "node": "sim01", "target": "0000:17:00.0"}])
    host = SimHost(state, "sim01")
    unit = host.root / "etc/systemd/system/acs-off.service"
    unit.write_text("[Service]\nType=oneshot\nExecStart=setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000\n")
    host.run("systemctl", "daemon-reload")
    host.run("systemctl", "enable", "--now", "acs-off")
    assert host.run("setpci", "-s", "17:00.0", "ECAP_ACS+0x6.w").stdout.strip() == "0000"
    host.run("reboot")  # firmware re-enables ACS, the enabled unit clears it again at boot
    assert host.run("setpci", "-s", "17:00.0", "ECAP_ACS+0x6.w").stdout.strip() == "0000"
    assert host.run("systemctl", "is-enabled", "acs-off").stdout.strip() == "enabled"
    unit.write_text("[Service]\nType=oneshot\nExecStart=setpci -s 0000:17:00.0 ECAP_NOPE+0x6.w=0000\n")
    failed = host.run("systemctl", "restart", "acs-off", check=False)
    assert failed.returncode == 1 and "failed" in failed.stderr


def test_dcgm_reports_what_its_plugins_find_on_the_host(tmp_path: Path) -> None:
    """DCGM 4 from NVIDIA's repository: dcgmi exists once installed; -v names a host engine only while
    nvidia-dcgm runs; diag -j reports the host's own faults by the plugin that finds them, and the product's
    parser and judgement read them as it would read a real node's."""
    from provision.checks.dcgm_diag import DiagExpectations, evaluate
    from provision.checks.outcome import Outcome
    from provision.facts import dcgm
    from provision.sim.host import inject_now

    state, _ = bring_up(tmp_path, [], hosts="sim01")
    host = SimHost(state, "sim01")
    _install_driver(host)
    assert host.run("dcgmi", "-v", check=False).returncode == 127
    host.run("apt-get", "install", "-y", "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12")
    assert dcgm.parse_version(host.run("dcgmi", "-v").stdout).hostengine is None
    host.run("systemctl", "start", "nvidia-dcgm")
    host.run("systemctl", "start", "nvidia-persistenced")
    assert dcgm.parse_version(host.run("dcgmi", "-v").stdout) == dcgm.DcgmVersion("4.2.3", "4.2.3")
    healthy = host.run(*dcgm.DIAG[4].argv)
    judged = evaluate(dcgm.DIAG[4].parse(healthy.stdout), DiagExpectations(4, 8), exit_code=healthy.returncode)
    assert {result.outcome for result in judged} == {Outcome.OK} and len(judged) == 9, judged
    assert healthy.stdout.startswith('{\n\t"DCGM Diagnostic" : \n\t{\n\t\t"test_categories" : \n')
    for kind, target in (("row_remap_pending", "gpu5"), ("pcie_downtrained", "gpu2"), ("thermal_throttle", "gpu0"),
                         ("ecc_uncorrectable", "gpu7")):
        inject_now(host.paths.root.parent, kind, target)
    faulty = host.run(*dcgm.DIAG[4].argv, check=False)
    assert faulty.returncode == 205, "a double-bit ECC error is of the isolate class"
    judged = {result.check: result for result in evaluate(dcgm.DIAG[4].parse(faulty.stdout), DiagExpectations(4, 8),
                                                          exit_code=faulty.returncode)}
    failed = {check: result.message for check, result in judged.items() if result.outcome is Outcome.FAILED}
    assert set(failed) == {"dcgm_software", "dcgm_pcie", "dcgm_memory", "dcgm_memtest", "dcgm_diagnostic",
                           "dcgm_targeted_stress", "dcgm_targeted_power"}, failed
    assert failed["dcgm_software"].startswith("DCGM software: GPU 5: Page Retirement/Row Remap: GPU 5 had memory")
    assert "GPU 2: GPU 2 is running at PCI link width 8X" in failed["dcgm_pcie"]
    memtest = failed["dcgm_memtest"]
    assert memtest.startswith("DCGM memtest: GPU 7: Found") and "(DCGM error 52)" in memtest
    assert "GPU 0: Detected clocks event due to thermal violation" in failed["dcgm_targeted_power"]
    assert judged["dcgm_pulse_test"].outcome is Outcome.OK


@pytest.mark.parametrize("command", [
    ["nvidia-smi", "-e", "0"], ["lspci", "-t"], ["dmesg", "--follow"], ["apt-get", "dist-upgrade"],
    ["mlxlink", "-d", "mlx5_0"], ["dkms", "status"], ["flint", "-d", "mlx5_0", "q"],
])
def test_unsimulated_commands_fail_loudly(tmp_path: Path, command: list[str]) -> None:
    state, _ = bring_up(tmp_path, [])
    result = SimHost(state, "sim01").run(*command, check=False)
    assert result.returncode != 0
    assert "not simulated" in result.stderr


# --- every node-layer fault, observed through the tools -------------------------------------------------

def _gpu_rows(host: SimHost, fields: str) -> list[dict[str, str]]:
    return parse_query_csv(host.run("nvidia-smi", f"--query-gpu={fields}", "--format=csv,nounits").stdout)


def observe_gpu_missing(host: SimHost) -> None:
    _install_driver(host)
    assert len(_gpu_rows(host, "index")) == 7
    assert sum(1 for d in parse_lspci_verbose(host.run("lspci", "-vvv").stdout) if d.kind == "3D controller") == 7


def observe_pcie_downtrained(host: SimHost) -> None:
    gpus = [d for d in parse_lspci_verbose(host.run("lspci", "-vvv").stdout) if d.kind == "3D controller"]
    slow = [d for d in gpus if d.width_downgraded]
    assert len(slow) == 1 and slow[0].link_status.width == 8
    assert "limited by 32.0 GT/s PCIe x8 link" in host.run("dmesg").stdout
    assert (host.root / "sys/bus/pci/devices" / slow[0].address / "current_link_width").read_text().strip() == "8"


def observe_xid(host: SimHost) -> None:
    xids = find_xids(parse_kernel_log(host.run("dmesg").stdout))
    assert [(x.code, x.pci) for x in xids] == [(79, "0000:3a:00")]


def observe_ecc_uncorrectable(host: SimHost) -> None:
    _install_driver(host)
    rows = _gpu_rows(host, "index,ecc.errors.uncorrected.volatile.total")
    assert [row["ecc.errors.uncorrected.volatile.total"] for row in rows].count("0") == 7
    report = parse_query_report(host.run("nvidia-smi", "-q", "-d", "PAGE_RETIREMENT").stdout)
    assert sum(tree["Retired Pages"]["Pending Page Blacklist"] == "Yes" for tree in report.gpus.values()) == 1


def observe_row_remap_pending(host: SimHost) -> None:
    _install_driver(host)
    rows = parse_query_csv(host.run("nvidia-smi", "--query-remapped-rows=gpu_bus_id,remapped_rows.pending",
                                    "--format=csv").stdout)
    assert [row["remapped_rows.pending"] for row in rows].count("1") == 1


def observe_thermal_throttle(host: SimHost) -> None:
    _install_driver(host)
    rows = _gpu_rows(host, "index,temperature.gpu,clocks_event_reasons.sw_thermal_slowdown")
    hot = [row for row in rows if row["clocks_event_reasons.sw_thermal_slowdown"] == "Active"]
    assert len(hot) == 1 and hot[0]["temperature.gpu"] == "91"


def observe_nvlink_errors_growing(host: SimHost) -> None:
    from provision.facts.nvidia_smi import parse_nvlink_errors

    _install_driver(host)
    first = {gpu.index: gpu for gpu in parse_nvlink_errors(host.run("nvidia-smi", "nvlink", "-e").stdout).gpus}
    assert first[5].links[3]["CRC Errors"] >= 3600 and first[5].links[3]["Replay Errors"] > 0
    assert all(gpu.total(link) == 0 for index, gpu in first.items() for link in gpu.links if (index, link) != (5, 3))
    again = {gpu.index: gpu for gpu in parse_nvlink_errors(host.run("nvidia-smi", "nvlink", "-e").stdout).gpus}
    assert again[5].links[3]["CRC Errors"] >= first[5].links[3]["CRC Errors"]  # it only grows


def observe_nvlink_recovery_growing(host: SimHost) -> None:
    from provision.facts.nvidia_smi import parse_nvlink_errors

    _install_driver(host)

    def events() -> dict[tuple[int, int], int | None]:
        read = parse_nvlink_errors(host.run("nvidia-smi", "nvlink", "-e").stdout)
        return {(gpu.index, link): gpu.recovery_events(link) for gpu in read.gpus for link in gpu.links}

    first = events()
    time.sleep(0.05)
    again = events()
    assert again[(5, 2)] > first[(5, 2)] > 0  # Hopper's Recovery Errors, growing from the fault's start
    assert {key: value for key, value in again.items() if key != (5, 2)} == dict.fromkeys(set(again) - {(5, 2)}, 0)


def observe_rails_swapped(host: SimHost) -> None:
    links = host.root / "sys" / "class" / "infiniband"
    devices = {hca.name: hca.bdf for hca in _hardware(host).hcas}
    assert os.readlink(links / "mlx5_3").split("/")[-3] == devices["mlx5_0"]
    assert os.readlink(links / "mlx5_0").split("/")[-3] == devices["mlx5_3"]
    assert parse_ibstat(host.run("ibstat").stdout)["mlx5_0"].ports[1].state == "ACTIVE"
    _install_driver(host)  # the driver's own matrix follows the PCIe tree, not the spec: GPU 0 sits beside "mlx5_3"
    topo = parse_topo_matrix(host.run("nvidia-smi", "topo", "-m").stdout)
    by_name = {topo.name(device): device for device in topo.devices}
    assert topo.relation["GPU0"][by_name["mlx5_3"]] == "PXB" and topo.relation["GPU0"][by_name["mlx5_0"]] != "PXB"


def observe_fabricmanager_down(host: SimHost) -> None:
    from provision.facts.packages import FABRIC_MANAGER

    _install_driver(host)
    host.run("apt-get", "install", "-y", f"nvidia-fabricmanager-535={PINNED}-1")
    assert host.run("systemctl", "start", "nvidia-fabricmanager").returncode == 0  # the start itself succeeds
    unit = FABRIC_MANAGER.parse(host.run(*FABRIC_MANAGER.argv).stdout)
    assert (unit.load_state, unit.active_state) == ("loaded", "failed")
    assert host.run("systemctl", "is-active", "nvidia-fabricmanager", check=False).stdout.strip() == "failed"


def observe_mig_enabled(host: SimHost) -> None:
    _install_driver(host)
    rows = _gpu_rows(host, "index,mig.mode.current")
    assert [row["index"] for row in rows if row["mig.mode.current"] == "Enabled"] == ["2"]


def observe_perftest_without_cuda(host: SimHost) -> None:
    refused = host.run("ib_write_bw", "-d", "mlx5_0", "--use_cuda=0", check=False)
    assert refused.returncode == 1 and "unrecognized option '--use_cuda=0'" in refused.stderr


def observe_application_clocks_low(host: SimHost) -> None:
    _install_driver(host)
    rows = _gpu_rows(host, "index,clocks.applications.graphics,clocks.default_applications.graphics")
    assert [(row["index"], row["clocks.applications.graphics"]) for row in rows
            if row["clocks.applications.graphics"] != row["clocks.default_applications.graphics"]] == [("4", "900")]


def observe_hca_port_down(host: SimHost) -> None:
    devices = parse_ibstat(host.run("ibstat").stdout)
    assert devices["mlx5_3"].ports[1].state == "DOWN" and devices["mlx5_3"].ports[1].physical_state == "Polling"
    assert sum(device.ports[1].state == "ACTIVE" for device in devices.values()) == 7


def observe_ib_link_low_rate(host: SimHost) -> None:
    devices = parse_infiniband_class(read_tree(host.root / "sys/class/infiniband"))
    assert {name: device.ports[1].rate_gbps for name, device in devices.items()}["mlx5_5"] == 200
    assert sum(device.ports[1].rate_gbps == 400 for device in devices.values()) == 7


def observe_unknown_kernel_log_line(host: SimHost) -> None:
    assert "mce: [Hardware Error]" in host.run("dmesg", "-T").stdout


def observe_disk_full(host: SimHost) -> None:
    lines = host.run("df", "-P").stdout.splitlines()[1:]
    assert any(line.split()[4] == "99%" and line.split()[5] == "/" for line in lines)


def observe_acs_enabled(host: SimHost) -> None:
    devices = parse_lspci_verbose(host.run("lspci", "-vvv").stdout)
    capable = [d for d in devices if d.acs_capability is not None]
    assert len(capable) == 25  # per GPU/HCA pair: root port and two switch downstream ports; NVSwitch root port
    assert all(d.acs_redirects == ["ReqRedir", "CmpltRedir", "UpstreamFwd"] for d in capable)


def observe_peermem_missing(host: SimHost) -> None:
    result = host.run("modprobe", "nvidia-peermem", check=False)
    assert result.returncode == 1 and "not found" in result.stderr
    assert "nvidia" in parse_proc_modules((host.root / "proc/modules").read_text())


def observe_peermem_unregistered(host: SimHost) -> None:
    _install_driver(host)
    host.run("modprobe", "nvidia-peermem")
    assert not (host.root / "sys/kernel/mm/memory_peers/nv_mem").exists()


def observe_wrong_driver(host: SimHost) -> None:
    assert parse_query_report(host.run("nvidia-smi", "-q").stdout).header["Driver Version"] == "550.54.15"


def observe_pin_unavailable(host: SimHost) -> None:
    host.add_vendor_sources()
    missing = host.run("apt-get", "install", "-y", "nvidia-driver-535=535.183.01-1", check=False)
    assert missing.returncode == 100
    assert "Version '535.183.01-1' for 'nvidia-driver-535' was not found" in missing.stderr


def observe_reboot_hang(host: SimHost) -> None:
    from provision.sim.tools.system import power_on

    boot_id = host.root / "proc/sys/kernel/random/boot_id"
    first = boot_id.read_text()
    host.run("reboot")
    assert boot_id.read_text() == first, "hung on the way back: the same boot"
    power_on(host.root)  # what the node's BMC does when it is powered off and on
    second = boot_id.read_text()
    assert second != first
    host.run("reboot")
    assert boot_id.read_text() != second, "one hang: the next reboot comes back"


def _under_dcgm(host: SimHost, gpu: int, test: str, words: str) -> None:
    """A fault only load shows: the idle GPU looks healthy to nvidia-smi; DCGM's level 4 fails the one test on
    the one GPU, with DCGM's words, and passes every other test."""
    from provision.facts import dcgm

    _install_driver(host)
    idle = _gpu_rows(host, "index,ecc.errors.uncorrected.volatile.total,clocks_event_reasons.active")
    assert all(row["ecc.errors.uncorrected.volatile.total"] == "0" for row in idle), idle
    host.run("apt-get", "install", "-y", "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12")
    host.run("systemctl", "start", "nvidia-persistenced")
    run = host.run(*dcgm.DIAG[4].argv, check=False)
    assert run.returncode in (205, 226), run.returncode
    failed = [(t.plugin, r.gpu, m.text) for t in dcgm.parse_diag(run.stdout).tests for r in t.results
              if r.status == "Fail" for m in r.messages]
    assert [(plugin, index) for plugin, index, _text in failed] == [(test, gpu)], failed
    assert words in failed[0][2], failed


def observe_gpu_memory_mismatch(host: SimHost) -> None:
    _under_dcgm(host, 1, "memtest", "A memory mismatch was detected on GPU 1, but no error was reported")


def observe_gpu_power_low(host: SimHost) -> None:
    _under_dcgm(host, 2, "targeted_power", "Max power of 380.0 did not reach desired power minimum "
                                           "target_power_min_ratio of 525.0 for GPU 2")


def observe_pcie_replays(host: SimHost) -> None:
    _under_dcgm(host, 3, "pcie", "Detected 400 pcie_replay_counter for GPU 3 which is above the threshold 80")


def _clock(host: SimHost, time_scale: float) -> None:
    from provision.sim.node import load_state, save_state

    save_state(host.root, {**load_state(host.root), "time_scale": time_scale})


def observe_thermal_throttle_after(host: SimHost) -> None:
    """Healthy at first; once the host's clock has run the hours, thermal slowdown in every later reading."""
    _install_driver(host)
    rows = _gpu_rows(host, "index,clocks_event_reasons.active")
    assert {row["clocks_event_reasons.active"] for row in rows} == {"0x0000000000000001"}, rows  # idle only
    # A million simulated hours a second: the 50 h are run within the next tool's start-up, however quickly the
    # calls since the injection ran (at 100 h/s a fast machine read the GPUs 0.4 s after it, still healthy).
    _clock(host, 3.6e9)
    rows = {row["index"]: row for row in _gpu_rows(host, "index,clocks_event_reasons.active,temperature.gpu")}
    assert int(rows["5"]["clocks_event_reasons.active"], 16) & 0x60 and rows["5"]["temperature.gpu"] == "92"
    assert all(int(row["clocks_event_reasons.active"], 16) == 1 for index, row in rows.items() if index != "5")


def observe_symbol_errors_growing(host: SimHost) -> None:
    counter = host.root / "sys/class/infiniband/mlx5_4/ports/1/counters/symbol_error"
    host.run("ibstat")
    first = int(counter.read_text())
    _clock(host, 3600.0)  # an hour a second: 500 an hour grows by the second
    time.sleep(1.5)
    host.run("ibstat")  # any tool the host runs brings its clock to the present
    grown = int(counter.read_text()) - first
    assert grown >= 500, grown
    other = host.root / "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    assert int(other.read_text()) == 0


def observe_clock_sag(host: SimHost) -> None:
    """A worker computing on GPUs 3 and 4 (its marker names this live process): both clock at the H100's 1980 MHz
    under load, idle ones at 345 with the idle bit; once the hours have run, GPU 3 clocks at 0.8 of that and the
    driver names no reason for it."""
    import os

    _install_driver(host)
    busy = host.root / "var/lib/provision-sim/busy"
    busy.mkdir(parents=True, exist_ok=True)
    for gpu, pid in ((3, os.getpid()), (4, os.getppid())):
        (busy / str(pid)).write_text(str(gpu))
    (busy / "999999999").write_text("5")  # a worker long gone: its GPU is idle again
    fields = "index,clocks_event_reasons.active,clocks.sm,power.draw"
    rows = {row["index"]: row for row in _gpu_rows(host, fields)}
    assert (rows["3"]["clocks.sm"], rows["4"]["clocks.sm"], rows["5"]["clocks.sm"]) == ("1980", "1980", "345"), rows
    assert rows["3"]["clocks_event_reasons.active"] == "0x0000000000000000" and rows["5"][
        "clocks_event_reasons.active"] == "0x0000000000000001"
    _clock(host, 3.6e9)
    rows = {row["index"]: row for row in _gpu_rows(host, fields)}
    assert (rows["3"]["clocks.sm"], rows["4"]["clocks.sm"]) == ("1584", "1980"), rows
    assert rows["3"]["clocks_event_reasons.active"] == "0x0000000000000000"  # nothing named
    assert float(rows["3"]["power.draw"]) < float(rows["4"]["power.draw"])
    assert not (busy / "999999999").exists(), "a marker whose worker ended is cleared"


NODE_FAULTS = {
    "clock_sag": ({"target": "gpu3", "params": {"after_h": 50, "factor": 0.8}}, observe_clock_sag),
    "thermal_throttle_after": ({"target": "gpu5", "params": {"after_h": 50}}, observe_thermal_throttle_after),
    "symbol_errors_growing": ({"target": "mlx5_4"}, observe_symbol_errors_growing),
    "gpu_memory_mismatch": ({"target": "gpu1"}, observe_gpu_memory_mismatch),
    "gpu_power_low": ({"target": "gpu2", "params": {"max_w": 380.0}}, observe_gpu_power_low),
    "pcie_replays": ({"target": "gpu3"}, observe_pcie_replays),
    "reboot_hang": ({}, observe_reboot_hang),
    "gpu_missing": ({"target": "gpu1"}, observe_gpu_missing),
    "pcie_downtrained": ({"target": "gpu2", "params": {"width": 8}}, observe_pcie_downtrained),
    "xid": ({"target": "gpu1", "params": {"code": 79}}, observe_xid),
    "ecc_uncorrectable": ({"target": "gpu4"}, observe_ecc_uncorrectable),
    "row_remap_pending": ({"target": "gpu6"}, observe_row_remap_pending),
    "thermal_throttle": ({"target": "gpu7"}, observe_thermal_throttle),
    "nvlink_errors_growing": ({"target": "gpu5"}, observe_nvlink_errors_growing),
    "nvlink_recovery_growing": ({"target": "gpu5", "params": {"link": 2, "per_hour": 1e7}},
                                observe_nvlink_recovery_growing),
    "rails_swapped": ({"target": "mlx5_0", "params": {"with": "mlx5_3"}}, observe_rails_swapped),
    "fabricmanager_down": ({}, observe_fabricmanager_down),
    "mig_enabled": ({"target": "gpu2"}, observe_mig_enabled),
    "perftest_without_cuda": ({}, observe_perftest_without_cuda),
    "application_clocks_low": ({"target": "gpu4", "params": {"mhz": 900}}, observe_application_clocks_low),
    "hca_port_down": ({"target": "mlx5_3"}, observe_hca_port_down),
    "ib_link_low_rate": ({"target": "mlx5_5", "params": {"rate": "HDR"}}, observe_ib_link_low_rate),
    "unknown_kernel_log_line": ({}, observe_unknown_kernel_log_line),
    "disk_full": ({"params": {"mount": "/", "percent": 99}}, observe_disk_full),
    "acs_enabled": ({}, observe_acs_enabled),
    "peermem_missing": ({}, observe_peermem_missing),
    "peermem_unregistered": ({}, observe_peermem_unregistered),
    "wrong_driver": ({}, observe_wrong_driver),
    "pin_unavailable": ({}, observe_pin_unavailable),
}


def test_every_node_layer_fault_has_an_observation() -> None:
    """A host's faults here; a compute tray's in tests/sim/test_nvl72.py, on a simulated rack."""
    from tests.sim.test_nvl72 import TRAY_FAULTS

    node_layer = {name for name, kind in CATALOG.items() if kind.layer == "node"}
    assert node_layer == set(NODE_FAULTS) | set(TRAY_FAULTS) and not set(NODE_FAULTS) & set(TRAY_FAULTS)


@pytest.mark.parametrize("kind", sorted(NODE_FAULTS))
def test_node_fault_is_visible_through_the_tools(tmp_path: Path, kind: str) -> None:
    extra, observe = NODE_FAULTS[kind]
    state, manifest = bring_up(tmp_path, [{"kind": kind, "node": "sim02", **extra}])
    assert manifest["faults"][0]["injected"]
    observe(SimHost(state, "sim02"))


def test_stand_ins_only_touch_their_own_host(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [])
    one, two = SimHost(state, "sim01"), SimHost(state, "sim02")
    _install_driver(one)
    assert two.run("nvidia-smi", "-L", check=False).returncode == 127
    uuids = [set(row["uuid"] for row in _gpu_rows(h, "uuid")) for h in (one,)]
    _install_driver(two)
    assert uuids[0].isdisjoint({row["uuid"] for row in _gpu_rows(two, "uuid")})
    nvlink = parse_nvlink_status(two.run("nvidia-smi", "nvlink", "-s").stdout)
    assert len(nvlink) == 8 and all(len(gpu.links) == 18 and not gpu.inactive_links for gpu in nvlink)
    topo = two.run("nvidia-smi", "topo", "-m").stdout
    assert "NV18" in topo and "NIC0: mlx5_0" in topo
    matrix = parse_topo_matrix(topo)  # worked out from the PCIe tree: each rail HCA is its GPU's one PXB neighbour
    rails = yaml.safe_load((state.parent / "spec.yaml").read_text())["hardware"]["hgx-h100"]["rails"]
    by_name = {matrix.name(device): device for device in matrix.devices}
    for hca, gpu in rails.items():
        row = matrix.relation[f"GPU{gpu}"]
        assert row[by_name[hca]] == "PXB" and [row[by_name[other]] for other in rails].count("PXB") == 1, (hca, row)
    assert os.access(two.paths.bin / "nvidia-smi", os.X_OK)


def _pair_test(state: Path, server_host: str, client_host: str, device: str, *extra: str):
    import subprocess

    port = str(free_loopback_port())
    server_node = SimHost(state, server_host)
    client = SimHost(state, client_host)
    server = subprocess.Popen(["ib_write_bw", "-d", device, "-p", port, "--report_gbits", "-s", "1048576",
                               "--iters", "20", *extra], env=cluster_env(server_node), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and "Waiting for client" in "".join(
            server.stdout.readline() for _ in range(4))
        address = json.loads((server_node.root / "var/lib/provision-sim/node.json").read_text())["address"]
        result = client.run("ib_write_bw", "-d", device, "-p", port, "--report_gbits", "-s", "1048576",
                            "--iters", "20", *extra, address, check=False)
        server_out, server_err = server.communicate(timeout=30)
    finally:
        server.kill()
        server.wait()
    return result, server.returncode, server_out + server_err


def cluster_env(host: SimHost) -> dict[str, str]:
    from provision.sim import cluster

    return cluster.environment(host.paths)


def test_ib_write_bw_moves_bytes_between_two_hosts_and_reports_the_link(tmp_path: Path) -> None:
    from provision.facts.perftest import largest_message_average_gbps, parse_bandwidth

    state, _ = bring_up(tmp_path, [{"kind": "ib_link_low_rate", "node": "sim02", "target": "mlx5_3",
                                    "params": {"rate": "HDR"}},
                                   {"kind": "hca_port_down", "node": "sim02", "target": "mlx5_4"}])
    healthy, code, server_text = _pair_test(state, "sim01", "sim02", "mlx5_0")
    assert healthy.returncode == 0 and code == 0, healthy.stderr
    assert 380 <= largest_message_average_gbps(parse_bandwidth(healthy.stdout)) <= 400
    assert largest_message_average_gbps(parse_bandwidth(server_text)) >= 380
    slow, _code, _text = _pair_test(state, "sim01", "sim02", "mlx5_3")
    assert 185 <= largest_message_average_gbps(parse_bandwidth(slow.stdout)) <= 200  # the HDR end limits it
    both_ways, _code, _text = _pair_test(state, "sim01", "sim02", "mlx5_0", "-b")
    assert largest_message_average_gbps(parse_bandwidth(both_ways.stdout)) >= 760
    down = SimHost(state, "sim02").run("ib_write_bw", "-d", "mlx5_4", "127.0.0.11", check=False)
    assert down.returncode == 1 and "state is Down" in down.stderr
    nobody = SimHost(state, "sim02").run("ib_write_bw", "-d", "mlx5_0", "-p", str(free_loopback_port()), "127.0.0.11",
                                         check=False)
    assert nobody.returncode == 1 and "Couldn't connect" in nobody.stderr
    outside = SimHost(state, "sim02").run("ib_write_bw", "-d", "mlx5_0", "192.0.2.1", check=False)
    assert outside.returncode != 0 and "not simulated" in outside.stderr


def test_ib_write_bw_server_shows_the_connection_at_once_and_its_death_is_a_completion_error(tmp_path: Path) -> None:
    """As perftest: the server prints the test's parameters and both addresses as soon as its client has connected
    (the pair-test helper tells a reached server from one still waiting by them: a server that printed them late
    was stopped mid-test as never reached, issue 55's healthy bench, seed 2), and a client whose server dies
    under it ends with the completion error RC reports, not a stack trace."""
    import signal
    import subprocess

    state, _ = bring_up(tmp_path, [])
    port = str(free_loopback_port())
    server_node, client = SimHost(state, "sim01"), SimHost(state, "sim02")
    server = subprocess.Popen(["ib_write_bw", "-d", "mlx5_0", "-p", port, "--report_gbits", "-s", "8388608",
                               "--iters", "1000"], env=cluster_env(server_node), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert server.stdout is not None and server.stderr is not None
    assert "Waiting for client" in "".join(server.stdout.readline() for _ in range(4))  # listening
    address = json.loads((server_node.root / "var/lib/provision-sim/node.json").read_text())["address"]
    sender = subprocess.Popen(["ib_write_bw", "-d", "mlx5_0", "-p", port, "--report_gbits", "-s", "8388608",
                               "--iters", "1000", address], env=cluster_env(client), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        shown = []
        for _ in range(40):  # the connection's block: before the transfer has ended
            shown.append(server.stdout.readline())
            if "remote address" in shown[-1] or not shown[-1]:
                break
        assert any("remote address: LID" in line for line in shown), (shown, server.poll() is not None
                                                                     and server.stderr.read())
        assert not any("#bytes" in line for line in shown), "the results come at the end, not with the addresses"
        os.killpg(server.pid, signal.SIGKILL)
        _out, err = sender.communicate(timeout=60)
    finally:
        for process in (server, sender):
            process.kill()
            process.wait()
    assert sender.returncode == 1 and "Traceback" not in err
    assert "Completion with error at client" in err or "Server did not confirm" in err, err


def test_ib_write_bw_with_gpudirect_needs_registered_peermem(tmp_path: Path) -> None:
    state, _ = bring_up(tmp_path, [])
    host = SimHost(state, "sim01")
    no_driver = host.run("ib_write_bw", "-d", "mlx5_0", "--use_cuda=0", "127.0.0.12", check=False)
    assert no_driver.returncode == 1 and "CUDA_ERROR_NO_DEVICE" in no_driver.stderr
    _install_driver(host)
    no_peermem = host.run("ib_write_bw", "-d", "mlx5_0", "--use_cuda=0", "127.0.0.12", check=False)
    assert no_peermem.returncode == 1 and "nvidia-peermem not registered" in no_peermem.stderr


def test_link_quality_lists_exactly_the_flows_whose_route_crosses_a_degraded_cable(tmp_path: Path) -> None:
    from provision.network.routes import routing_for
    from provision.network.sources import design_fabric
    from provision.sim.linkquality import flow_factors
    from provision.spec import load_spec
    from topology.smroutes import TableRouter

    degraded = {"leaf-su02-r1/6": 0.5, "spine-g03-02/6": 0.4, "leaf-su01-r2/3": 0.6}  # leaf-spine, spine-core, host
    state, _ = bring_up(tmp_path, [{"kind": "degraded_link", "target": target, "params": {"factor": factor}}
                                   for target, factor in degraded.items()], hosts="sim[01-16]")
    loaded = load_spec(tmp_path / "spec.yaml")
    # the routes are the simulated subnet manager's, read back from the tables it dumped: not our D-mod-K
    router = routing_for(loaded, design_fabric(loaded), state).router
    assert isinstance(router, TableRouter)
    factors = {}
    for target, factor in degraded.items():
        switch, port = target.rsplit("/", 1)
        cable = router.fabric.cable_at((switch, int(port)))
        assert cable is not None
        factors[router.index[cable]] = factor
    directory = state / "sim" / "fabric"
    hcas = router.hcas[::3]  # a third of the sources and targets: every kind of route, in a second
    flows = [(source, target) for source in hcas for target in hcas if source != target]
    for flow, share in zip(flows, flow_factors(directory, flows), strict=True):
        crossed = [factors[number] for number in router.path(*flow) if number in factors]
        assert share == min(crossed, default=1.0), flow
    assert not router.unrouted


def test_a_pre_535_driver_knows_only_the_throttle_names_and_preflight_asks_for_those(tmp_path: Path) -> None:
    """nvidia-smi renamed clocks_throttle_reasons to clocks_event_reasons in the 535 branch (keeping the old names as
    aliases); before it the new name is refused, exit 2. Preflight asks --help-query-gpu first and reads the GPUs of
    a 525 host with the names that driver knows."""
    from provision.checks import preflight
    from provision.facts.nvidia_smi import parse_help_query
    from provision.hosts.remote import LocalSession
    from provision.sim import cluster

    state, _ = bring_up(tmp_path, [{"kind": "wrong_driver", "node": "sim02", "params": {"version": "525.147.05"}}])
    host = SimHost(state, "sim02")
    names = parse_help_query(host.run("nvidia-smi", "--help-query-gpu").stdout)
    assert "clocks_throttle_reasons.active" in names and "clocks_event_reasons.active" not in names
    refused = host.run("nvidia-smi", "--query-gpu=index,clocks_event_reasons.active", "--format=csv", check=False)
    assert refused.returncode == 2 and 'Field "clocks_event_reasons.active" is not a valid field' in refused.stderr
    session = LocalSession("sim02", host.root, cluster.environment(host.paths))
    gathered = preflight.collect(session, 30)
    assert "gpus" in gathered.outputs, gathered.problems.get("gpus")
    rows = preflight.nvidia_smi.GPUS.parse(gathered.outputs["gpus"])
    assert len(rows) == 8 and all(row.clocks_event_reasons.startswith("0x") for row in rows)
    current = SimHost(state, "sim01")  # the pinned 535 host names both
    _install_driver(current)
    assert "clocks_event_reasons.active" in parse_help_query(current.run("nvidia-smi", "--help-query-gpu").stdout)


def test_nccl_semantics_return_from_wait_at_once_and_complete_in_the_synchronise(tmp_path: Path) -> None:
    """With simulation.collective_semantics: nccl the simulated node's torch behaves as NCCL does for the
    collectives test: wait() returns at once, the data is there only after the device synchronise."""
    spec = write_spec(tmp_path, [], hosts="sim[01-02]", collective_semantics="nccl")
    from provision.sim import cluster
    from provision.spec import load_spec

    state = tmp_path / "state"
    cluster.up(load_spec(spec), state)
    host = SimHost(state, "sim01")
    code = ("import datetime, torch, torch.distributed as dist\n"
            "store = dist.TCPStore('127.0.0.1', 0, 1, is_master=True, timeout=datetime.timedelta(seconds=10))\n"
            "dist.init_process_group('gloo', store=store, rank=0, world_size=1)\n"
            "tensor = torch.ones(4)\n"
            "work = dist.all_reduce(tensor, async_op=True)\n"
            "print(type(work).__name__, work.wait())\n"
            "torch.cpu.synchronize()\n"
            "print('synchronised', tensor.tolist())\n"
            "dist.destroy_process_group()\n")
    out = host.run("python3", "-c", code, "--test", "collectives").stdout.split("\n")
    assert out[0] == "Queued True" and out[1] == "synchronised [1.0, 1.0, 1.0, 1.0]", out
    gloo_like = host.run("python3", "-c", code, "--test", "training").stdout.split("\n")
    assert gloo_like[0] != "Queued True", gloo_like  # DDP and FSDP wait on their own works: left as they are
