"""The BMC side of provisioning without a BMC (the emulator's tests are tests/hosts/test_bmc.py and test_recovery):
which failed task means a host hung in its reboot, where a node's Redfish service is, and a spec with no BMC."""

from __future__ import annotations

import pytest

from provision.hosts.bmc import BmcUnavailable, PowerResult, bmc_url, power_status
from provision.hosts.recovery import REBOOT_TASKS, Recovery, hung_in_reboot
from provision.spec import load_spec
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.fast


def test_only_the_reboot_tasks_mean_a_host_hung_in_its_reboot() -> None:
    assert all(hung_in_reboot(task) for task in REBOOT_TASKS)
    assert not hung_in_reboot("Install the pinned driver") and not hung_in_reboot(None)
    assert Recovery().back == [] and Recovery().still_down == {}


def test_a_spec_without_bmcs_is_refused_by_name_and_urls_are_redfish() -> None:
    with pytest.raises(BmcUnavailable, match="has no bmc: section"):
        power_status(load_spec(EXAMPLES / "sim-cluster.yaml"), ["sim01"])
    with_bmcs = load_spec(EXAMPLES / "h100-511.yaml")
    assert bmc_url(with_bmcs, "10.0.0.1").startswith("https://10.0.0.1:443/redfish/v1")
    assert bmc_url(with_bmcs, "fd00::1").startswith("https://[fd00::1]:443/"), "an IPv6 address in brackets"
    result = PowerResult("sim01", None, "unknown", False, "no address")
    assert result.as_dict() == {"node": "sim01", "bmc_address": None, "state": "unknown", "ok": False,
                                "detail": "no address", "steps": []}
