"""The simulated cluster under a state directory: ``provision sim up | down | faults``.

``sim up`` records one host per node under ``<state-dir>/sim/nodes/<host>/``
(a recipe and a stand-in ``bin/``; the hardware root is built on first touch)
and injects the spec's faults. It is idempotent, and a changed spec is
reconciled host by host rather than rebuilt, because simulated hardware, like
real hardware, keeps what was done to it. Faults of layers not built yet are
reported as not injected, never pretended.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provision.errors import Refusal
from provision.hostmodel.devices import describe
from provision.sim import kernel_log, mirror, nvl72
from provision.sim.fabric import CABLE_FAULTS, write_dump, write_link_quality
from provision.sim.files import clone_tree
from provision.sim.host import ensure_host, is_host_built, read_recipe, write_recipe
from provision.sim.linkquality import FORMAT as LINK_QUALITY_FORMAT
from provision.sim.node import materialize_shared
from provision.sim.tools.__main__ import GUARDED, TOOLS
from provision.sim.ufm import HISTORY_FAULTS, write_history
from provision.spec import LoadedSpec
from provision.spec.faults import CATALOG, DOMAIN_FAULTS, resolve_params
from provision.state.layout import sim_dir as sim_dir

MANIFEST = "cluster.json"
DEFAULT_KERNEL = "5.15.0-112-generic"


class SimError(Refusal, RuntimeError):
    """The simulated cluster cannot be brought up as asked."""


@dataclass(frozen=True)
class NodePaths:
    host: str
    root: Path
    bin: Path


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
    """Bring the simulated hosts in line with the spec, the way hardware outlives a spec edit.

    Hosts whose recipe (profile, seed, faults) is unchanged keep everything done to them; new hosts are
    added, hosts gone from the spec removed, hosts whose recipe changed rebuilt fresh. ``rebuild`` starts
    every host fresh.
    """
    if loaded.spec.simulation is None:
        raise SimError("the spec has no simulation: section")
    existing = read_manifest(state_dir)
    stand_ins = _stand_ins_digest()
    if existing is not None and existing["spec_sha256"] == loaded.sha256 and not rebuild \
            and existing.get("stand_ins") == stand_ins:
        return {**existing, "changed": False}
    if rebuild:
        down(state_dir)
    base = sim_dir(state_dir)
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    seed = loaded.spec.simulation.seed
    faults = describe_faults(loaded)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for fault in faults:
        fault["injected"] = fault["layer"] in ("node", "rank") or fault["kind"] in (*CABLE_FAULTS, *HISTORY_FAULTS)
        if not fault["injected"]:
            fault["note"] = f"the {fault['layer']} layer of the simulator is not built yet: not injected"
        by_node.setdefault(fault["node"] or "", []).append(fault)
    kernel = loaded.spec.software.kernel or DEFAULT_KERNEL
    repository = _repository(loaded, faults)
    templates: dict[str, Path] = {}
    bin_template = _write_bin_template(base / "templates" / "bin")
    hosts: dict[str, list[str]] = {"added": [], "rebuilt": [], "kept": [], "removed": []}
    lid = 0x10
    places = nvl72.tray_places(loaded, seed)
    for fault in faults:  # a rack's shared hardware (a switch tray) acts on every tray of the domain
        if fault["kind"] in DOMAIN_FAULTS and fault["node"] in places:
            domain = places[fault["node"]]["domain"]
            for tray, place in places.items():
                if place["domain"] == domain and tray != fault["node"]:
                    by_node.setdefault(tray, []).append(fault)
    for node in loaded.nodes:
        hardware = describe(node.name, loaded.spec.hardware[node.hardware], seed)
        link_rate = loaded.spec.fabric.link_rate
        # a card's VPD names its serial number: written per host (materialize_host), left out of what is shared,
        # or no two hosts would share a template (each a tree of ~750 files to write, clone and remove)
        shared: dict[str, Any] = {"profile": node.hardware, "kernel": kernel, "link_rate": link_rate,
                                  "devices": [{**asdict(device), "vpd": bool(device.vpd)}
                                              for device in hardware.devices]}
        key = f"{node.hardware}-{hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:10]}"
        if key not in templates:  # hosts of one profile share all but their identity files
            templates[key] = base / "templates" / key
            if not templates[key].exists():
                materialize_shared(templates[key], hardware, kernel=kernel, link_rate=link_rate,
                                   boot_lines=kernel_log.boot_lines(hardware, kernel))
        recipe: dict[str, Any] = {
            "hardware": asdict(hardware), "template": str(templates[key]), "kernel": kernel, "link_rate": link_rate,
            "lid_base": lid, "pinned_driver": loaded.spec.software.gpu_driver, "repository": repository,
            "address": node.address, "collective_semantics": loaded.spec.simulation.collective_semantics
            if loaded.spec.simulation else "gloo",
            "time_scale": loaded.spec.simulation.time_scale if loaded.spec.simulation else 1.0,
            "faults": [fault for fault in by_node.get(node.name, [])
                       if fault["injected"] and fault["layer"] in ("node", "rank")],
        }
        if node.name in places:  # a compute tray: its place in the rack, as the rack would tell it
            recipe["nvlink_domain"] = places[node.name]
        lid += len(hardware.hcas) + len(hardware.bridge_ports)
        host_dir = node_paths(state_dir, node.name).root.parent
        previous = read_recipe(host_dir)
        if previous is not None and _same_host(previous, recipe):
            hosts["kept"].append(node.name)
            # the stand-ins are this release's code, not host state: a kept host gets the current ones
            shutil.rmtree(host_dir / "bin", ignore_errors=True)
            clone_tree(bin_template, host_dir / "bin")
            continue
        hosts["added" if previous is None else "rebuilt"].append(node.name)
        if host_dir.exists():
            shutil.rmtree(host_dir)
        clone_tree(bin_template, host_dir / "bin")
        write_recipe(host_dir, recipe)
    wanted = set(loaded.node_names)
    for host_dir in sorted((base / "nodes").iterdir()):
        if host_dir.name not in wanted:
            shutil.rmtree(host_dir)
            hosts["removed"].append(host_dir.name)
    in_use = {stored["template"] for host_dir in (base / "nodes").iterdir()
              if (stored := read_recipe(host_dir)) is not None}
    for template in (base / "templates").iterdir():
        if template.name != "bin" and str(template) not in in_use:
            shutil.rmtree(template)  # materialised hosts hold hard links, not references
    if loaded.fabric is not None:
        write_dump(loaded, [fault for fault in faults if fault["injected"]], base / "fabric")
        write_history(loaded, [fault for fault in faults if fault["kind"] in HISTORY_FAULTS], base / "fabric")
        write_link_quality(loaded, [fault for fault in faults if fault["injected"]], base / "fabric")
    manifest = {"cluster": loaded.spec.cluster.name, "spec_path": str(loaded.path.resolve()),
                "spec_sha256": loaded.sha256, "seed": seed, "nodes": loaded.node_names, "faults": faults,
                "hosts": hosts, "stand_ins": stand_ins}
    (base / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return {**manifest, "changed": True}


def _same_host(previous: dict[str, Any], recipe: dict[str, Any]) -> bool:
    """Same hardware, faults and mirror: the existing host stands (its LID may have moved, as SMs do)."""
    def essentials(host: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in host.items() if key not in ("lid_base", "template")}

    return essentials(previous) == essentials(json.loads(json.dumps(recipe)))  # as written: tuples read as lists


def summary(manifest: dict[str, Any]) -> str:
    injected = [fault for fault in manifest["faults"] if fault["injected"]]
    pending = [fault for fault in manifest["faults"] if not fault["injected"]]
    verb = "brought up" if manifest["changed"] else "already up:"
    text = f"{verb} {len(manifest['nodes'])} simulated nodes, {len(injected)} fault(s) injected"
    changes = ", ".join(f"{len(names)} {what}" for what, names in manifest.get("hosts", {}).items()
                        if names and what != "kept" and manifest["changed"])
    if changes and manifest["hosts"]["kept"]:
        text += f" (hosts {changes}; {len(manifest['hosts']['kept'])} kept as they were)"
    if pending:
        kinds = ", ".join(sorted({fault["kind"] for fault in pending}))
        text += f"; not injected yet ({kinds}): their simulator layer is not built"
    return text


def down(state_dir: Path) -> bool:
    base = sim_dir(state_dir)
    if not base.exists():
        return False
    shutil.rmtree(base)
    return True


def _repository(loaded: LoadedSpec, faults: list[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """What each simulated repository publishes (:mod:`provision.sim.mirror`): Ubuntu's archive (the kernel's
    headers and image, python3-venv) and NVIDIA's CUDA repository (each driver branch the spec or a fault names,
    the fabric manager, the toolkit, DCGM 4, NVLSM where pinned, IMEX where the spec has compute trays). The
    InfiniBand stack's repositories serve the release their URL names."""
    pins = loaded.spec.software
    drivers = {pins.gpu_driver}
    drivers |= {fault["params"]["version"] for fault in faults if fault["kind"] == "wrong_driver"}
    cuda: dict[str, list[str]] = {}
    for version in sorted(drivers):
        branch = version.split(".")[0]
        for name in (f"nvidia-driver-{branch}", f"nvidia-utils-{branch}", f"nvidia-fabricmanager-{branch}"):
            cuda.setdefault(name, []).append(f"{version}-1")
    # DCGM 4 for CUDA 12, as NVIDIA's repository publishes it for Ubuntu 22.04 (the core and the diag's plugins)
    for name in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"):
        cuda[name] = ["1:4.2.3-1"]
    major, _, minor = pins.cuda.partition(".")
    cuda[f"cuda-toolkit-{major}-{minor.split('.')[0] or '0'}"] = [f"{pins.cuda}.0-1"]
    if pins.nvlsm:  # the NVLink subnet manager HGX B200/B300 fabric managers start
        cuda["nvlsm"] = [f"{pins.nvlsm}-1"]
    if any(profile.platform == "nvl72" for profile in loaded.spec.hardware.values()):
        for version in sorted(drivers):  # IMEX, which joins a domain's trays, ships with each driver branch
            cuda.setdefault(f"nvidia-imex-{version.split('.')[0]}", []).append(f"{version}-1")
    kernel = pins.kernel or DEFAULT_KERNEL
    ubuntu = {f"linux-headers-{kernel}": [kernel.rsplit("-", 1)[0] + ".122"],
              f"linux-image-{kernel}": [kernel.rsplit("-", 1)[0] + ".122"],
              "python3-venv": ["3.10.6-1~22.04.1"], "python3.10-venv": ["3.10.12-1~22.04.7"]}
    return {mirror.UBUNTU: ubuntu, "cuda": {name: sorted(set(versions)) for name, versions in cuda.items()}}


def _stand_ins_digest() -> str:
    """Changes when the stand-ins would: another interpreter, source tree or release, or the format of the files
    they read beside the hosts."""
    from provision import __version__

    source = Path(__file__).resolve().parent.parent.parent
    text = json.dumps([sys.executable, str(source), __version__, sorted((*TOOLS, *GUARDED)), LINK_QUALITY_FORMAT])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _write_bin_template(directory: Path) -> Path:
    """One script per tool, shared by every host through hard links: each finds its host's root
    next to its own ``bin/`` (``${0%/*}/../root``), so no script needs to name its host."""
    return write_stand_ins(directory, '"${0%/*}/../root"')


def write_stand_ins(directory: Path, root: str, *, node_python: bool = True) -> Path:
    """The stand-in scripts, each running ``python -m provision.sim.tools --root ROOT TOOL``.

    ``root`` is a shell word naming the host's hardware root. The stand-ins need only the standard library,
    so when the controller's interpreter is not executable by the user running the tool (a test user logged
    in over SSH), the system ``python3`` runs them. ``node_python`` adds the node's ``python3`` (what runs
    burn-in workers): the controller's interpreter, which has torch, with the rank-layer fault shim on its
    path; the shim reads this host's faults from its hardware root.
    """
    directory.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).resolve().parent.parent.parent
    for tool in (*TOOLS, *GUARDED):
        script = directory / tool
        script.write_text(
            "#!/bin/sh\n"
            f'PYTHONPATH="{source}${{PYTHONPATH:+:$PYTHONPATH}}"; export PYTHONPATH\n'
            f'python="{sys.executable}"\n'
            '[ -x "$python" ] || python=/usr/bin/python3  # not PATH: python3 there may be the node stand-in\n'
            # -S: the standard library is all a stand-in needs, and site's start-up is a third of its cost
            f'exec "$python" -S -m provision.sim.tools --root {root} {tool} "$@"\n'
        )
        script.chmod(0o755)
    if node_python:
        shim = Path(__file__).resolve().parent / "nodepython"
        python = directory / "python3"
        python.write_text(
            "#!/bin/sh\n"
            f'PYTHONPATH="{shim}:{source}${{PYTHONPATH:+:$PYTHONPATH}}"; export PYTHONPATH\n'
            f"PROVISION_SIM_ROOT={root}; export PROVISION_SIM_ROOT\n"
            + NO_ENSUREPIP.format(status=f"{root}/var/lib/dpkg/status") +
            f'exec "{sys.executable}" "$@"\n'
        )
        python.chmod(0o755)
    return directory


#: Ubuntu's python3 without the python3-venv package: ``python3 -m venv`` stops at ensurepip, with its words
#: (the node_runtime role installs python3-venv first). ``{status}`` is the host's dpkg status file.
NO_ENSUREPIP = (
    'if [ "$1" = -m ] && [ "$2" = venv ] && ! grep -Eq "^Package: python3(\\.10)?-venv$" {status} 2>/dev/null; then\n'
    "  cat <<'EOF'\n"
    "The virtual environment was not created successfully because ensurepip is not\n"
    "available.  On Debian/Ubuntu systems, you need to install the python3-venv\n"
    "package using the following command.\n\n"
    "    apt install python3.10-venv\n\n"
    "You may need to use sudo with that command.  After installing the python3-venv\n"
    "package, recreate your virtual environment.\n"
    "EOF\n"
    "  exit 1\n"
    "fi\n"
)


def is_built(state_dir: Path, host: str) -> bool:
    """Whether the host's hardware root exists already (read-only commands must not build it)."""
    return is_host_built(node_paths(state_dir, host).root.parent)


def materialize(state_dir: Path, hosts: list[str]) -> None:
    """Build the hardware roots of ``hosts`` now, rather than on their first touch."""
    for host in hosts:
        ensure_host(node_paths(state_dir, host).root.parent)


def environment(paths: NodePaths) -> dict[str, str]:
    """What a process on this simulated node sees: its stand-ins first on PATH."""
    return {**os.environ, "PATH": f"{paths.bin}{os.pathsep}{os.environ.get('PATH', '')}"}
