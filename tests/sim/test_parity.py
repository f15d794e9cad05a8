"""Parity: each parser reads the real tool output in ../shared/fixtures and the simulator's output alike.

If the simulator drifted from the real formats, a check tested only on the
simulator would pass here and fail on a real host; this is where that shows.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from provision.facts.infiniband import parse_infiniband_class, read_tree
from provision.facts.kernel_log import find_xids, parse_kernel_log
from provision.facts.lspci import parse_lspci_verbose
from provision.facts.nvidia_smi import parse_nvlink_status, parse_query_report
from tests.conftest import SHARED_FIXTURES
from tests.simhelpers import SimHost, bring_up

pytestmark = pytest.mark.skipif(not SHARED_FIXTURES.is_dir(),
                                reason="the real-output fixtures live in ../shared/fixtures, absent in this clone")

PINNED = "535.183.01"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> SimHost:
    directory = tmp_path_factory.mktemp("parity")
    state, _ = bring_up(directory, [{"kind": "acs_enabled", "node": "sim01"},
                                    {"kind": "pcie_downtrained", "node": "sim01", "target": "gpu3",
                                     "params": {"width": 8}},
                                    {"kind": "xid", "node": "sim01", "target": "gpu4", "params": {"code": 119}}])
    simulated = SimHost(state, "sim01").add_vendor_sources()
    simulated.run("apt-get", "install", "-y", f"nvidia-driver-535={PINNED}-1")
    simulated.run("modprobe", "nvidia")
    return simulated


def _fixture(relative: str) -> str:
    return (SHARED_FIXTURES / relative).read_text()


def _populated(record: object) -> set[str]:
    return {field.name for field in fields(record) if getattr(record, field.name) not in (None, [], {}, "")}


def test_lspci_structure_matches_the_real_h100_host(host: SimHost) -> None:
    real = parse_lspci_verbose(_fixture("gpud/pci/lspci-vvv"))
    simulated = parse_lspci_verbose(host.run("lspci", "-vvv").stdout)
    for kind in ("3D controller", "PCI bridge"):
        real_fields = set.intersection(*[_populated(d) for d in real if d.kind == kind and d.link_status])
        sim_fields = set.intersection(*[_populated(d) for d in simulated if d.kind == kind and d.link_status])
        assert real_fields - {"speed_downgraded", "width_downgraded"} <= sim_fields, kind
    real_acs = [d for d in real if d.acs_control is not None]
    sim_acs = [d for d in simulated if d.acs_control is not None]
    assert {tuple(d.acs_control) for d in real_acs} == {tuple(d.acs_control) for d in sim_acs}
    assert {tuple(d.acs_capability) for d in real_acs} == {tuple(d.acs_capability) for d in sim_acs}
    assert any(d.acs_redirects for d in real_acs) and any(d.acs_redirects for d in sim_acs)
    assert any(d.width_downgraded or d.speed_downgraded for d in real)
    assert any(d.width_downgraded for d in simulated)
    assert {d.express_type for d in real} >= {d.express_type for d in simulated}
    assert {d.driver for d in simulated} <= {d.driver for d in real} | {"nvidia-nvswitch"}


def test_nvidia_smi_query_report_matches(host: SimHost) -> None:
    real = parse_query_report(_fixture("azurehpc/data/orig_nvsmi8_output.txt"))
    simulated = parse_query_report(host.run("nvidia-smi", "-q", "-d", "PAGE_RETIREMENT").stdout)
    assert set(real.header) == set(simulated.header)
    assert len(real.gpus) == len(simulated.gpus) == 8
    real_tree, sim_tree = next(iter(real.gpus.values())), next(iter(simulated.gpus.values()))
    assert real_tree.keys() == sim_tree.keys() == {"Retired Pages"}
    assert real_tree["Retired Pages"].keys() == sim_tree["Retired Pages"].keys()


def test_nvlink_status_matches(host: SimHost) -> None:
    for relative in ("azurehpc/data/good_nvlink_status.txt", "gpud/fabric-manager/nvidia-smi.nvlink.status.a100"):
        real = parse_nvlink_status(_fixture(relative))
        assert real and all(gpu.links and not gpu.inactive_links for gpu in real)
    inactive = parse_nvlink_status(_fixture("azurehpc/data/bad_nvlink_status.txt"))
    assert inactive[0].all_inactive
    assert parse_nvlink_status(_fixture("gpud/fabric-manager/nvidia-smi.nvlink.status.a10")) == []
    simulated = parse_nvlink_status(host.run("nvidia-smi", "nvlink", "--status").stdout)
    assert len(simulated) == 8 and all(len(gpu.links) == 18 for gpu in simulated)
    assert {type(speed) for gpu in simulated for speed in gpu.links.values()} == {float}


def test_infiniband_sysfs_matches_the_real_h100_host(host: SimHost) -> None:
    real = parse_infiniband_class(read_tree(SHARED_FIXTURES / "gpud/infiniband-class/sys-class-infiniband-h100.0"))
    simulated = parse_infiniband_class(read_tree(host.root / "sys/class/infiniband"))
    real_ib = {name: device for name, device in real.items() if device.ports[1].link_layer == "InfiniBand"}
    assert len(real_ib) == 8 and len(simulated) == 8
    real_port, sim_port = next(iter(real_ib.values())).ports[1], next(iter(simulated.values())).ports[1]
    assert (real_port.state, real_port.physical_state, real_port.rate_gbps) == \
        (sim_port.state, sim_port.physical_state, sim_port.rate_gbps) == ("ACTIVE", "LinkUp", 400.0)
    assert set(real_port.counters) == set(sim_port.counters)
    assert {d.hca_type for d in real_ib.values()} == {d.hca_type for d in simulated.values()} == {"MT4129"}
    assert real["mlx5_1"].ports[1].counters["link_downed"] == 255  # the saturated 8-bit counter


def test_xid_lines_match(host: SimHost) -> None:
    real = find_xids(parse_kernel_log(_fixture("gpud/xid/dmesg-with-xid-119.log")))
    simulated = find_xids(parse_kernel_log(host.run("dmesg", "-T").stdout))
    assert real and simulated
    assert {x.code for x in real} == {x.code for x in simulated} == {119}
    for xid in (real[0], simulated[0]):
        assert len(xid.pci.split(":")) == 3 and xid.pid and xid.process and xid.detail


def test_the_iso_kernel_log_gives_each_line_the_time_it_was_logged(host: SimHost) -> None:
    """``dmesg --time-format=iso`` (util-linux: a comma before the microseconds, the zone's offset), what triage
    matches a job's window against: a line logged now reads now, the boot's lines an hour before the build."""
    import time
    from datetime import datetime

    from provision.facts.kernel_log import KERNEL_LOG_ISO
    from provision.sim.host import inject_now

    inject_now(host.paths.root.parent, "xid", "gpu2", {"code": 79})
    lines = KERNEL_LOG_ISO.parse(host.run(*KERNEL_LOG_ISO.argv).stdout)
    assert all(line.stamp and line.seconds is None for line in lines)
    stamps = [datetime.fromisoformat(line.stamp.replace(",", ".")).timestamp() for line in lines if line.stamp]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time()) < 60, (lines[-1], time.time())
    assert "79," in lines[-1].message or "79," in lines[-2].message


def test_kernel_log_sources_all_parse(host: SimHost) -> None:
    kmsg = parse_kernel_log(_fixture("gpud/kmsg/kmsg.2.peermem.log"))
    assert kmsg[0].message.startswith("nvidia-peermem nv_get_p2p_free_callback")
    assert kmsg[-1].message == "test"
    syslog = parse_kernel_log(_fixture("azurehpc/data/1dev_6flap_syslog"))
    assert sum("lost carrier" in line.message for line in syslog) == 6
    monotonic = parse_kernel_log(host.run("dmesg").stdout)
    assert monotonic[0].seconds is not None and monotonic[0].message.startswith("Linux version")


@pytest.mark.parametrize("path", sorted(p.relative_to(SHARED_FIXTURES) for p in SHARED_FIXTURES.glob(
    "azurehpc/data/*nvsmi8*")) if SHARED_FIXTURES.is_dir() else [])
def test_page_retirement_good_and_bad(path: Path) -> None:
    report = parse_query_report((SHARED_FIXTURES / path).read_text())
    counts = [int(tree["Retired Pages"]["Double Bit ECC"]) for tree in report.gpus.values()]
    assert (max(counts) > 0) == path.name.startswith("bad")


def test_perftest_bandwidth_matches() -> None:
    from provision.facts.perftest import largest_message_average_gbps, parse_bandwidth

    single = parse_bandwidth(_fixture("superbench/ib_loopback_8M_size.log"))
    assert len(single) == 1 and single[0].size == 8388608 and single[0].iterations == 20000  # server+client, once
    assert largest_message_average_gbps(single) == pytest.approx(192.45, abs=0.01)  # HDR: 24,056.72 MB/s
    sweep = parse_bandwidth(_fixture("superbench/ib_loopback_all_sizes.log"))
    assert [row.size for row in sweep] == [2**power for power in range(1, len(sweep) + 1)]
    assert sweep[-1].size == 8388608 and 180 < sweep[-1].average_gbps < 200
