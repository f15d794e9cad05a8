"""Small simulated clusters for tests: a spec with chosen faults, brought up, and its hosts' tools."""

from __future__ import annotations

import atexit
import contextlib
import copy
import fcntl
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import yaml

from provision.sim import cluster
from provision.sim.host import inject_now, read_recipe, write_recipe
from provision.sim.node import load_state, save_state
from provision.spec import load_spec
from provision.spec.faults import CATALOG
from tests.conftest import example_text
from topology import hostlist


def write_spec(directory: Path, faults: list[dict], *, hosts: str = "sim[01-02]", seed: int = 3,
               stages: list[str] | None = None, admission: dict | None = None,
               collective_semantics: str = "gloo") -> Path:
    data = yaml.safe_load(example_text())
    data["nodes"]["groups"][0]["hosts"] = hosts
    if stages is not None:
        data["burnin"]["stages"] = stages
        for stage in ("dcgm", "soak"):  # each read by its stage only: refused without it
            if stage not in stages:
                data["burnin"].pop(stage, None)
    if admission is not None:
        data["admission"] = admission
    data["simulation"] = {"seed": seed, "faults": faults, "collective_semantics": collective_semantics,
                          "time_scale": data["simulation"]["time_scale"]}  # the example's soak runs in seconds
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class SimHost:
    """Run a simulated host's tools the way a playbook or check would: by name, through PATH."""

    def __init__(self, state_dir: Path, host: str) -> None:
        self.paths = cluster.node_paths(state_dir, host)
        cluster.materialize(state_dir, [host])
        self.root = self.paths.root

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(command), env=cluster.environment(self.paths), capture_output=True, text=True,
                                timeout=60, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{command} exited {result.returncode}: {result.stderr}")
        return result

    def first_boot_done(self) -> SimHost:
        """The stock image's first-boot refresh and unattended-upgrades have finished: apt's and dpkg's locks are
        free (a test that runs apt-get by hand need not wait for them, as pinned_packages does)."""
        state = load_state(self.root)
        state["dpkg_lock_until"] = state["lists_lock_until"] = 0.0
        save_state(self.root, state)
        return self

    def add_vendor_sources(self) -> SimHost:
        """What the package_sources role leaves on a stock image (the example's repositories, each with its key),
        and apt's lists fetched: the vendors' packages become installable by hand."""
        self.first_boot_done()
        for repository in yaml.safe_load(example_text())["software"]["repositories"]:
            keyring = f"etc/apt/keyrings/provision-{repository['name']}.asc"
            (self.root / keyring).write_bytes(Path(repository["key"]).read_bytes())
            (self.root / f"etc/apt/sources.list.d/provision-{repository['name']}.list").write_text(
                f"deb [signed-by=/{keyring}] {repository['url']} {repository.get('suite', '/')}\n")
        self.run("apt-get", "update")
        return self


def processes_of(directory: Path, *, running: str = "") -> list[str]:
    """Live processes whose environment names ``directory`` (every simulated node's PATH is under it) and whose
    command line holds ``running``: this test's cluster's, never those of a test beside it on the other worker."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if str(directory).encode() in (proc / "environ").read_bytes():
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if running in command:
                    found.append(command)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def free_loopback_port() -> int:
    """A port nobody listens on at 127.0.0.1 now (the kernel's pick), for a rendezvous a test starts itself."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bring_up(directory: Path, faults: list[dict], **kwargs) -> tuple[Path, dict]:
    spec = write_spec(directory, faults, **kwargs)
    state_dir = directory / "state"
    manifest = cluster.up(load_spec(spec), state_dir)
    return state_dir, manifest


def shrink_to_four_gpus(spec: Path, **workload: int | str) -> Path:
    """Four GPUs and four rails a host (keeps multi-node tests quick on two cores), plus workload overrides."""
    data = yaml.safe_load(spec.read_text())
    data["hardware"]["hgx-h100"]["gpu"]["count"] = 4
    data["hardware"]["hgx-h100"]["rails"] = {"mlx5_0": 0, "mlx5_3": 1, "mlx5_4": 2, "mlx5_5": 3}
    data["fabric"]["rails"] = 4
    data["burnin"]["workload"].update(workload)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def provision_then_burn_in(spec: Path) -> dict:
    """``apply`` up to provisioning, then ``burnin --json``: its exit code, payload, run directory and nodes.

    Provisioning is the playbooks' test (test_provision*, test_sim_namespace and the end-to-end runs), not the
    burn-in's: a spec whose faults all strike after provisioning (rank faults, a perftest without CUDA, the
    fabric's cables) starts from a copy of a fault-free cluster provisioned once per session, its faults then
    injected into the running hosts as hardware fails in service (:func:`provision.sim.host.inject_now`)."""
    from tests.conftest import run_cli

    provision(spec)
    result = run_cli("burnin", str(spec), "--json", timeout=600)
    assert result.stdout, result.stderr
    payload = json.loads(result.stdout)
    return {"spec": spec, "rc": result.returncode, "payload": payload, "run_dir": Path(payload["run_dir"]),
            "nodes": {row["node"]: row for row in payload["nodes"]}}


def provision(spec: Path) -> None:
    """The spec's cluster provisioned, from a copy of one provisioned this session where the spec allows."""
    from tests.conftest import run_cli

    if not _from_provisioned(spec):
        applied = run_cli("apply", str(spec), "--phases", "simulate,register,provision", timeout=600)
        assert applied.returncode == 0, applied.stderr


PROVISIONED_HOSTS = "sim[01-08]"


def strikes_in_service(kind: str) -> bool:
    """Whether a fault is the same struck before provisioning or after: every node fault but those a playbook acts
    on (their stage is provision: ACS left on, peermem, a driver or pin, a reboot, a GPU the play counts). The
    others are the hardware's or the running system's own: a GPU's ECC, MIG or clocks, a link's width or rate, a
    cable on the wrong port, a line the kernel logs, a disk that fills, a daemon that dies, a perftest as the site
    built it, what only DCGM's load or a long soak finds. Struck after provisioning they are also what a real host
    shows: the provisioning reboot clears a kernel ring and volatile counters."""
    fault = CATALOG[kind]
    return fault.layer != "node" or fault.stage != "provision"


def _shape(data: dict) -> str:
    """What provisioning depends on: the spec less its hosts (a subset of one provisioned cluster will do), its
    faults and collective semantics (set per host below), its burn-in, its admission, its Slurm (which only
    the burn-in's launcher and the run's sinks talk to), its watch and its BMCs (which no play reads: they are
    reached when a host hangs or the watch's ladder power-cycles one)."""
    shape = copy.deepcopy(data)
    shape["nodes"]["groups"][0]["hosts"] = None
    shape["nodes"]["groups"][0].pop("bmc_address_start", None)
    shape["simulation"] = {"seed": data["simulation"]["seed"]}
    for key in ("burnin", "admission", "slurm", "watch", "bmc"):
        shape.pop(key, None)
    return yaml.safe_dump(shape, sort_keys=True)


def _from_provisioned(spec: Path) -> bool:
    data = yaml.safe_load(spec.read_text())
    groups = data["nodes"]["groups"]
    faults = data.get("simulation", {}).get("faults", [])
    if len(groups) != 1 or not set(hostlist.expand(groups[0]["hosts"])) <= set(hostlist.expand(PROVISIONED_HOSTS)) \
            or not all(strikes_in_service(fault["kind"]) for fault in faults) or (spec.parent / ".provision").exists():
        return False
    source = _provisioned_once(data)
    shutil.copytree(source / ".provision", spec.parent / ".provision", symlinks=True)
    _relocate(spec.parent / ".provision", str(source), str(spec.parent))
    loaded = load_spec(spec)
    state_dir = spec.parent / ".provision" / loaded.spec.cluster.name
    rows = cluster.describe_faults(loaded)
    semantics = loaded.spec.simulation.collective_semantics if loaded.spec.simulation else "gloo"
    scale = loaded.spec.simulation.time_scale if loaded.spec.simulation else 1.0
    for host in loaded.node_names:
        root = cluster.node_paths(state_dir, host).root
        recipe = read_recipe(root.parent)
        assert recipe is not None, host
        struck = [{**row, "injected": True} for row in rows if row["node"] == host and row["layer"] in ("node", "rank")]
        write_recipe(root.parent, {**recipe, "faults": struck, "collective_semantics": semantics, "time_scale": scale})
        save_state(root, {**load_state(root), "collective_semantics": semantics, "time_scale": scale})
        for row in struck:
            inject_now(root.parent, row["kind"], row["target"], row["params"])
    return True


def _provisioned_once(data: dict) -> Path:
    """The folder of a fault-free cluster of the spec's shape, provisioned once a run: by whichever worker asks
    first, under a lock the other waits on, in the folder the run shares (tests/conftest.py)."""
    from tests.conftest import run_cli

    if not os.environ.get("PROVISION_TEST_SHARED"):  # outside pytest (tests/record_launches.py): this process's
        os.environ["PROVISION_TEST_SHARED"] = tempfile.mkdtemp(prefix="provision-tests-")
        atexit.register(shutil.rmtree, os.environ["PROVISION_TEST_SHARED"], True)
    shared = Path(os.environ["PROVISION_TEST_SHARED"])
    directory = shared / f"provisioned-{hashlib.sha256(_shape(data).encode()).hexdigest()[:12]}"
    with open(shared / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / ".provisioned").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            whole = copy.deepcopy(data)
            whole["nodes"]["groups"][0]["hosts"] = PROVISIONED_HOSTS
            whole["simulation"] = {"seed": data["simulation"]["seed"], "faults": []}
            (directory / "spec.yaml").write_text(yaml.safe_dump(whole, sort_keys=False))
            applied = run_cli("apply", str(directory / "spec.yaml"), "--phases", "simulate,register,provision",
                              timeout=600)
            assert applied.returncode == 0, applied.stderr
            (directory / ".provisioned").write_text("")
    return directory


def _relocate(tree: Path, old: str, new: str) -> None:
    """A copied state folder names its own paths: the state store's rows and the hosts' files (a unit file's
    ExecStart, a recipe) say where the cluster lives."""
    for path in tree.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.suffix != ".db":
            content = path.read_bytes()
            if old.encode() in content:
                path.write_bytes(content.replace(old.encode(), new.encode()))
    for database in tree.rglob("*.db"):
        with contextlib.closing(sqlite3.connect(database)) as connection, connection:
            for (table,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                for column in connection.execute(f"PRAGMA table_info({table})").fetchall():
                    if column[2].upper() == "TEXT":
                        connection.execute(f"UPDATE {table} SET {column[1]} = replace({column[1]}, ?, ?)", (old, new))
