"""A simulated GB200 NVL72 rack's compute trays, as the real tools show a tray (../shared/fixtures/blackwell: the
whole ``nvidia-smi -q`` of a real tray, an 18-tray domain's ``nvidia-imex-ctl -N``), and the tray faults each
visible through those tools and judged by preflight's tray checks.

Two racks of three trays (the domain check needs a majority to name the odd tray out): rack1's gb001 healthy,
gb002 a GPU left out of any partition, gb003 a GPU whose fabric health is Unhealthy; rack2's gb005 cabled into
another rack's partition, gb006's IMEX daemon exiting once started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.checks import nvlink_domain, preflight, spec_expectations
from provision.checks.outcome import Outcome
from provision.facts import imex, lspci, nvidia_smi, system
from provision.hosts.remote import LocalSession
from provision.sim import cluster, nvl72
from provision.sim.tools import apt
from provision.sim.tools import imex as imex_tool
from provision.spec import load_spec
from tests.conftest import ROOT, SHARED_FIXTURES
from tests.simhelpers import SimHost

DRIVER = "570.172.08"
BLACKWELL = SHARED_FIXTURES / "blackwell"
needs_blackwell = pytest.mark.skipif(not BLACKWELL.is_dir(), reason="../shared/fixtures/blackwell absent in this clone")

#: Each tray fault, the tray it is on, and what the tray's tools must show for it (tests/sim/test_sim.py's
#: observation list names these as the trays' own).
TRAY_FAULTS = {
    "fabric_insufficient_resources": {"node": "gb002", "target": "gpu1"},
    "fabric_unhealthy": {"node": "gb003", "target": "gpu2"},
    "foreign_partition": {"node": "gb005"},
    "imex_down": {"node": "gb006"},
    "nvlink_xid149": {"node": "gb004", "target": "gpu3"},
}
RACKS = {"rack1": ["gb001", "gb002", "gb003"], "rack2": ["gb004", "gb005", "gb006"]}


def tray_spec(directory: Path, faults: list[dict]) -> Path:
    """The GB200 example cut to two racks of three trays (12-GPU domains), with a simulation."""
    data = yaml.safe_load((ROOT / "examples" / "gb200-nvl72.yaml").read_text())
    for group, domain, hosts in zip(data["nodes"]["groups"], data["nvlink_domains"], ("gb[001-003]", "gb[004-006]"),
                                    strict=True):
        group["hosts"] = domain["hosts"] = hosts
        domain["size"] = 12
        if domain.get("on_tray_failure") == "shrink":
            domain["min_trays"] = 2
    data["simulation"] = {"seed": 3, "faults": faults}
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def rack(tmp_path_factory) -> dict:
    """Every tray with its driver and IMEX installed as the imex role will leave them: the channel device asked of
    the nvidia module, nodes_config.cfg listing the domain's trays in order, the daemon enabled and started."""
    directory = tmp_path_factory.mktemp("nvl72")
    loaded = load_spec(tray_spec(directory, [{"kind": kind, **where} for kind, where in TRAY_FAULTS.items()]))
    state = directory / "state"
    cluster.up(loaded, state)
    addresses = {node.name: node.address for node in loaded.nodes}
    hosts = {}
    for trays in RACKS.values():
        peers = "".join(f"{addresses[tray]}\n" for tray in trays)
        for tray in trays:
            host = SimHost(state, tray).add_vendor_sources()
            host.run("apt-get", "install", "-y", f"nvidia-driver-570={DRIVER}-1", f"nvidia-imex-570={DRIVER}-1")
            (host.root / "etc/modprobe.d/nvidia-imex.conf").write_text("options nvidia NVreg_CreateImexChannel0=1\n")
            host.run("modprobe", "nvidia")
            (host.root / "etc/nvidia-imex/nodes_config.cfg").write_text(peers)
            host.run("systemctl", "enable", "--now", "nvidia-imex", check=False)  # gb006's exits: judged below
            hosts[tray] = host
    return {"loaded": loaded, "state": state, "hosts": hosts}


def _preflight(rack: dict, tray: str) -> dict[str, preflight.CheckResult]:
    loaded, host = rack["loaded"], rack["hosts"][tray]
    node = next(node for node in loaded.nodes if node.name == tray)
    session = LocalSession(tray, host.root, cluster.environment(host.paths))
    expect = spec_expectations.expectations(loaded, node)
    return {result.check: result for result in preflight.evaluate(preflight.collect(session, 30, platform="nvl72"),
                                                                   expect)}


def test_a_tray_is_an_aarch64_grace_tray_as_its_tools_show_it(rack: dict) -> None:
    host = rack["hosts"]["gb001"]
    assert system.parse_machine(host.run("uname", "-m").stdout) == "aarch64"
    devices = {device.address: device for device in lspci.parse_lspci_verbose(host.run("lspci", "-vvv").stdout)}
    gpus = [device for device in devices.values() if device.kind == "3D controller"]
    assert [gpu.address for gpu in gpus] == ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"]
    assert [gpu.numa_node for gpu in gpus] == [0, 0, 1, 1]
    assert {(gpu.link_status.width, gpu.link_capability.width) for gpu in gpus if gpu.link_status
            and gpu.link_capability} == {(1, 16)}  # Gen4 x1 over C2C, healthy
    topo = nvidia_smi.parse_topo_matrix(host.run("nvidia-smi", "topo", "-m").stdout)
    gpu_names = [name for name in topo.devices if name.startswith("GPU")]
    nics = [name for name in topo.devices if name.startswith("NIC")]
    assert {topo.relation[gpu][nic] for gpu in gpu_names for nic in nics} == {"SYS"}
    assert {topo.relation[a][b] for a in gpu_names for b in gpu_names if a != b} == {"NV18"}


def test_a_healthy_tray_passes_every_tray_check_and_its_c2c_pcie_is_no_fault(rack: dict) -> None:
    results = _preflight(rack, "gb001")
    for check in ("gpu_fabric", "platform", "imex", "imex_peers", "imex_channel", "pcie_link", "rail_map", "arch"):
        assert results[check].outcome is Outcome.OK, (check, results[check])
    assert "not judged" in results["pcie_link"].message
    assert results["fabric_manager"].outcome is Outcome.SILENCED  # none runs on a compute tray


def test_a_gpu_in_no_partition_fails_the_fabric_check(rack: dict) -> None:
    gpus = nvidia_smi.parse_gpu_fabric(rack["hosts"]["gb002"].run("nvidia-smi", "-q").stdout)
    left_out = gpus[1]
    assert (left_out.state, left_out.status, left_out.clique_id) == ("Completed", "Insufficient Resources", "0")
    assert left_out.cluster_uuid == nvlink_domain.ZERO_UUID
    result = _preflight(rack, "gb002")["gpu_fabric"]
    assert result.outcome is Outcome.FAILED and "0009:01:00.0" in result.message and "Insufficient" in result.message


def test_an_unhealthy_summary_fails_though_state_and_status_are_good(rack: dict) -> None:
    result = _preflight(rack, "gb003")["gpu_fabric"]
    assert result.outcome is Outcome.FAILED and "fabric health Unhealthy" in result.message
    assert "0018:01:00.0" in result.message


def test_a_tray_in_another_racks_partition_is_named_by_the_domain_check(rack: dict) -> None:
    trays = {tray: nvidia_smi.parse_gpu_fabric(rack["hosts"][tray].run("nvidia-smi", "-q").stdout)
             for tray in RACKS["rack2"]}
    judged = nvlink_domain.judge_domain_membership(trays)
    assert judged["gb005"].outcome is Outcome.FAILED and "another NVLink domain" in judged["gb005"].message
    assert judged["gb004"].outcome is judged["gb006"].outcome is Outcome.OK
    rack1 = nvidia_smi.parse_gpu_fabric(rack["hosts"]["gb001"].run("nvidia-smi", "-q").stdout)
    assert rack1[0].cluster_uuid != trays["gb004"][0].cluster_uuid  # each rack its own partition


def test_a_tray_whose_imex_exits_fails_and_its_peers_name_it_without_failing(rack: dict) -> None:
    down = _preflight(rack, "gb006")
    assert down["imex"].outcome is Outcome.FAILED and "does not serve" in down["imex"].message
    peer = _preflight(rack, "gb004")["imex"]
    address = next(node.address for node in rack["loaded"].nodes if node.name == "gb006")
    assert peer.outcome is Outcome.OK and address in peer.message, peer  # gb006's finding, not gb004's
    status = imex.parse_imex_nodes(rack["hosts"]["gb004"].run("nvidia-imex-ctl", "-N").stdout)
    assert status.domain_state != "UP" and [node.state == "READY" for node in status.nodes] == [True, True, False]


def test_imex_peers_that_differ_from_the_spec_are_cut_off(rack: dict) -> None:
    """A tray whose nodes_config.cfg differs from its domain's: its own peer check fails, and its peers see a node
    map mismatch (the real tool's !M!). The file is put back after."""
    host = rack["hosts"]["gb003"]
    config = host.root / "etc/nvidia-imex/nodes_config.cfg"
    kept = config.read_text()
    try:
        config.write_text(kept.splitlines()[0] + "\n" + kept.splitlines()[1] + "\n")
        assert _preflight(rack, "gb003")["imex_peers"].outcome is Outcome.FAILED
        seen = imex.parse_imex_nodes(rack["hosts"]["gb001"].run("nvidia-imex-ctl", "-N").stdout)
        assert seen.matrix[0][2] == "!M!" and seen.domain_state != "UP"
    finally:
        config.write_text(kept)


@pytest.mark.fast
def test_each_domain_is_its_own_partition_and_each_tray_knows_its_place(tmp_path: Path) -> None:
    loaded = load_spec(tray_spec(tmp_path, []))
    places = nvl72.tray_places(loaded, 3)
    assert [places[tray]["tray_index"] for tray in RACKS["rack1"]] == [1, 2, 3]
    assert places["gb001"]["cluster_uuid"] == places["gb003"]["cluster_uuid"] != places["gb004"]["cluster_uuid"]
    assert places["gb001"]["clique_id"] != "0" and list(places["gb004"]["peers"].values()) == RACKS["rack2"]
    assert nvl72.tray_places(loaded, 3) == places and nvl72.tray_places(loaded, 4) != places  # by seed
    assert len(places["gb001"]["chassis_serial"]) == 13 and places["gb001"]["chassis_serial"].isdigit()


@needs_blackwell
@pytest.mark.fast
def test_the_simulated_packages_config_holds_keys_of_nvidias_own() -> None:
    """What the simulated nvidia-imex package installs as config.cfg: keys NVIDIA's (the DRA driver's template)."""
    real = imex.parse_imex_config((BLACKWELL / "imex" / "k8sdra_imex_config_cfg_template.cfg").read_text())
    ours = imex.parse_imex_config(apt.imex_default_config())
    assert set(ours) <= set(real) and ours["IMEX_CMD_ENABLED"] == "1" and ours["SERVER_PORT"] == real["SERVER_PORT"]


@pytest.mark.fast
def test_every_tray_fault_is_refused_on_an_hgx_host(tmp_path: Path) -> None:
    from provision.spec.issues import SpecError
    from tests.simhelpers import write_spec

    for kind in TRAY_FAULTS:
        with pytest.raises(SpecError, match=f"{kind} happens on a nvl72 host"):
            load_spec(write_spec(tmp_path, [{"kind": kind, "node": "sim01"}]))


@needs_blackwell
def test_the_simulated_fabric_block_and_platform_info_read_as_the_real_trays(rack: dict) -> None:
    real = nvidia_smi.parse_query_report((BLACKWELL / "nvidia_smi_q" / "dagrayvid_gb200_tray_4gpu_595.91.07_full.txt")
                                         .read_text())
    simulated = nvidia_smi.parse_query_report(rack["hosts"]["gb001"].run("nvidia-smi", "-q").stdout)
    real_gpu, sim_gpu = next(iter(real.gpus.values())), next(iter(simulated.gpus.values()))
    for block in ("Fabric", "Platform Info"):
        assert real_gpu[block].keys() == sim_gpu[block].keys(), block
    assert real_gpu["Fabric"]["Health"].keys() == sim_gpu["Fabric"]["Health"].keys()
    real_fabric = nvidia_smi.parse_gpu_fabric((BLACKWELL / "nvidia_smi_q" /
                                               "dagrayvid_gb200_tray_4gpu_595.91.07_full.txt").read_text())
    sim_fabric = nvidia_smi.parse_gpu_fabric(rack["hosts"]["gb001"].run("nvidia-smi", "-q").stdout)
    assert [gpu.pci for gpu in sim_fabric] == [gpu.pci for gpu in real_fabric]
    assert [gpu.module_id for gpu in sim_fabric] == [gpu.module_id for gpu in real_fabric]
    assert [gpu.product for gpu in sim_fabric] == [gpu.product for gpu in real_fabric]
    assert {gpu.c2c_mode for gpu in sim_fabric} == {gpu.c2c_mode for gpu in real_fabric} == {"Enabled"}
    serials = [simulated.gpus[key]["Serial Number"] for key in simulated.gpus]
    assert serials[0] == serials[1] != serials[2] == serials[3]  # a superchip's two GPUs share one


@needs_blackwell
def test_the_simulated_imex_domain_reads_as_the_real_one(rack: dict) -> None:
    text = (BLACKWELL / "imex" / "aws_pcs_p6e_gb200_imex_ctl_N_18nodes_570.172_all_connected.txt").read_text()
    simulated = rack["hosts"]["gb001"].run("nvidia-imex-ctl", "-N").stdout
    real_lines, sim_lines = text.splitlines(), simulated.splitlines()
    assert sim_lines[:10] == real_lines[:10] and imex_tool.LEGEND.splitlines() == real_lines[:9]  # word for word
    assert [line.split(" - ")[0].split("#")[0] for line in sim_lines if line.startswith("Node #")] == ["Node "] * 3
    real, sim = imex.parse_imex_nodes(text), imex.parse_imex_nodes(simulated)
    assert (real.domain_state, sim.domain_state) == ("UP", "UP")
    assert {node.version for node in sim.nodes} == {"570.172"} == {node.version for node in real.nodes}
    header = next(line for line in sim_lines if "Nodes From" in line)
    assert header == next(line for line in real_lines if "Nodes From" in line)[:len(header)]


def test_the_domain_check_names_the_odd_tray_and_not_a_tray_with_a_gpu_left_out(rack: dict) -> None:
    """burn-in preflight's domain judgement over every tray read: gb005 is in another rack's partition; gb002,
    whose GPU 1 joined no partition, is judged on its other three (its gpu_fabric fails it, not a second domain)."""
    from provision.burnin.preflight import domain_results

    fabrics = {tray: nvidia_smi.parse_gpu_fabric(host.run("nvidia-smi", "-q").stdout)
               for tray, host in rack["hosts"].items()}
    judged = domain_results(rack["loaded"], fabrics)
    assert judged["gb005"].outcome is Outcome.FAILED and "another NVLink domain" in judged["gb005"].message
    assert judged["gb002"].outcome is Outcome.OK and judged["gb001"].outcome is Outcome.OK
    assert domain_results(rack["loaded"], {**fabrics, "gb001": None})["gb001"].outcome is Outcome.UNKNOWN


def test_an_xid_149_fails_its_tray_and_the_145s_it_caused_are_blamed_on_it(rack: dict) -> None:
    """The GB200 pair gpud quotes (NVIDIA/gpud #1174), as the simulated tray logs it: the 149 on gpu3, a 145 on
    each other GPU 113 us apart and naming no cause; preflight fails the tray on the 149's GPU alone."""
    ring = rack["hosts"]["gb004"].run("dmesg").stdout
    fatal = next(line for line in ring.splitlines() if "): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406" in line)
    root = fatal[fatal.index("(PCI:") + 5:fatal.index("):")]
    assert ring.count("): 145, RLW_RXPIPE Nonfatal XC0 i0 Link") == 3
    checks = _preflight(rack, "gb004")
    result = checks["nvlink5_xid"]
    assert result.outcome is Outcome.FAILED and result.message.startswith(f"GPU {root}: Xid 149"), result
    assert result.message.count("Xid 145 on GPU") == 3 and "its consequence, nothing of its own" in result.message
    healthy = _preflight(rack, "gb001")  # the rack's trays are not provisioned here (no peermem): only the difference
    assert {name for name, check in checks.items() if check.outcome is not healthy[name].outcome} == {"nvlink5_xid"}


def test_dcgms_pcie_test_holds_a_tray_gpu_to_its_skus_width_not_to_x16(rack: dict) -> None:
    """DCGM holds a GPU to its SKU's min_pci_width (the Pcie plugin's default, 1, where the SKU sets none): a healthy
    tray's Gen4 x1 over NVLink-C2C passes, where the simulator once held it to its x16 maximum and failed every tray."""
    from provision.checks.dcgm_diag import DiagExpectations, evaluate
    from provision.facts import dcgm

    host = rack["hosts"]["gb001"]
    host.run("apt-get", "install", "-y", "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12")
    host.run("systemctl", "start", "nvidia-dcgm")
    host.run("systemctl", "start", "nvidia-persistenced")
    ran = host.run(*dcgm.DIAG[2].argv, check=False)
    judged = {result.check: result for result in evaluate(dcgm.DIAG[2].parse(ran.stdout), DiagExpectations(2, 4),
                                                          exit_code=ran.returncode)}
    assert judged["dcgm_pcie"].outcome is Outcome.OK, judged["dcgm_pcie"]
    # the x1 is what the tray's GPUs read, not a link left unread
    assert "Width x1" in host.run("lspci", "-vvv", "-s", "0008:01:00.0").stdout
