"""The fan-out behind one bastion, from 16 to 64 hosts: what the bastion sees, and whether any node is lost.

Each host is an OpenSSH sshd on loopback (a simulated host on a prefix), reached only through a bastion sshd at
its defaults (``MaxStartups 10:30:100``: beyond ten unauthenticated connections at once it drops new ones at
random). Two operations fan out over every host at once, as an apply of a delivery does:

- a play (``apply --phases provision``, forks = hosts), which the preflight role ends at each host's first task
  (the spec pins another kernel than the hosts run), so the figure is the connections' cost, not the roles';
- a burn-in campaign (the preflight stage, root through sudo): every probe of every host.

For each: wall seconds, logins at the bastion, the most TCP connections the bastion held at once (sampled every
20 ms), and the hosts lost on the way (unreachable, or a check unknown for a connection's reason). The hosts are
unprovisioned: converging them is measured by bench.burnin_wall; what this bench answers is whether the way to
them scales. Needs root, sshd and sudo (``make test`` installs them).

Run: python -m bench.fanout [--quick] [--hosts N ...] --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from bench.simulated import example
from provision.state.lifecycle import NodeState
from provision.state.store import StateStore
from tests.sshd import USER, LoopbackSshd, hand_to_login_user, login_user_sudo, start_all, stop

BASTION = "127.0.2.1"
SUDOERS = Path("/etc/sudoers.d/provision-bench")
PASSWORD = "bench-fanout-5e2a"
OTHER_KERNEL = "5.15.0-999-generic"
CONNECTION_WORDS = ("unreachable", "connection", "ssh", "timed out", "lost", "ours")


def _cli(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True,
                          timeout=timeout, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                                "PROVISION_BECOME_PASSWORD": PASSWORD})


class PeakConnections:
    """The most established TCP connections to the bastion's sshd at once, sampled while a command runs."""

    def __init__(self, port: int) -> None:
        self.port, self.peak, self._done = port, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            listed = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{self.port} )"],
                                    capture_output=True, text=True, timeout=10).stdout
            self.peak = max(self.peak, sum(1 for line in listed.splitlines() if f"{BASTION}:{self.port}" in line))
            self._done.wait(0.02)

    def __enter__(self) -> PeakConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)


def one_size(hosts: int) -> dict[str, Any]:
    addresses = {f"sim{index:03d}": f"127.0.3.{index}" for index in range(1, hosts + 1)}
    work = Path(tempfile.mkdtemp(prefix="bench-fanout-", dir="/tmp"))
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        servers = LoopbackSshd(work, {"bastion": BASTION, **addresses}, logged=("bastion",))
        with login_user_sudo(PASSWORD, SUDOERS):
            start_all(servers, {"bastion": BASTION, **addresses}, daemons)
            return {"hosts": hosts, **_measure(servers, addresses, work)}
    finally:
        stop(daemons)
        shutil.rmtree(work, ignore_errors=True)


def _measure(servers: LoopbackSshd, addresses: dict[str, str], work: Path) -> dict[str, Any]:
    """The play, then the campaign, over the hosts ``servers`` run behind the bastion."""
    hosts = len(addresses)
    data = example()
    data["nodes"]["groups"][0].update(hosts=f"sim[001-{hosts:03d}]", address_start=addresses["sim001"])
    data["fabric"].update(hosts_per_su=32, switch_radix=64)
    data["connection"] = {**servers.connection(forks=hosts, become_password_env="PROVISION_BECOME_PASSWORD"),
                          "jump_host": f"{USER}@{BASTION}:{servers.port}"}
    data["burnin"]["stages"] = ["preflight"]
    for key in ("dcgm", "soak"):  # each read by its stage alone
        data["burnin"].pop(key, None)
    data["simulation"] = {"seed": 5, "faults": []}
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = work / ".provision" / "sim16"
    prepared = _cli("apply", str(spec), "--phases", "simulate,register")
    if prepared.returncode != 0:
        raise RuntimeError(prepared.stdout + prepared.stderr)
    hand_to_login_user(state, list(addresses))
    data["software"]["kernel"] = OTHER_KERNEL
    refused = work / "spec-other-kernel.yaml"
    refused.write_text(yaml.safe_dump(data, sort_keys=False))

    before, started = servers.logins("bastion"), time.monotonic()
    with PeakConnections(servers.port) as peak:
        applied = _cli("apply", "--json", str(refused), "--state-dir", str(state), "--phases", "provision")
    rows = json.loads((Path(json.loads(applied.stdout)["run_dir"]) / "provision.json").read_text())
    play = {"wall_s": round(time.monotonic() - started, 1), "bastion_logins": servers.logins("bastion") - before,
            "bastion_peak_connections": peak.peak, "hosts": len(rows),
            "lost": sorted(row["host"] for row in rows if row.get("unreachable")
                           or OTHER_KERNEL not in json.dumps(row))}

    with StateStore(state) as store:  # the roles are not what this bench measures: the store says they ran
        for host in addresses:
            store.transition(host, NodeState.PROVISIONED, run_id=None, reason="bench: connections only")
    before, started = servers.logins("bastion"), time.monotonic()
    with PeakConnections(servers.port) as peak:
        burned = _cli("burnin", "--json", str(spec), "--state-dir", str(state))
    verdicts = json.loads((Path(json.loads(burned.stdout)["run_dir"]) / "burnin-preflight.json").read_text())
    lost = sorted(verdict["node"] for verdict in verdicts if any(
        row["outcome"] == "unknown" and any(word in row["message"].lower() for word in CONNECTION_WORDS)
        for row in verdict["results"]))
    campaign = {"wall_s": round(time.monotonic() - started, 1),
                "bastion_logins": servers.logins("bastion") - before, "bastion_peak_connections": peak.peak,
                "hosts": len(verdicts), "lost": lost + sorted(set(addresses) - {v["node"] for v in verdicts})}
    return {"play": play, "campaign": campaign}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 hosts only")
    parser.add_argument("--hosts", type=int, nargs="*", help="fleet sizes (default 16 32 64)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()
    sizes = args.hosts or ([16] if args.quick else [16, 32, 64])
    if max(sizes) > 250:
        parser.error("at most 250 hosts (one loopback /24)")
    rows = []
    for hosts in sizes:
        row = one_size(hosts)
        rows.append(row)
        print(f"{hosts:4d} hosts  play {row['play']['wall_s']:6.1f} s, {row['play']['bastion_logins']} login(s), "
              f"peak {row['play']['bastion_peak_connections']}, lost {len(row['play']['lost'])}   "
              f"campaign {row['campaign']['wall_s']:6.1f} s, {row['campaign']['bastion_logins']} login(s), "
              f"peak {row['campaign']['bastion_peak_connections']}, lost {len(row['campaign']['lost'])}",
              file=sys.stderr)
    lost = sum(len(row["play"]["lost"]) + len(row["campaign"]["lost"]) for row in rows)
    if args.json:
        print(json.dumps({"bench": "fanout", "rows": rows, "lost": lost}))
    sys.exit(1 if lost else 0)


if __name__ == "__main__":
    main()
