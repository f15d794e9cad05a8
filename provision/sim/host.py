"""Materialising one simulated host on first touch.

``sim up`` only writes each host's recipe (its hardware description, faults and
package mirror); the hardware root is built the first time anything touches
the host: a tool stand-in, ``provision apply`` for the hosts it targets, or a
test. That keeps ``sim up`` of 512 hosts to seconds on filesystems where every
created inode costs a fraction of a millisecond. Building is locked per host,
so two tools touching a fresh host at once build it once.
"""

from __future__ import annotations

import fcntl
import json
import time
from pathlib import Path
from typing import Any

from provision.hostmodel.devices import Gpu, Hca, NodeHardware, PciDevice
from provision.hostmodel.pciconfig import LinkConfig
from provision.sim.files import clone_tree, replace_file
from provision.sim.inject import INJECTORS, NodeContext
from provision.sim.node import initial_state, materialize_host, save_state
from provision.sim.tools.apt import package_entry, write_status, write_stock_sources
from provision.sim.tools.common import READY
from provision.sim.tools.system import write_modules

RECIPE = "recipe.json"
#: How long unattended-upgrades holds dpkg's lock after a stock host first comes up (minutes on a real host; a
#: few seconds here, enough that an apt-get which does not wait for the lock fails as it would in the field).
FIRST_BOOT_UPGRADES_S = 4.0
#: How long apt-daily's refresh of the lists holds apt's lists lock at that boot (it runs before the upgrades).
FIRST_BOOT_LISTS_S = 3.0


def hardware_from_dict(data: dict[str, Any]) -> NodeHardware:
    return NodeHardware(
        host=data["host"],
        gpu_model=data["gpu_model"],
        gpus=[Gpu(**gpu) for gpu in data["gpus"]],
        hcas=[Hca(**hca) for hca in data["hcas"]],
        devices=[PciDevice(**{**device, "link": LinkConfig(**device["link"]),
                              "vpd": tuple(tuple(item) for item in device.get("vpd", ()))})
                 for device in data["devices"]],
        nvswitches=data["nvswitches"],
        machine=data.get("machine", "x86_64"),
        platform=data.get("platform", "hgx"),
        bridge_ports=[Hca(**hca) for hca in data.get("bridge_ports", [])],
    )


def read_recipe(host_dir: Path) -> dict[str, Any] | None:
    path = host_dir / RECIPE
    return json.loads(path.read_text()) if path.exists() else None


def write_recipe(host_dir: Path, recipe: dict[str, Any]) -> None:
    replace_file(host_dir / RECIPE, json.dumps(recipe))


def is_host_built(host_dir: Path) -> bool:
    return (host_dir / "root" / READY).exists()


def ensure_host(host_dir: Path) -> Path:
    """Build ``host_dir/root`` from its recipe unless it is already built; return the root."""
    root = host_dir / "root"
    if (root / READY).exists():
        return root
    if not (host_dir / RECIPE).exists():
        raise FileNotFoundError(f"{host_dir} is not a simulated host (no {RECIPE})")
    with (host_dir / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / READY).exists():
            _build(root, json.loads((host_dir / RECIPE).read_text()))
    return root


def _build(root: Path, recipe: dict[str, Any]) -> None:
    hardware = hardware_from_dict(recipe["hardware"])
    clone_tree(Path(recipe["template"]), root)
    materialize_host(root, hardware, lid_base=recipe["lid_base"], kernel=recipe["kernel"])
    kernel = recipe["kernel"]
    state = initial_state(hardware, kernel)
    state["pinned_driver"] = recipe["pinned_driver"]
    state["address"] = recipe["address"]
    state["packages_available"] = recipe["repository"]
    state["collective_semantics"] = recipe.get("collective_semantics", "gloo")
    state["time_scale"] = recipe.get("time_scale", 1.0)
    if "nvlink_domain" in recipe:
        state["nvlink_domain"] = recipe["nvlink_domain"]
    # a stock image's first boot: apt-daily refreshes the lists (apt's lists lock), then unattended-upgrades
    # installs the archive's updates and holds dpkg's lock
    state["dpkg_lock_until"] = time.time() + FIRST_BOOT_UPGRADES_S
    state["lists_lock_until"] = time.time() + FIRST_BOOT_LISTS_S
    write_status(root, {"linux-image-" + kernel: package_entry("linux-image-" + kernel,
                                                               kernel.rsplit("-", 1)[0] + ".122")})
    context = NodeContext(root, hardware, state, recipe["link_rate"])
    for fault in recipe["faults"]:
        INJECTORS[fault["kind"]](context, fault["params"], fault["target"])
    write_stock_sources(root, state["packages_available"])
    write_modules(root, state)
    save_state(root, state)
    replace_file(root / READY, "")


def inject_now(host_dir: Path, kind: str, target: str | None = None, params: dict[str, Any] | None = None) -> None:
    """A fault that strikes a running host (a GPU falling off the bus after provisioning), applied in place."""
    from provision.sim.node import load_state
    from provision.spec.faults import CATALOG, resolve_params

    root = ensure_host(host_dir)
    recipe = json.loads((host_dir / RECIPE).read_text())
    values, problems = resolve_params(CATALOG[kind], params or {})
    if problems:
        raise ValueError(f"{kind}: " + "; ".join(f"{name}: {message}" for name, message in problems))
    with (host_dir / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state(root)
        INJECTORS[kind](NodeContext(root, hardware_from_dict(recipe["hardware"]), state, recipe["link_rate"]),
                        values, target)
        save_state(root, state)


def replace_gpu(host_dir: Path, local_rank: int) -> int:
    """The repair a vendor's RMA does: the GPU at ``local_rank`` swapped for a good one, so the faults its processes
    showed (slow, hung, wrong results, a sagging clock) are gone; how many were. The host's recipe (the delivery as it
    arrived) is left as it was, as a repair leaves the delivery's paperwork."""
    from provision.sim.node import load_state

    root = ensure_host(host_dir)
    with (host_dir / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state(root)
        faults = state.get("rank_faults", [])
        kept = [fault for fault in faults if int(fault.get("local_rank", -1)) != local_rank]
        state["rank_faults"] = kept
        save_state(root, state)
    return len(faults) - len(kept)
