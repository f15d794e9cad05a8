"""IPoIB netdevs to HCAs from what the host says, never guessed from the number: ``ib3`` is not ``mlx5_3`` on a
host whose rails are mlx5_0 and mlx5_3..11, and ``ibp12s0`` carries no number at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from topology.carrier import parse_syslog
from topology.netdev import NetdevMapError, lookup, netdevs_from_sysfs, parse_netdev_map

pytestmark = pytest.mark.fast

NET = {"ibp12s0": "/sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0/net/ibp12s0",
       "ibp75s0": "/sys/devices/pci0000:40/0000:40:01.1/0000:4b:00.0/net/ibp75s0",
       "eno1": "/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.0/net/eno1",
       "lo": "/sys/devices/virtual/net/lo"}
IB = {"mlx5_3": "/sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0/infiniband/mlx5_3",
      "mlx5_9": "/sys/devices/pci0000:40/0000:40:01.1/0000:4b:00.0/infiniband/mlx5_9"}


def test_the_hosts_sysfs_pairs_netdevs_with_hcas() -> None:
    assert netdevs_from_sysfs(NET, IB) == {"ibp12s0": "mlx5_3", "ibp75s0": "mlx5_9"}


def test_map_file() -> None:
    mapping = parse_netdev_map("# host netdev hca\nsim03 ibp12s0 mlx5_3\n* ib0 mlx5_0   # every host\n")
    assert lookup(mapping, "sim03", "ibp12s0") == "mlx5_3" and lookup(mapping, "sim07", "ib0") == "mlx5_0"
    assert lookup(mapping, "sim07", "ibp12s0") is None
    with pytest.raises(NetdevMapError, match="line 1"):
        parse_netdev_map("sim03 ibp12s0\n")


def test_predictable_names_are_read_from_syslog() -> None:
    events = parse_syslog("Nov 23 10:00:01 sim03 systemd-networkd[812]: ibp12s0: Lost carrier\n"
                          "Nov 23 10:00:04 sim03 systemd-networkd[812]: ibp12s0: Gained carrier\n", year=2026)
    assert [(event.device, event.up) for event in events] == [("ibp12s0", False), ("ibp12s0", True)]


def _syslog(path: Path, device: str) -> Path:
    lines = []
    for minute in range(6):  # six flaps in an hour: over the default 5 per 24 h
        lines += [f"Nov 23 10:{minute * 7:02d}:01 sim03 systemd-networkd[812]: {device}: Lost carrier",
                  f"Nov 23 10:{minute * 7:02d}:05 sim03 systemd-networkd[812]: {device}: Gained carrier"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_flaps_name_the_cable_through_the_map_and_never_guess(sim_spec: Path, tmp_path: Path) -> None:
    syslog = _syslog(tmp_path / "syslog", "ib3")
    guessed = run_cli("topology", "flaps", str(sim_spec), "--syslog", str(syslog), "--year", "2026", "--json")
    payload = json.loads(guessed.stdout)  # no map, and the simulated host's sysfs has no IPoIB netdev: unmatched
    assert guessed.returncode == 0 and payload["suspects"] == [] and payload["unmatched_total"] == 12

    mapping = tmp_path / "netdevs"
    mapping.write_text("sim03 ib3 mlx5_9\n")  # ib3 is the HCA on rail 5 here, not mlx5_3
    named = run_cli("topology", "flaps", str(sim_spec), "--syslog", str(syslog), "--year", "2026", "--json",
                    "--netdev-map", str(mapping))
    suspects = json.loads(named.stdout)["suspects"]
    assert named.returncode == 1 and [row["class"] for row in suspects] == ["flapping"]
    assert "sim03/mlx5_9" in suspects[0]["cable"], suspects[0]["cable"]
