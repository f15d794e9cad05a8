"""The simulated cluster under a state directory: ``provision sim up | down | faults``.

``sim up`` materialises one hardware root and one stand-in ``bin/`` per node
under ``<state-dir>/sim/nodes/<host>/`` and injects the spec's faults. It is
idempotent: the same spec again is a no-op; a changed spec is refused until
``sim down`` (or ``--rebuild``), because silently rebuilding would erase what a
rehearsal had already done to the hosts. Faults of layers not built yet are
reported as not injected, never pretended.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.sim import kernel_log
from provision.sim.faults import CATALOG, resolve_params
from provision.sim.hardware import describe
from provision.sim.inject import INJECTORS, NodeContext
from provision.sim.node import materialize, save_state
from provision.sim.tools.__main__ import GUARDED, TOOLS
from provision.sim.tools.apt import package_entry, write_status
from provision.sim.tools.system import write_modules
from provision.spec import LoadedSpec

MANIFEST = "cluster.json"
DEFAULT_KERNEL = "5.15.0-112-generic"


class SimError(RuntimeError):
    """The simulated cluster cannot be brought up as asked."""


@dataclass(frozen=True)
class NodePaths:
    host: str
    root: Path
    bin: Path


def sim_dir(state_dir: Path) -> Path:
    return state_dir / "sim"


def node_paths(state_dir: Path, host: str) -> NodePaths:
    base = sim_dir(state_dir) / "nodes" / host
    return NodePaths(host, base / "root", base / "bin")


def read_manifest(state_dir: Path) -> dict[str, Any] | None:
    path = sim_dir(state_dir) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def describe_faults(loaded: LoadedSpec) -> list[dict[str, Any]]:
    """Each injected fault with the stage and check expected to catch it (``provision sim faults``)."""
    faults = loaded.spec.simulation.faults if loaded.spec.simulation else []
    rows = []
    for index, fault in enumerate(faults):
        kind = CATALOG[fault.kind]
        params, _problems = resolve_params(kind, fault.params)
        rows.append({"index": index, "kind": kind.name, "layer": kind.layer, "node": fault.node,
                     "target": fault.target, "params": params, "stage": kind.stage, "check": kind.check,
                     "expected": kind.statement})
    return rows


def up(loaded: LoadedSpec, state_dir: Path, *, rebuild: bool = False) -> dict[str, Any]:
    if loaded.spec.simulation is None:
        raise SimError("the spec has no simulation: section")
    existing = read_manifest(state_dir)
    if existing is not None:
        if existing["spec_sha256"] == loaded.sha256 and not rebuild:
            return {**existing, "changed": False}
        if not rebuild:
            raise SimError(f"the simulated cluster in {sim_dir(state_dir)} was built from a different spec "
                           f"(sha256 {existing['spec_sha256'][:12]}); run `provision sim down` or pass --rebuild")
        down(state_dir)
    base = sim_dir(state_dir)
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    seed = loaded.spec.simulation.seed
    faults = describe_faults(loaded)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for fault in faults:
        by_node.setdefault(fault["node"] or "", []).append(fault)
    for fault in faults:
        fault["injected"] = fault["layer"] == "node"
        if not fault["injected"]:
            fault["note"] = f"the {fault['layer']} layer of the simulator is not built yet: not injected"
    lid = 0x10
    for node in loaded.nodes:
        profile = loaded.spec.hardware[node.hardware]
        hardware = describe(node.name, profile, seed)
        paths = node_paths(state_dir, node.name)
        state = materialize(paths.root, hardware, kernel=loaded.spec.software.kernel or DEFAULT_KERNEL,
                            link_rate=loaded.spec.fabric.link_rate, lid_base=lid,
                            boot_lines=kernel_log.boot_lines(hardware, loaded.spec.software.kernel or DEFAULT_KERNEL))
        lid += len(hardware.hcas)
        state["pinned_driver"] = loaded.spec.software.gpu_driver
        state["packages_available"] = _repository(loaded, faults)
        write_status(paths.root, {"linux-image-" + state["kernel"]: package_entry(
            "linux-image-" + state["kernel"], state["kernel"].rsplit("-", 1)[0] + ".122")})
        context = NodeContext(paths.root, hardware, state, loaded.spec.fabric.link_rate)
        for fault in by_node.get(node.name, []):
            if fault["injected"]:
                INJECTORS[fault["kind"]](context, fault["params"], fault["target"])
        write_modules(paths.root, state["modules"])
        save_state(paths.root, state)
        _write_bin(paths)
    manifest = {"cluster": loaded.spec.cluster.name, "spec_path": str(loaded.path.resolve()),
                "spec_sha256": loaded.sha256, "seed": seed, "nodes": [node.name for node in loaded.nodes],
                "faults": faults}
    (base / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return {**manifest, "changed": True}


def down(state_dir: Path) -> bool:
    base = sim_dir(state_dir)
    if not base.exists():
        return False
    shutil.rmtree(base)
    return True


def _repository(loaded: LoadedSpec, faults: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Versions the simulated package mirror offers: the pins, a neighbour of each, and faulty versions."""
    pins = loaded.spec.software
    drivers = {pins.gpu_driver}
    drivers |= {fault["params"]["version"] for fault in faults if fault["kind"] == "wrong_driver"}
    repository: dict[str, list[str]] = {}
    for version in sorted(drivers):
        branch = version.split(".")[0]
        for name in (f"nvidia-driver-{branch}", f"nvidia-utils-{branch}", f"nvidia-fabricmanager-{branch}"):
            repository.setdefault(name, []).append(f"{version}-1")
    ofed = "doca-ofed" if pins.ofed.flavor == "doca" else "mlnx-ofed-all"
    repository[ofed] = [f"{pins.ofed.version}-1"]
    major, _, minor = pins.cuda.partition(".")
    repository[f"cuda-toolkit-{major}-{minor.split('.')[0] or '0'}"] = [f"{pins.cuda}.0-1"]
    kernel = pins.kernel or DEFAULT_KERNEL
    repository[f"linux-headers-{kernel}"] = [kernel.rsplit("-", 1)[0] + ".122"]
    return {name: sorted(set(versions)) for name, versions in repository.items()}


def _write_bin(paths: NodePaths) -> None:
    """One shell script per tool: the node's root is baked in, so a tool never guesses its node."""
    paths.bin.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    for tool in (*TOOLS, *GUARDED):
        script = paths.bin / tool
        script.write_text(f'#!/bin/sh\nexec "{python}" -m provision.sim.tools --root "{paths.root}" {tool} "$@"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def environment(paths: NodePaths) -> dict[str, str]:
    """What a process on this simulated node sees: its stand-ins first on PATH."""
    return {**os.environ, "PATH": f"{paths.bin}{os.pathsep}{os.environ.get('PATH', '')}"}
