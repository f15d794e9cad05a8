"""A real Slurm cluster on loopback, started and stopped by a test: munged, one slurmctld, one slurmd per node name.

Every slurmd runs on this machine (``NodeHostname=localhost``, a port each, ``slurmd -N <name>``), as the tooling
notes describe; every path lives under a temporary directory; the daemons are stopped by their pid files. Every
wait is bounded.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from topology import hostlist

SLURMCTLD, SLURMD, MUNGED = shutil.which("slurmctld"), shutil.which("slurmd"), shutil.which("munged")
MISSING = "needs Debian's slurm-wlm and munge (`make test` installs them)"


def available() -> bool:
    return bool(SLURMCTLD and SLURMD and MUNGED and shutil.which("scontrol"))


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_range(count: int) -> int:
    """``count`` consecutive free loopback ports, the first of them. The search starts at a random place: from a
    fixed one, two xdist workers starting clusters at the same moment both found 21000 free and the second
    slurmctld died "Address already in use"."""
    bases = list(range(21000, 40000, 97))
    start = random.randrange(len(bases))
    for base in bases[start:] + bases[:start]:
        if all(_free(port) for port in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


class SlurmCluster:
    def __init__(self, directory: Path, nodes: list[str]) -> None:
        self.directory = directory
        self.nodes = nodes
        self.conf = directory / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True, timeout=30)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def sinfo_reasons(self) -> dict[str, str]:
        """``sinfo -R``: node -> reason, for every drained or down node."""
        done = subprocess.run(["sinfo", "-R", "-h", "-N", "-o", "%N|%E"], env=self.env, capture_output=True,
                              text=True, timeout=30, check=True)
        reasons = {}
        for line in done.stdout.splitlines():
            name, _, reason = line.partition("|")
            reasons[name.strip()] = reason.strip()
        return reasons

    def start_controller(self) -> None:
        subprocess.run([SLURMCTLD, "-f", str(self.conf), "-i"], env=self.env, check=True, timeout=30)
        self.wait(lambda: self.scontrol("ping", check=False).returncode == 0 and
                  "UP" in self.scontrol("ping", check=False).stdout, "slurmctld answers ping")

    def stop_controller(self) -> None:
        _stop(self.directory / "slurmctld.pid")
        self.wait(lambda: "DOWN" in self.scontrol("ping", check=False).stdout, "slurmctld is down")

    def wait(self, condition, what: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout_s:g} s waiting until {what}")


def _stop(*pid_files: Path) -> None:
    """SIGTERM every daemon at once, wait (bounded) for all of them, SIGKILL what is left."""
    pids = []
    for pid_file in pid_files:
        try:
            pids.append(int(pid_file.read_text().strip()))
        except (OSError, ValueError):
            continue
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, 15)
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _alive(pid)]
        time.sleep(0.05)
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, 9)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def running(directory: Path, nodes: list[str], *, topology: str | None = None, extra: str = "",
            partitions: list[str] | None = None) -> Iterator[SlurmCluster]:
    """``partitions``: the cluster's PartitionName lines (default: one ``batch`` partition over every node)."""
    assert available(), MISSING
    munge = Path(tempfile.mkdtemp(prefix="munge-", dir="/tmp"))  # a unix socket path must stay short
    key = munge / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    subprocess.run([MUNGED, "--force", f"--key-file={key}", f"--socket={munge / 'sock'}",
                    f"--pid-file={munge / 'pid'}", f"--log-file={munge / 'log'}", f"--seed-file={munge / 'seed'}"],
                   check=True, timeout=30)
    (directory / "state").mkdir(parents=True, exist_ok=True)
    # slurmstepd binds a unix socket per step under the spool directory (``<spool>/<node>_<job>.<step>``), and a
    # socket path is at most 108 bytes: under a long test's tmp_path a batch step failed "Unix socket name
    # exceeded maximum length" and its job was requeued for ever, so the spool lives under a short path
    spool = Path(tempfile.mkdtemp(prefix="slurmd-", dir="/tmp"))
    base = free_range(len(nodes) + 1)
    if topology is not None:
        (directory / "topology.conf").write_text(topology)
    (directory / "slurm.conf").write_text("\n".join([
        "ClusterName=provisiontest", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={base}",
        "AuthType=auth/munge", f"AuthInfo=socket={munge / 'sock'}", "CredType=cred/munge",
        "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={directory / 'state'}",
        f"SlurmdSpoolDir={spool}/%n", f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
        f"SlurmdPidFile={directory}/slurmd-%n.pid", f"SlurmctldLogFile={directory / 'slurmctld.log'}",
        f"SlurmdLogFile={directory}/slurmd-%n.log", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "ReturnToService=2", "MpiDefault=none", "SlurmdTimeout=30", "InactiveLimit=0",
        *(["TopologyPlugin=topology/tree"] if topology is not None else []),
        extra,
        f"NodeName={hostlist.compress(nodes)} NodeHostname=localhost NodeAddr=127.0.0.1 "
        f"Port=[{base + 1}-{base + len(nodes)}] CPUs=1 State=UNKNOWN",
        *(partitions or ["PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP"]), ""]))
    cluster = SlurmCluster(directory, nodes)
    try:
        cluster.start_controller()
        for node in nodes:
            subprocess.run([SLURMD, "-f", str(cluster.conf), "-N", node], env=cluster.env, check=True, timeout=30)
        cluster.wait(lambda: "idle" in subprocess.run(
            ["sinfo", "-h", "-o", "%T %D"], env=cluster.env, capture_output=True, text=True, timeout=30).stdout
            and all(line.startswith("idle") for line in subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=cluster.env, capture_output=True, text=True,
                timeout=30).stdout.split()), "every slurmd registered idle")
        yield cluster
    finally:
        _stop(*(directory / f"slurmd-{node}.pid" for node in nodes))
        _stop(directory / "slurmctld.pid")
        _stop(munge / "pid")
        shutil.rmtree(munge, ignore_errors=True)
        shutil.rmtree(spool, ignore_errors=True)
