"""The Ansible inventory, built from the spec as data.

Groups: one per node group (``group_<name>``) and per scalable unit (``su01``...). Host variables carry what the
roles need (GPU count, rail HCAs, pins, policy), and the connection. The simulated cluster differs only here:
its hosts get ``ansible_connection: local``, ``hw_root`` (the host's hardware root), their own ``python3`` for
the modules and ``provision_environment`` (its stand-ins first on PATH), unless the spec presents the simulated
hosts at the real paths (``simulation.presentation: namespace``), where they get nothing at all. Credentials never land
in the inventory.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from provision.hosts.connection import connection_model
from provision.sim import cluster as sim_cluster
from provision.spec import LoadedSpec
from provision.spec.keys import key_form
from provision.spec.semantics import ResolvedNode, tray_place


def driver_packages(loaded: LoadedSpec, nvswitch: bool) -> dict[str, str]:
    pins = loaded.spec.software
    branch = pins.gpu_driver.split(".")[0]
    packages = {f"nvidia-driver-{branch}": pins.gpu_driver, f"nvidia-utils-{branch}": pins.gpu_driver}
    if nvswitch:
        packages[f"nvidia-fabricmanager-{branch}"] = pins.fabric_manager or pins.gpu_driver
    packages.update(cuda_toolkit(pins.cuda))
    return packages


def cuda_toolkit(cuda: str) -> dict[str, str]:
    """The CUDA toolkit pin: NVIDIA's package name carries the major and minor release
    (``cuda-toolkit-12-2``), so ``12.2`` pins that package at whichever update the mirror has, and ``12.2.2``
    pins the update too; either way it is installed and held with the driver."""
    parts = cuda.split(".")
    return {f"cuda-toolkit-{parts[0]}-{parts[1] if len(parts) > 1 else 0}": cuda if len(parts) >= 3 else "*"}


def dcgm_packages(loaded: LoadedSpec) -> dict[str, str]:
    """``software.dcgm``'s packages as NVIDIA's repository names them, at the version with its epoch (``1:``):
    DCGM 4 splits the core from the diagnostic's plugins, built per CUDA major (``-4-cuda12``, the node's
    ``software.cuda``); DCGM 3 and before is one package."""
    pins = loaded.spec.software
    if pins.dcgm is None:
        return {}
    version = f"1:{pins.dcgm}"
    if int(pins.dcgm.split(".")[0]) >= 4:
        cuda_major = pins.cuda.split(".")[0]
        return {"datacenter-gpu-manager-4-core": version, f"datacenter-gpu-manager-4-cuda{cuda_major}": version}
    return {"datacenter-gpu-manager": version}


def imex_peers(loaded: LoadedSpec, node: ResolvedNode) -> list[str]:
    """The addresses of the trays of the node's NVLink domain, in the spec's order (IMEX's ``nodes_config.cfg``,
    the same on every tray); none for a node in no domain."""
    return list(tray_place(loaded.spec.nvlink_domains or [], loaded.nodes, node.name).peers)


def host_vars(loaded: LoadedSpec, node: ResolvedNode, state_dir: Path) -> dict[str, Any]:
    spec = loaded.spec
    profile = spec.hardware[node.hardware]
    rails = [hca for hca, _gpu in sorted(profile.rails.items(), key=lambda item: item[1])]
    variables: dict[str, Any] = {
        "preflight_gpu_count": profile.gpu.count,
        "preflight_rail_hcas": rails,
        "preflight_kernel": spec.software.kernel or "",
        "gpu_driver_version": spec.software.gpu_driver,
        "gpu_driver_packages": driver_packages(loaded, profile.nvlink.nvswitch),
        "gpu_driver_nvswitch": profile.nvlink.nvswitch,
        # NVLSM where the spec pins it (validation pins it exactly where the board needs it)
        "gpu_driver_nvlsm": spec.software.nvlsm if profile.nvlink.nvswitch and spec.software.nvlsm else "",
        "gpu_driver_reboot_timeout": spec.host.reboot_timeout_s,
        "provision_scalable_unit": node.scalable_unit,
    }
    peers = imex_peers(loaded, node)
    if peers:  # a compute tray: IMEX at the driver's version, its domain's trays as its peers
        branch = spec.software.gpu_driver.split(".")[0]
        variables.update(imex_packages={f"nvidia-imex-{branch}": spec.software.gpu_driver}, imex_peers=peers)
    if spec.connection.transport == "local":
        # the reboot module refuses a local connection (it would reboot the controller): reboot by command
        variables.update(ansible_connection="local", ansible_python_interpreter=sys.executable,
                         provision_reboot_via="command")
    else:
        variables.update(connection_model(loaded).ansible_vars(node.address))
    if spec.simulation is not None and spec.simulation.presentation == "prefix":
        paths = sim_cluster.node_paths(state_dir, node.name)
        variables.update(
            hw_root=str(paths.root),
            # the modules run on the host's python3, as on a real host (which keeps the bytecode they compile)
            ansible_python_interpreter=str(paths.bin / "python3"),
            provision_environment={"PATH": f"{paths.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"},
            # by absolute path: a simulated host's reboot must never reach this machine's own shutdown
            gpu_driver_reboot_command=f'{paths.bin}/shutdown -r now '
                                      '"provision: reboot into the installed driver and InfiniBand stack"',
        )
    return variables


#: Where the package_sources role puts the keys and the one list of the spec's sources (``provision`` in their
#: names, so what provision wrote is told apart from the site's own sources).
KEYRING_DIR = "/etc/apt/keyrings"
SOURCES_LIST = "/etc/apt/sources.list.d/provision.list"


def package_sources(loaded: LoadedSpec) -> list[dict[str, Any]]:
    """Each repository's key (written under the name its form needs: apt reads ``.asc`` as armored, ``.gpg`` as
    binary) and its one-line ``sources.list`` entry bound to that key alone (``signed-by``). The key travels as
    the ``host_files`` entry that writes it (a public key, read here, where the site checked it)."""
    sources = []
    for repository in loaded.spec.software.repositories:
        key = (loaded.path.resolve().parent / repository.key).expanduser()
        content = key.read_bytes()
        suffix = "asc" if key_form(content) == "armored" else "gpg"
        key_dest = f"{KEYRING_DIR}/provision-{repository.name}.{suffix}"
        key_file = {"path": key_dest, "mode": "0644", "content_base64": base64.b64encode(content).decode()}
        sources.append({"name": repository.name, "key_file": key_file,
                        "line": " ".join(["deb", f"[signed-by={key_dest}]", repository.url, repository.suite,
                                          *repository.components])})
    return sources


def runtime_vars(loaded: LoadedSpec) -> dict[str, str]:
    """The node_runtime role's inputs (the role runs only when the spec names a runtime); the wheel it installs
    is built per run and handed over as an extra variable."""
    runtime = loaded.spec.software.runtime
    if runtime is None:
        return {}
    wheelhouse = (loaded.path.resolve().parent / runtime.wheelhouse).expanduser() if runtime.wheelhouse else None
    return {"node_runtime_path": runtime.path, "node_runtime_torch": runtime.torch,
            "node_runtime_wheelhouse": str(wheelhouse or ""), "node_runtime_index_url": runtime.index_url or ""}


def build(loaded: LoadedSpec, state_dir: Path) -> dict[str, Any]:
    spec = loaded.spec
    ofed = "doca-ofed" if spec.software.ofed.flavor == "doca" else "mlnx-ofed-all"
    tuning = spec.host.tuning
    children: dict[str, Any] = {}
    for node in loaded.nodes:
        for group in (f"group_{node.group.replace('-', '_')}", f"su{node.scalable_unit:02d}"):
            children.setdefault(group, {"hosts": {}})["hosts"][node.name] = None
    return {
        "all": {
            "vars": {
                "provision_cluster": spec.cluster.name,
                "provision_max_fail_percentage": spec.admission.max_failure_percent.provision,
                "ib_stack_package": ofed,
                "ib_stack_version": spec.software.ofed.version,
                "gpudirect_mode": spec.host.gpudirect,
                "pcie_acs_disable": spec.host.pcie_acs.disable,
                "pcie_acs_scope": spec.host.pcie_acs.scope,
                "host_tuning_memlock_unlimited": tuning.memlock_unlimited,
                "host_tuning_numa_balancing": tuning.numa_balancing,
                "host_tuning_cpu_governor": tuning.cpu_governor,
                "host_tuning_swap": tuning.swap,
                "package_sources": package_sources(loaded),
                "package_sources_list": SOURCES_LIST,
                "dcgm_packages": dcgm_packages(loaded),
                "kernel_cmdline_parameters": ["iommu=pt"] if spec.host.iommu == "passthrough" else [],
                **runtime_vars(loaded),
            },
            "hosts": {node.name: host_vars(loaded, node, state_dir) for node in loaded.nodes},
            "children": children,
        }
    }


def write(loaded: LoadedSpec, state_dir: Path, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Generated by provision from " + str(loaded.path) + "; do not edit.\n"
                    + yaml.safe_dump(build(loaded, state_dir), sort_keys=False))
    return path
