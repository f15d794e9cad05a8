"""A host that does not come back from its reboot: power-cycled through its BMC, and provisioned again.

Real hosts hang on the way back from a reboot often enough (a kernel panic on the new driver, a BMC-managed POST
that stalls, a PXE boot order gone wrong) that a day of provisioning must not end with them called dead. When the
play's reboot task times out, the host's BMC (the spec's ``bmc:`` section) forces it off and on; the host is back
when it answers with a boot id it did not have before the cycle (within ``host.reboot_timeout_s``), and then the
play runs again for it alone. A host whose BMC cannot cycle it, or that still does not come back, stays failed with
both facts: what the reboot did, and what the BMC said.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.hosts import bmc
from provision.hosts.remote import open_session
from provision.spec import LoadedSpec

#: The gpu_driver role's reboot tasks: over SSH (the reboot module) and over a local connection (boot id loop).
REBOOT_TASKS = frozenset({"Reboot into the pinned driver (over SSH)", "Wait for a new boot id"})
BOOT_ID = "/proc/sys/kernel/random/boot_id"
POLL_S = 1.0


def hung_in_reboot(failed_task: str | None) -> bool:
    return failed_task in REBOOT_TASKS


@dataclass
class Recovery:
    """What the power cycles did: hosts to run the play for again, and why the others stay failed."""

    back: list[str] = field(default_factory=list)
    still_down: dict[str, str] = field(default_factory=dict)  # host -> the BMC's side of the story
    cycles: dict[str, dict[str, Any]] = field(default_factory=dict)


def _boot_id(loaded: LoadedSpec, state_dir: Path, host: str) -> str | None:
    node = next(node for node in loaded.nodes if node.name == host)
    try:
        session = open_session(loaded, node, state_dir)
    except Exception:  # not answering yet: that is what is being waited for
        return None
    try:
        text = session.read_text(BOOT_ID)
    except Exception:
        return None
    finally:
        session.close()
    return text.strip() if text else None


def power_cycle_hung(loaded: LoadedSpec, state_dir: Path, hosts: list[str]) -> Recovery:
    recovery = Recovery()
    if loaded.spec.bmc is None:
        recovery.still_down = dict.fromkeys(hosts, "no bmc: section in the spec to power-cycle it with")
        return recovery
    before = {host: _boot_id(loaded, state_dir, host) for host in hosts}
    for result in bmc.power_cycle(loaded, hosts):
        recovery.cycles[result.node] = result.as_dict()
        if not result.ok:
            recovery.still_down[result.node] = f"BMC: {result.detail}"
    timeout_s = loaded.spec.host.reboot_timeout_s
    waiting = [host for host in hosts if host not in recovery.still_down]
    deadline = time.monotonic() + timeout_s
    while waiting:
        waiting = [host for host in waiting if _boot_id(loaded, state_dir, host) in (None, before[host])]
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    for host in hosts:
        if host in waiting:
            recovery.still_down[host] = (f"BMC: power-cycled ({'; '.join(recovery.cycles[host]['steps'])}), but it "
                                         f"did not answer with a new boot id within {timeout_s} s")
        elif host not in recovery.still_down:
            recovery.back.append(host)
    return recovery
