"""Provisioning end to end on the simulated cluster: real ansible-runner runs of the real playbooks.

Four hosts, each delivered wrong in a different way. Budget: Ansible costs ~0.3 s of CPU per module call per host
on this machine (ansible-core 2.19 compiles its module_utils from each module's zip, every call), about 45 calls a
host a play, and a play's tasks run one after another: a one-host play takes ~25 s however few hosts it has. The
test reuses one cluster for every assertion, and each plan runs on as few hosts as its assertion needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provision.facts.lspci import parse_lspci_verbose
from provision.facts.nvidia_smi import parse_query_csv
from provision.facts.packages import parse_dpkg_status, parse_proc_modules
from tests.conftest import ROOT, run_cli
from tests.simhelpers import SimHost, write_spec

PROVISIONING = "simulate,register,provision"  # burn-in has its own tests

FAULTS = [{"kind": "acs_enabled", "node": "sim01"}, {"kind": "wrong_driver", "node": "sim02"},
          {"kind": "peermem_missing", "node": "sim03"}, {"kind": "peermem_unregistered", "node": "sim04"}]
#: These tests look at one host failing while the others carry on: a failure budget that lets them (the default
#: 10% stops the play at the first failure of so few hosts; tests/hosts/test_provisioning_budget.py tests that)
TOLERANT = {"max_failure_percent": {"provision": 50, "burnin": 20}}


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory) -> tuple[Path, Path, dict]:
    directory = tmp_path_factory.mktemp("provision")
    spec = write_spec(directory, FAULTS, hosts="sim[01-04]", admission=TOLERANT)
    result = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600)
    assert result.returncode == 1, result.stderr  # sim04 cannot be fixed
    return spec, directory / ".provision" / "sim16", json.loads(result.stdout)


def test_hosts_that_can_be_fixed_are_converged_and_the_other_is_reported(provisioned) -> None:
    spec, _state, applied = provisioned
    assert applied["quarantined"] == ["sim04"]
    status = json.loads(run_cli("status", "--json", str(spec)).stdout)
    states = {node["name"]: (node["state"], node["stage"], node["reason"]) for node in status["nodes"]}
    assert {name: value[0] for name, value in states.items()} == {
        "sim01": "provisioned", "sim02": "provisioned", "sim03": "provisioned", "sim04": "quarantined"}
    assert states["sim04"][1] == "provision"
    assert "Load, persist and verify nvidia-peermem" in states["sim04"][2]
    assert "loaded but not registered" in states["sim04"][2]


def test_converged_hosts_are_what_the_spec_says(provisioned) -> None:
    _spec, state, _applied = provisioned
    for name in ("sim01", "sim02", "sim03"):
        host = SimHost(state, name)
        devices = parse_lspci_verbose(host.run("lspci", "-vvv").stdout)
        assert not [d.address for d in devices if d.acs_redirects and d.address != "0000:04:01.0"]
        rows = parse_query_csv(host.run("nvidia-smi", "--query-gpu=driver_version", "--format=csv").stdout)
        assert {row["driver_version"] for row in rows} == {"535.183.01"} and len(rows) == 8
        packages = parse_dpkg_status((host.root / "var/lib/dpkg/status").read_text())
        assert packages["nvidia-driver-535"].held and packages["doca-ofed"].held
        assert packages["cuda-toolkit-12-2"].held, "software.cuda: the toolkit is pinned and held"
        assert "nvidia-driver-550" not in packages
        kernel = (host.root / "proc/sys/kernel/osrelease").read_text().strip()
        assert packages[f"linux-image-{kernel}"].held, "the kernel the DKMS modules were built for is held"
        blacklist = (host.root / "etc/apt/apt.conf.d/51provision-pinned").read_text()
        assert all(f'"{pattern}";' in blacklist for pattern in ("linux-", "nvidia-", "doca-", "cuda-")), blacklist
        assert (host.root / "sys/kernel/mm/memory_peers/nv_mem/version").exists()
        assert (host.root / "etc/modules-load.d/nvidia-peermem.conf").read_text() == "nvidia-peermem\n"
        sources = (host.root / "etc/apt/sources.list.d/provision.list").read_text().splitlines()[1:]
        assert sources == [
            "deb [signed-by=/etc/apt/keyrings/provision-nvidia-cuda.asc] "
            "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /",
            "deb [signed-by=/etc/apt/keyrings/provision-nvidia-doca.asc] "
            "https://linux.mellanox.com/public/repo/doca/2.9.1/ubuntu22.04/x86_64/ ./"]
        assert (host.root / "proc/cmdline").read_text().split()[-1] == "iommu=pt", "host.iommu: passthrough"
        in_memory = (host.root / "sys/module/ib_core/srcversion").read_text().strip()
        assert in_memory == host.run("modinfo", "-F", "srcversion", "ib_core").stdout.strip(), \
            "rebooted into OFED's ib_core, which the stock image's running stack was not"
        assert (host.root / "proc/sys/kernel/numa_balancing").read_text().strip() == "0"
        assert host.run("systemctl", "is-enabled", "provision-acs").stdout.strip() == "enabled"


def test_a_stock_image_without_the_vendors_repositories_fails_with_the_reason(tmp_path: Path) -> None:
    data = yaml.safe_load(write_spec(tmp_path, [], hosts="sim01").read_text())
    del data["software"]["repositories"]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600)
    assert result.returncode == 1, result.stderr
    status = json.loads(run_cli("status", "--json", str(spec)).stdout)
    (node,) = status["nodes"]
    assert node["state"] == "quarantined" and "Unable to locate package doca-ofed" in node["reason"], node
    assert "software.repositories" in node["reason"]


def test_settings_survive_a_reboot(provisioned) -> None:
    _spec, state, _applied = provisioned
    host = SimHost(state, "sim01")
    host.run("reboot")  # firmware turns ACS back on; the boot unit must clear it again
    devices = parse_lspci_verbose(host.run("lspci", "-vvv").stdout)
    assert not [d.address for d in devices if d.acs_redirects and d.address != "0000:04:01.0"]
    assert "nvidia_peermem" in parse_proc_modules((host.root / "proc/modules").read_text())
    assert (host.root / "sys/kernel/mm/memory_peers/nv_mem/version").exists()
    assert host.run("cat", str(host.root / "proc/swaps")).stdout.count("\n") == 1  # swap stays off
    governors = {path.read_text().strip() for path in
                 (host.root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")}
    assert governors == {"performance"}, "the boot starts every CPU at schedutil; the governor's unit sets it again"
    assert (host.root / "proc/sys/kernel/numa_balancing").read_text().strip() == "0"


def test_second_apply_changes_nothing_and_plan_shows_only_drift(provisioned) -> None:
    spec, state, _applied = provisioned
    again = run_cli("apply", "--json", str(spec), "--limit", "sim[01-03]", "--phases", PROVISIONING, timeout=600)
    assert again.returncode == 0, again.stderr
    record = Path(json.loads(again.stdout)["run_dir"]) / "provision.json"
    assert [host["changed"] for host in json.loads(record.read_text())] == [0, 0, 0]
    # each plan is a check-mode play: a converged host and a drifted one beside it are all they need to show
    clean = run_cli("plan", str(spec), "--limit", "sim01", "--phases", PROVISIONING, timeout=600)
    assert clean.stdout.strip() == "No changes: sim16 (4 nodes) matches the spec.", clean.stdout
    SimHost(state, "sim02").run("setpci", "-s", "0000:37:01.0", "ECAP_ACS+0x6.w=001d")  # someone re-enabled ACS
    drift = run_cli("plan", "--json", str(spec), "--limit", "sim[01-02]", timeout=600)
    provision = next(phase for phase in json.loads(drift.stdout)["phases"] if phase["phase"] == "provision")
    assert list(provision["changes"]) == ["sim02"]
    assert [change["task"] for change in provision["changes"]["sim02"]] == [
        "Clear ACS on the bridges in scope and read it back"]
    assert "0000:37:01.0 ACSCtl=001d" in provision["changes"]["sim02"][0]["diff"]


def test_playbooks_pass_syntax_check() -> None:
    """ansible-lint (production profile) is `make lint`'s, which `make test` runs before this suite."""
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent
    syntax = subprocess.run([str(bin_dir / "ansible-playbook"), "--syntax-check", "-i", "localhost,", "site.yml"],
                            cwd=ROOT / "playbooks", capture_output=True, text=True, timeout=120)
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr


def test_sigint_mid_run_leaves_consistent_state_and_the_next_apply_continues(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    # one host whose wrong driver makes its play long (the reboot): the interrupt lands mid-play
    spec = write_spec(tmp_path, [{"kind": "wrong_driver", "node": "sim01"}], hosts="sim01")
    process = subprocess.Popen([sys.executable, "-m", "provision", "apply", str(spec), "--phases", PROVISIONING],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    runs = tmp_path / ".provision" / "sim16" / "runs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the playbook is really running tasks
        events = list(runs.glob("*/events.jsonl"))
        if events and '"event": "task"' in events[0].read_text():
            break
        time.sleep(0.2)
    else:
        process.kill()
        raise AssertionError("the playbook never started")
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does to the foreground process group
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "interrupted" in err and "run record" in err
    status = json.loads(run_cli("status", "--json", str(spec)).stdout)
    assert status["last_run"]["status"] == "interrupted"
    assert {node["state"] for node in status["nodes"]} == {"new"}, "an interrupted play proves nothing"
    # every process of the run (ansible-playbook, its forks, the module shells) names a path under tmp_path; the
    # runner's cancel signals them as it returns, and on a loaded machine they take a moment more to go (one run of
    # make test saw ansible-playbook still there at 1 s): gone within 5 s, or the run left them behind
    deadline = time.monotonic() + 5
    while (leftovers := subprocess.run(["pgrep", "-af", str(tmp_path)], capture_output=True, text=True)).stdout \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers.stdout.strip() == "", f"processes outlived the run:\n{leftovers.stdout}"
    again = run_cli("apply", "--json", str(spec), "--phases", PROVISIONING, timeout=600)
    assert again.returncode == 0, again.stderr
    final = json.loads(run_cli("status", "--json", str(spec)).stdout)
    assert {node["state"] for node in final["nodes"]} == {"provisioned"}
