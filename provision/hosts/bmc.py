"""Power state and power cycles through the nodes' BMCs, over Redfish.

The client is ``sushy``, the Redfish library OpenStack Ironic maintains (the field's standard client for the
system we integrate with). Each node's BMC is reached at ``<scheme>://<bmc_address>:<port>/redfish/v1`` with the
spec's credentials, resolved from their references at the moment of use and never written anywhere. A BMC
normally serves one system; where one serves several (a chassis manager, an emulator), the node's system is the
one whose name is the node's.

Power changes are not immediate on real BMCs (the Redfish emulator applies them 1-11 s later, on purpose), so a
cycle is ``ForceOff``, then the state read back until it is ``Off``, then ``On`` and read back until ``On``, each
wait bounded by ``bmc.timeout_s``. A BMC that cannot be reached, refuses the credentials or never reaches the
state is a per-node result with what it said, never a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import sushy
from sushy import exceptions as sushy_errors

from provision.errors import Refusal
from provision.spec import LoadedSpec
from provision.spec.secrets import resolve
from provision.spec.semantics import ResolvedNode

POLL_S = 0.5
RETRIES, CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 2, 10, 30
PARALLEL = 32  # BMCs asked at once


class BmcUnavailable(Refusal):
    """The spec has no ``bmc`` section, or names no BMC address for a node asked about."""


@dataclass
class PowerResult:
    node: str
    address: str | None
    state: str  # on | off | powering on | powering off | unknown
    ok: bool
    detail: str = ""
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "bmc_address": self.address, "state": self.state, "ok": self.ok,
                "detail": self.detail, "steps": self.steps}


def bmc_url(loaded: LoadedSpec, address: str) -> str:
    assert loaded.spec.bmc is not None
    bmc = loaded.spec.bmc
    host = f"[{address}]" if ":" in address else address
    return f"{bmc.scheme}://{host}:{bmc.port}/redfish/v1"


def _connect(loaded: LoadedSpec, address: str) -> sushy.Sushy:
    bmc = loaded.spec.bmc
    assert bmc is not None
    spec_dir = loaded.path.parent
    username = resolve(bmc.credentials.username, what="bmc.credentials.username", spec_dir=spec_dir)
    password = resolve(bmc.credentials.password, what="bmc.credentials.password", spec_dir=spec_dir)
    # sushy's defaults retry a failed request 10 times 3 s apart (27 s per unreachable BMC); two retries a second
    # apart still ride out a busy BMC's 5xx, and an address with nothing behind it is reported in about 2 s
    return sushy.Sushy(bmc_url(loaded, address), username=username, password=password, verify=bmc.verify_tls,
                       server_side_retries=RETRIES, server_side_retries_delay=1, connect_timeout=CONNECT_TIMEOUT_S,
                       read_timeout=READ_TIMEOUT_S)


def _system(root: sushy.Sushy, node: str) -> Any:
    members = root.get_system_collection().get_members()
    if len(members) == 1:
        return members[0]
    named = [member for member in members if node in (member.name, member.identity)]
    if len(named) != 1:
        raise BmcUnavailable(f"the BMC serves {len(members)} systems and {len(named)} of them are named {node!r}")
    return named[0]


def _state(system: Any) -> str:
    value = system.power_state
    return str(getattr(value, "value", value) or "unknown").lower()


def _targets(loaded: LoadedSpec, names: list[str]) -> list[ResolvedNode]:
    if loaded.spec.bmc is None:
        raise BmcUnavailable(f"{loaded.path} has no bmc: section (credentials, and bmc_address_start or "
                             "bmc_address per node)")
    by_name = {node.name: node for node in loaded.nodes}
    return [by_name[name] for name in names]


def _each(loaded: LoadedSpec, names: list[str],
          action: Callable[[sushy.Sushy, Any, PowerResult], None]) -> list[PowerResult]:
    """``action`` on every node's system, up to PARALLEL BMCs at once; results in the order asked."""
    nodes = _targets(loaded, names)
    with ThreadPoolExecutor(max_workers=min(PARALLEL, max(1, len(nodes)))) as pool:
        return list(pool.map(lambda node: _one(loaded, node, action), nodes))


def _one(loaded: LoadedSpec, node: ResolvedNode,
         action: Callable[[sushy.Sushy, Any, PowerResult], None]) -> PowerResult:
    result = PowerResult(node.name, node.bmc_address, "unknown", False)
    if node.bmc_address is None:
        result.detail = "no BMC address in the spec (nodes: bmc_address_start, or overrides: bmc_address)"
        return result
    try:
        root = _connect(loaded, node.bmc_address)
        system = _system(root, node.name)
        result.state = _state(system)
        action(root, system, result)
    except sushy_errors.AccessError as error:
        result.detail = f"the BMC refused the credentials: HTTP {error.status_code}"
    except sushy_errors.ConnectionError as error:
        result.detail = f"BMC unreachable at {bmc_url(loaded, node.bmc_address)}: {_first_line(error)}"
    except (sushy_errors.SushyError, BmcUnavailable) as error:
        result.detail = f"the BMC answered but: {_first_line(error)}"
    return result


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__


def power_status(loaded: LoadedSpec, names: list[str]) -> list[PowerResult]:
    def read(_root: sushy.Sushy, _system: Any, result: PowerResult) -> None:
        result.ok = True

    return _each(loaded, names, read)


def power_cycle(loaded: LoadedSpec, names: list[str]) -> list[PowerResult]:
    """ForceOff, wait for Off, On, wait for On: the cycle that brings back a host hung in or after a reboot."""
    assert loaded.spec.bmc is not None
    timeout_s = loaded.spec.bmc.timeout_s

    def cycle(root: sushy.Sushy, system: Any, result: PowerResult) -> None:
        for reset, wanted in ((sushy.RESET_FORCE_OFF, "off"), (sushy.RESET_ON, "on")):
            system.reset_system(reset)
            started = time.monotonic()
            while True:
                result.state = _state(root.get_system(system.path))
                if result.state == wanted:
                    result.steps.append(f"{reset.value}: {wanted} after {time.monotonic() - started:.1f} s")
                    break
                if time.monotonic() - started > timeout_s:
                    result.detail = f"{reset.value} sent, still {result.state} after {timeout_s:g} s"
                    return
                time.sleep(POLL_S)
        result.ok = True

    return _each(loaded, names, cycle)
