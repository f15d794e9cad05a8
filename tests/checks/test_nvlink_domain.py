"""An NVLink domain judged on its real formats (issue 53): each GPU's Fabric block, the domain every tray names,
where a tray sits, IMEX, NVLSM on HGX B200 and the NVLink 5 Xids; our own cases in ``tests/facts`` (in the
formats of ``../shared/fixtures/blackwell``), the real files read right where they are present, and silence
never read as health for any of these facts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from provision.checks.domain_collectives import judge_domain_collectives
from provision.checks.nvlink_domain import (
    TrayPlace,
    judge_domain_membership,
    judge_gpu_fabric,
    judge_imex,
    judge_imex_channel,
    judge_imex_peers,
    judge_nvlink5_xids,
    judge_nvlsm,
    judge_platform,
)
from provision.checks.outcome import Outcome
from provision.facts import imex, kernel_log, nccl_tests, nvidia_smi, packages
from provision.facts.nccl_debug import NcclDomain, parse_nccl_domain
from provision.facts.registry import FACTS
from tests.conftest import SHARED_FIXTURES

pytestmark = pytest.mark.fast
CASES = Path(__file__).parents[1] / "facts"
DATA = Path(__file__).parents[1] / "data"
BLACKWELL = SHARED_FIXTURES / "blackwell"
needs_blackwell = pytest.mark.skipif(not BLACKWELL.is_dir(), reason="../shared/fixtures/blackwell absent in this clone")


def _output(reference: str) -> Any:
    return json.loads((CASES / f"{reference}.json").read_text())["output"]


def _parsed(reference: str) -> Any:
    fact = FACTS[reference.split("/")[0]]
    return fact.parse(_output(reference))


def test_a_healthy_tray_passes_and_its_pcie_and_shared_serials_are_no_fault() -> None:
    gpus = _parsed("gpu_fabric/gb200_tray_healthy")
    assert len({gpu.uuid for gpu in gpus}) == 2 and len({gpu.pci for gpu in gpus}) == 2  # one serial, two GPUs
    assert judge_gpu_fabric(gpus).outcome is Outcome.OK
    assert judge_platform(gpus, TrayPlace("1821524000117", 4, 5)).outcome is Outcome.OK


@pytest.mark.parametrize(("case", "said"), [
    ("gpu_fabric/insufficient_resources", "fabric status Insufficient Resources"),
    ("gpu_fabric/completed_but_unhealthy", "fabric health Unhealthy"),
    ("gpu_fabric/in_progress", "fabric state In Progress (the fabric manager or NVLSM has not finished)"),
])
def test_a_gpu_out_of_its_domain_fails(case: str, said: str) -> None:
    result = judge_gpu_fabric(_parsed(case))
    assert result.outcome is Outcome.FAILED and said in result.message, result


def test_the_unhealthy_gpu_names_each_health_key_that_says_so() -> None:
    result = judge_gpu_fabric(_parsed("gpu_fabric/completed_but_unhealthy"))
    assert result.evidence == [
        "GPU 00000008:01:00.0 (GPU-3e1f7a52-9c04-4b7e-a1d2-6f8b0c9e4d17): fabric health Unhealthy",
        "GPU 00000008:01:00.0 (GPU-3e1f7a52-9c04-4b7e-a1d2-6f8b0c9e4d17): fabric bandwidth Degraded",
        "GPU 00000008:01:00.0 (GPU-3e1f7a52-9c04-4b7e-a1d2-6f8b0c9e4d17): Route Unhealthy"]


def test_a_tray_in_another_racks_domain_is_named() -> None:
    tray = _parsed("gpu_fabric/gb200_tray_healthy")
    stranger = [dataclasses.replace(gpu, cluster_uuid="b81d4f02-6c3e-4a9d-9e57-13a0c2f8d6e4", clique_id="2")
                for gpu in tray]
    results = judge_domain_membership({"tray01": tray, "tray02": tray, "tray03": stranger})
    assert results["tray01"].outcome is results["tray02"].outcome is Outcome.OK
    assert results["tray03"].outcome is Outcome.FAILED
    assert "tray03 is in another NVLink domain (ClusterUUID b81d4f02" in results["tray03"].message
    assert "rest of its rack (5f0c2d71-93be-4a0e-8c6a-2b1e9d4f7a30, CliqueId 7)" in results["tray03"].message
    split = [tray[0], stranger[1]]
    assert judge_domain_membership({"tray01": tray, "tray04": split})["tray04"].outcome is Outcome.FAILED
    even = judge_domain_membership({"tray01": tray, "tray03": stranger})  # one against one: nobody to believe
    assert {result.outcome for result in even.values()} == {Outcome.UNKNOWN}


def test_a_tray_in_the_wrong_slot_is_named() -> None:
    result = judge_platform(_parsed("gpu_fabric/gb200_tray_healthy"), TrayPlace("1821524000117", 6, None))
    assert result.outcome is Outcome.FAILED and result.message == "GPU 00000008:01:00.0: tray index 4, the spec says 6"


ADDRESSES = ["10.40.0.11", "10.40.0.12", "10.40.0.13", "10.40.0.14"]


def test_imex_ready_with_every_tray_connected_passes() -> None:
    result = judge_imex("READY", _parsed("imex_nodes/four_trays_connected"), ADDRESSES, "580.159.04")
    assert result.outcome is Outcome.OK, result
    assert judge_imex_peers(_parsed("imex_peers/four_trays"), ADDRESSES).outcome is Outcome.OK
    assert judge_imex_channel(_parsed("imex_channels/channel0")).outcome is Outcome.OK
    assert _parsed("imex_config/as_installed")["IMEX_NODE_CONFIG_FILE"] == "/etc/nvidia-imex/nodes_config.cfg"


@pytest.mark.parametrize(("case", "said"), [
    ("imex_nodes/one_tray_disconnected", "IMEX 10.40.0.11 -> 10.40.0.14: disconnected"),
    ("imex_nodes/node_map_mismatch", "IMEX 10.40.0.11 -> 10.40.0.13: node map mismatch"),
])
def test_imex_with_a_tray_cut_off_fails(case: str, said: str) -> None:
    result = judge_imex("READY", _parsed(case), ADDRESSES, "580.159.04")
    assert result.outcome is Outcome.FAILED and said in result.evidence, result.evidence


def test_imex_against_the_spec_and_the_driver() -> None:
    domain = _parsed("imex_nodes/four_trays_connected")
    other = judge_imex("READY", domain, [*ADDRESSES[:3], "10.40.0.15"], "580.159.04")
    assert "IMEX does not list 10.40.0.15 (nodes_config.cfg differs from the spec?)" in other.evidence
    assert "IMEX lists 10.40.0.14, which the spec does not put in this domain" in other.evidence
    older = judge_imex("READY", domain, ADDRESSES, "580.126.09")
    assert older.outcome is Outcome.FAILED and "at 580.159.04, this tray's driver is 580.126.09" in older.message
    assert judge_imex("UNAVAILABLE", domain, ADDRESSES, "").message == "nvidia-imex-ctl -q: UNAVAILABLE"
    assert judge_imex_peers(ADDRESSES[::-1], ADDRESSES).message.endswith("in another order")
    assert judge_imex_channel({}).outcome is Outcome.FAILED


def test_nvlsm_started_through_its_bridge_ports_and_none_of_them_a_rail() -> None:
    start = _parsed("nvlsm_start/two_bridge_ports")
    assert judge_nvlsm(start, ["mlx5_0", "mlx5_1"]).outcome is Outcome.OK
    counted = judge_nvlsm(start, ["mlx5_0", "mlx5_4"])
    assert counted.outcome is Outcome.FAILED and "bridge port(s) mlx5_4 as rails" in counted.message


XID_149 = ("[ 9114.027712] NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 "
           "0x00000000 0x00000000 0x00000000 0x00000000)")
XID_145 = ("[ 9114.031488] NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 "
           "0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)")
XID_45 = ("[ 9114.040113] NVRM: Xid (PCI:0008:01:00): 45, pid=81244, name=python3, Ch 00000010, "
          "caused by previous Xid 149")


def _xids(*lines: str) -> list[kernel_log.Xid]:
    return kernel_log.find_xids(kernel_log.parse_kernel_log("\n".join(lines) + "\n"))


def test_nvlink5_xids_by_their_severity_and_their_root() -> None:
    """Lines in the gpud #1174 form (../shared/fixtures/blackwell/kernel_log), with a dmesg timestamp."""
    fatal = judge_nvlink5_xids(_xids(XID_149, XID_145, XID_45))
    assert fatal.outcome is Outcome.FAILED
    assert fatal.message.startswith("GPU 0019:01:00: Xid 149 NETIR Fatal XC0 i0 Link -1")
    assert "Xid 45 on GPU 0008:01:00 caused by Xid 149" in fatal.message  # blamed on the root, not on 0008
    assert not any(line.startswith("GPU 0008") for line in fatal.evidence)
    # the non-fatal 145 on 0018, logged right after 0019's fatal 149 and naming no cause: the 149's consequence
    assert "Xid 145 on GPU 0018:01:00: RLW_RXPIPE Nonfatal" in fatal.message
    assert "after GPU 0019:01:00's Xid 149: its consequence" in fatal.message
    assert not any(line.startswith("Xid 145") for line in fatal.evidence), "not a warning of its own"
    assert judge_nvlink5_xids(_xids(XID_145)).outcome is Outcome.WARNING
    orphan = judge_nvlink5_xids(_xids(XID_45))
    assert orphan.outcome is Outcome.FAILED and orphan.message.startswith("a GPU whose Xid is not in this log")
    assert judge_nvlink5_xids([]).outcome is Outcome.OK


BLACKWELL_FACTS = ("gpu_fabric", "imex_status", "imex_nodes", "imex_config", "imex_peers", "nvlsm_start")


@pytest.mark.parametrize("degraded", ["empty", "cut", "unknown prefix"])
@pytest.mark.parametrize("name", BLACKWELL_FACTS)
def test_silence_is_never_a_healthy_domain(name: str, degraded: str) -> None:
    """Each fact fed nothing, cut mid-line or behind an unknown prefix is refused, or its judgement does not pass."""
    from tests.facts.test_silence import DEGRADED

    healthy = {"gpu_fabric": "gpu_fabric/gb200_tray_healthy", "imex_status": "imex_status/ready",
               "imex_nodes": "imex_nodes/four_trays_connected", "imex_config": "imex_config/as_installed",
               "imex_peers": "imex_peers/four_trays", "nvlsm_start": "nvlsm_start/two_bridge_ports"}[name]
    text = DEGRADED[degraded](_output(healthy))
    if text == _output(healthy):
        pytest.skip(f"{degraded} leaves {healthy} whole")
    try:
        parsed = FACTS[name].parse(text)
    except ValueError:
        return
    if name == "nvlsm_start" and degraded == "unknown prefix":  # read through whatever prefix a log collector
        assert parsed == _parsed(healthy)  # puts before the lines (the real one has talosctl's host): the same
        return
    judged = {"gpu_fabric": lambda: judge_gpu_fabric(parsed),
              "imex_status": lambda: judge_imex(parsed, _parsed("imex_nodes/four_trays_connected"), ADDRESSES, ""),
              "imex_nodes": lambda: judge_imex("READY", parsed, ADDRESSES, ""),
              "imex_config": lambda: pytest.fail(f"imex_config read {degraded} as {parsed}")
              if parsed.get("IMEX_NODE_CONFIG_FILE") != "/etc/nvidia-imex/nodes_config.cfg" else None,
              "imex_peers": lambda: judge_imex_peers(parsed, ADDRESSES),
              "nvlsm_start": lambda: judge_nvlsm(parsed, [])}[name]()
    if judged is not None:
        assert judged.outcome is not Outcome.OK, (name, degraded, judged)


# --- the real files: each read right (../shared/fixtures/blackwell; values from the files themselves) ---


@needs_blackwell
def test_a_real_gb200_tray_is_a_healthy_tray_of_domain_3() -> None:
    gpus = nvidia_smi.parse_gpu_fabric((BLACKWELL / "nvidia_smi_q" / "dagrayvid_gb200_tray_4gpu_595.91.07_full.txt")
                                       .read_text())
    assert [gpu.pci for gpu in gpus] == ["00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0",
                                         "00000019:01:00.0"]
    assert [gpu.module_id for gpu in gpus] == ["2", "1", "4", "3"]  # not in PCI order
    assert {(gpu.clique_id, gpu.cluster_uuid) for gpu in gpus} == {("3", "923a9e90-8c8d-4f99-bfde-e643aabd4877")}
    assert {(gpu.chassis_serial, gpu.tray_index, gpu.slot) for gpu in gpus} == {("1820625880038", "2", "3")}
    assert judge_gpu_fabric(gpus).outcome is Outcome.OK
    assert judge_platform(gpus, TrayPlace("1820625880038", 2, 3)).outcome is Outcome.OK


@needs_blackwell
def test_a_real_18_tray_imex_domain_is_up() -> None:
    domain = imex.parse_imex_nodes((BLACKWELL / "imex" / "aws_pcs_p6e_gb200_imex_ctl_N_18nodes_570.172_all_connected"
                                    ".txt").read_text())
    assert len(domain.nodes) == 18 and domain.domain_state == "UP"
    assert domain.nodes[17].address == "172.31.56.47" and {node.version for node in domain.nodes} == {"570.172"}
    peers = [node.address for node in domain.nodes]
    assert judge_imex("READY", domain, peers, "570.172").outcome is Outcome.OK
    config = imex.parse_imex_config((BLACKWELL / "imex" / "k8sdra_imex_config_cfg_template.cfg").read_text())
    assert config["SERVER_PORT"] == "50000" and config["IMEX_CMD_PORT"] == "50005" and len(config) == 33


@needs_blackwell
def test_a_real_nvlink5_xid_pair_blames_the_fatal_gpu() -> None:
    lines = kernel_log.parse_kernel_log((BLACKWELL / "kernel_log" /
                                         "issue_gpud1174_gb200_xid149_xid145_nvlink5_kmsg_lines.log").read_text())
    result = judge_nvlink5_xids(kernel_log.find_xids(lines))
    assert result.outcome is Outcome.FAILED and result.message.startswith("GPU 0019:01:00: Xid 149 NETIR Fatal")
    assert result.evidence[1].startswith("Xid 145 on GPU 0018:01:00: RLW_RXPIPE Nonfatal")


@needs_blackwell
def test_a_real_b200_fabric_manager_start_names_its_bridge_ports() -> None:
    start = packages.parse_nvlsm_start((BLACKWELL / "fabric_manager" /
                                        "issue_siderolabs893_hgx_b200_fm_wrapper_nvlsm_start_partial.log").read_text())
    assert sorted(start.bridge_ports) == ["mlx5_10", "mlx5_11", "mlx5_8", "mlx5_9"]
    assert start.management_guid == "0xcc40f3030027f630" and start.opensm_version == "2025.06.5_eb3b4ba_df9bb3c_ae214d2"
    assert judge_nvlsm(start, ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5"]).outcome is Outcome.OK


@needs_blackwell
def test_real_b200_nvlink_and_topology() -> None:
    links = nvidia_smi.parse_nvlink_status((BLACKWELL / "nvidia_smi_nvlink" /
                                            "issue_nvbandwidth44_b200_nvlink_s_50GBps_partial.txt").read_text())
    assert links[0].name == "NVIDIA B200" and set(links[0].links.values()) == {50.0}  # R570 prints 50, not 53.125
    topo = nvidia_smi.parse_topo_matrix((BLACKWELL / "nvidia_smi_topo" / "dranet_gke_a4_b200_8gpu_8nic_topo_m.txt")
                                        .read_text())
    gpus = [device for device in topo.devices if device.startswith("GPU")]
    assert len(gpus) == 8 and len(topo.devices) == 16
    assert {topo.relation[a][b] for a in gpus for b in gpus if a != b} == {"NV18"}
    assert topo.relation["GPU0"]["NIC0"] == "PIX"


@needs_blackwell
@pytest.mark.parametrize("path", sorted((BLACKWELL / "nccl_tests").glob("*.txt")) if BLACKWELL.is_dir() else [],
                         ids=lambda path: path.stem)
def test_real_blackwell_nccl_tests_runs_are_read_or_refused(path: Path) -> None:
    text = path.read_text()
    if "no_rows" in path.name:
        with pytest.raises(ValueError, match="no nccl-tests result row"):
            nccl_tests.parse_nccl_tests(text)
        return
    rows = nccl_tests.parse_nccl_tests(text).rows
    assert rows and all(row.wrong == 0 for row in rows)
    if "1rack_72gpu" in path.name:  # CoreWeave's NVL72 figures (field guide 8.4): 839 out of place at 4 GB
        assert next(row for row in rows if row.size_bytes == 4 * 2**30).busbw_gbps == pytest.approx(839, abs=1)


@pytest.mark.parametrize("model", ["GB200-186GB", "GB300-288GB"])
def test_a_tray_gpu_is_refused_by_the_spec_with_its_place_and_reason(tmp_path: Path, model: str) -> None:
    """The catalogue knows the Grace-Blackwell trays; a spec that would provision them as HGX hosts (and quarantine
    healthy trays on PCIe Gen4 x1 and a fabric manager that must not run) is refused, located: a tray is
    ``platform: nvl72`` in an NVLink domain (tests/spec/test_nvlink_domains.py)."""
    import yaml

    from provision.spec import load_spec
    from provision.spec.issues import SpecError
    from tests.simhelpers import write_spec

    spec = write_spec(tmp_path, [])
    data = yaml.safe_load(spec.read_text())
    data["hardware"]["hgx-h100"]["gpu"] = {"model": model, "count": 4}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError) as refused:
        load_spec(spec)
    assert "hardware.hgx-h100.gpu.model" in str(refused.value)
    assert f"{model} is the GPU of a GB200/GB300 compute tray" in str(refused.value)
    assert "write platform: nvl72" in str(refused.value)
    data["hardware"]["hgx-h100"]["gpu"] = {"model": "B300-SXM-288GB", "count": 8}  # an HGX board: as B200 is
    data["software"]["dcgm"] = "4.4.1"  # the first DCGM whose diagnostic knows B300 (4.2.3 is refused for it)
    data["software"]["nvlsm"] = "2025.06.5"  # its fabric manager starts NVLSM (tests/spec/test_nvlsm.py)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    load_spec(spec)


def test_the_catalogue_carries_the_figures_the_nvidia_smi_of_each_tray_prints() -> None:
    """GB200's framebuffer as the real tray prints it (../shared/fixtures/blackwell/nvidia_smi_q: 189471 MiB)."""
    from provision.catalog import DOMAIN_ALLREDUCE_BUSBW, GPU_MODELS

    assert GPU_MODELS["GB200-186GB"].framebuffer_mib == 189471 and GPU_MODELS["GB200-186GB"].pci_device_id == "2941"
    assert DOMAIN_ALLREDUCE_BUSBW["GB200-186GB"][72] == 839.0


def test_a_peer_that_does_not_serve_is_its_own_finding_not_this_trays() -> None:
    """Tray #3's daemon is down: the others' -N lists it unreachable and the domain not UP. Each of the others is
    READY and passes, naming it; tray #3 itself fails (a tray fails only on its own measurements)."""
    domain = _parsed("imex_nodes/one_tray_not_serving")
    peer = judge_imex("READY", domain, ADDRESSES, "580.159.04", own=ADDRESSES[0])
    assert peer.outcome is Outcome.OK and "10.40.0.14" in peer.message, peer
    assert "IMEX domain state DEGRADED" in peer.evidence
    down = judge_imex("READY", domain, ADDRESSES, "580.159.04", own=ADDRESSES[3])
    assert down.outcome is Outcome.FAILED and "UNAVAILABLE" in down.message, down
    assert judge_imex("READY", domain, ADDRESSES, "580.159.04").outcome is Outcome.FAILED  # nobody's own: unknown who


def _said(log: str) -> NcclDomain:
    return parse_nccl_domain((DATA / log).read_text())


def test_a_healthy_domain_on_gpus_passes_against_its_published_figure() -> None:
    """72 GPUs at 839 GB/s (CoreWeave's NVL72 run, ../shared/fixtures/blackwell/nccl_tests): NVLS, MNNVL."""
    judged = judge_domain_collectives("rack1", {1 << 30: 681.17, 4 << 30: 839.16},
                                      {"gb001": _said("nccl_debug_mnnvl_nvls.log")}, model="GB200-186GB", gpus=72,
                                      on_gpu=True, fraction=0.75)
    assert not judged.slow and judged.algorithm == "MNNVL, NVLS", judged
    assert judged.trays["gb001"].outcome is Outcome.OK
    assert "at least 629.2 GB/s (0.75 x 839" in judged.reason


def test_nvls_off_is_slower_not_failed_and_said() -> None:
    judged = judge_domain_collectives("rack1", {4 << 30: 600.0}, {"gb001": _said("nccl_debug_mnnvl_nvls_off.log")},
                                      model="GB200-186GB", gpus=72, on_gpu=True, fraction=0.75)
    assert not judged.slow and "NVLS off (slower, not failed)" in judged.algorithm, judged
    assert "ring all_reduce without NVLS" in judged.reason


def test_a_slow_domain_is_the_domains_and_no_trays() -> None:
    judged = judge_domain_collectives("rack2", {4 << 30: 310.0}, {tray: _said("nccl_debug_mnnvl_nvls.log")
                                                                 for tray in ("gb019", "gb020")},
                                      model="GB200-186GB", gpus=72, on_gpu=True, fraction=0.75)
    assert judged.slow.startswith("rack2: all_reduce 310 GB/s") and "below 629.2" in judged.slow
    assert {check.outcome for check in judged.trays.values()} == {Outcome.OK}


@pytest.mark.parametrize("log,words", [
    ("nccl_debug_mnnvl_gpu_out_of_partition.log", "in no NVLink partition (fabric UUID 0.0, cliqueId 0x0"),
    ("nccl_debug_mnnvl_route_unhealthy.log", "route unhealthy"),
    ("", "printed no NCCL"),
])
def test_a_trays_own_gpus_are_its_own(log: str, words: str) -> None:
    said = {"gb001": _said("nccl_debug_mnnvl_nvls.log"), "gb002": _said(log) if log else None}
    judged = judge_domain_collectives("rack1", {4 << 30: 839.0}, said, model="GB200-186GB", gpus=8, on_gpu=True,
                                      fraction=0.75)
    assert judged.trays["gb001"].outcome is Outcome.OK
    assert judged.trays["gb002"].outcome in (Outcome.FAILED, Outcome.UNKNOWN) and words in judged.trays["gb002"].message


def test_mnnvl_off_on_every_tray_is_the_domains() -> None:
    said = {tray: _said("nccl_debug_mnnvl_off.log") for tray in ("gb001", "gb002")}
    judged = judge_domain_collectives("rack1", {4 << 30: 150.0}, said, model="GB200-186GB", gpus=8, on_gpu=True,
                                      fraction=0.75)
    assert "MNNVL 0 everywhere" in judged.slow
    assert {check.outcome for check in judged.trays.values()} == {Outcome.SILENCED}


def test_cpu_workers_are_judged_against_the_other_domains() -> None:
    said: dict[str, NcclDomain | None] = {"gb004": None, "gb005": None}
    slow = judge_domain_collectives("rack2", {1 << 20: 0.05}, said, model="GB200-186GB", gpus=8, on_gpu=False,
                                    fraction=0.75, peers_gbps=[0.3], peer_fraction=0.4)
    assert slow.slow and "the best other domain" in slow.slow
    alone = judge_domain_collectives("rack2", {1 << 20: 0.05}, said, model="GB200-186GB", gpus=8, on_gpu=False,
                                     fraction=0.75)
    assert not alone.slow and "recorded" in alone.reason
    assert {check.outcome for check in alone.trays.values()} == {Outcome.SILENCED}
