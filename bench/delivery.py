"""A fresh delivery behind one bastion, from the stock image to admitted: 64 hosts by default.

Every host is an OpenSSH sshd on loopback in front of a simulated HGX host on a prefix, built as a stock Ubuntu
22.04 server install (no vendor repositories, no ``python3-venv``, no NVIDIA packages, the inbox ``ib_core``
until a reboot after OFED, unattended-upgrades on), reached only through one bastion sshd **at its defaults**
(``MaxStartups 10:30:100``), root through sudo with a password. Then, as a delivery's team would run it:

1. ``provision apply`` — every role, the reboot after OFED, then the burn-in stages the spec selects;
2. ``provision apply`` again — its roles must change nothing on any host;
3. ``provision plan`` — it must show nothing to do.

Figures: wall seconds of each (and of each phase and stage, from the run's event log), logins at the bastion,
the most TCP connections the bastion held at once (sampled every 20 ms), the hosts admitted, and every healthy
host not admitted (no fault is injected, so every host should be). The burn-in selects preflight, node, dcgm and
collectives at one rank a node. Left out, because on this 2-core VM their cost is the nodes' own work, which real
nodes do on their own CPUs and GPUs, not the fan-out this bench measures: training and the soak (the workers'
arithmetic), and the pairs stage (each sweep round runs every rail of every host at once: at 64 hosts, 512
simulated ``ib_write_bw`` processes moving real bytes, which time out here; the stage then calls the fleet
unmeasured and quarantines nobody, as it should). Needs root, sshd and sudo (``make test`` installs them).

Run: python -m bench.delivery [--quick] [--hosts N] --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.fanout import BASTION, PASSWORD, PeakConnections, _cli
from bench.simulated import example
from tests.sshd import USER, LoopbackSshd, hand_to_login_user, login_user_sudo, start_all, stop

SUDOERS = Path("/etc/sudoers.d/provision-bench-delivery")
STAGES = ["preflight", "node", "dcgm", "collectives"]


@contextmanager
def interpreter_reachable() -> Iterator[None]:
    """The simulated nodes' ``python3`` is this controller's interpreter (the example declares no
    ``software.runtime``: 64 installs of torch into node runtimes are not what this bench measures), and the login
    user must be able to run it: folders on its path that others cannot pass through (``/root`` at 0700 when the
    interpreter is pyenv's) are opened to passing, not listing, for the run and closed again after."""
    opened: list[tuple[Path, int]] = []
    try:
        for folder in Path(os.path.realpath(sys.executable)).parents:
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
                opened.append((folder, mode))
        yield
    finally:
        for folder, mode in opened:
            folder.chmod(stat.S_IMODE(mode))


def _spec(work: Path, servers: LoopbackSshd, addresses: dict[str, str]) -> Path:
    hosts = len(addresses)
    data = example()
    data["nodes"]["groups"][0].update(hosts=f"sim[001-{hosts:03d}]", address_start=addresses["sim001"])
    if hosts > 16:  # the example's 8-port switches hold 16 hosts; a delivery of more gets 64-port ones
        data["fabric"].update(hosts_per_su=32, switch_radix=64)
    data["connection"] = {**servers.connection(forks=min(hosts, 32),
                                               become_password_env="PROVISION_BECOME_PASSWORD"),
                          "jump_host": f"{USER}@{BASTION}:{servers.port}"}
    data["burnin"].update(stages=STAGES, ranks_per_node=1)
    # 64 agents importing torch on two cores meet at the rendezvous after a minute, not the example's 10 s (which
    # the stage, rightly, calls a systemic stop and quarantines nobody for)
    data["burnin"]["thresholds"]["collective_timeout_s"] = 300
    data["burnin"].pop("soak", None)
    data.pop("admission", None)  # no MTBF statement: the soak is not run here
    data["simulation"] = {"seed": 3, "faults": []}
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def _timed(servers: LoopbackSshd, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    before, started = servers.logins("bastion"), time.monotonic()
    with PeakConnections(servers.port) as peak:
        done = _cli(*args, timeout=7200)
    return done, {"wall_s": round(time.monotonic() - started, 1), "exit": done.returncode,
                  "bastion_logins": servers.logins("bastion") - before, "bastion_peak_connections": peak.peak}


def _spans(run_dir: Path) -> dict[str, float]:
    """Seconds of each phase and burn-in stage, as the run's own event log recorded them."""
    started: dict[str, datetime] = {}
    seconds: dict[str, float] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        name, ts = event.get("event", ""), datetime.fromisoformat(event["ts"])
        key = event.get("stage") or event.get("phase")
        if not key:
            continue
        if name.endswith(".started"):
            started[key] = ts
        elif name.endswith((".finished", ".stopped")) and key in started:
            seconds[key] = round((ts - started.pop(key)).total_seconds(), 1)
    return seconds


def one_delivery(hosts: int, *, keep: bool = False) -> dict[str, Any]:
    addresses = {f"sim{index:03d}": f"127.0.5.{index}" for index in range(1, hosts + 1)}
    work = Path(tempfile.mkdtemp(prefix="bench-delivery-", dir="/tmp"))
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        servers = LoopbackSshd(work, {"bastion": BASTION, **addresses}, logged=("bastion",))
        with login_user_sudo(PASSWORD, SUDOERS), interpreter_reachable():
            start_all(servers, {"bastion": BASTION, **addresses}, daemons)
            spec = _spec(work, servers, addresses)
            built = _cli("apply", str(spec), "--phases", "simulate,register")
            if built.returncode != 0:
                raise RuntimeError(built.stdout + built.stderr)
            hand_to_login_user(work / ".provision" / "sim16", list(addresses))

            applied, first = _timed(servers, "apply", "--json", str(spec))
            payload = json.loads(applied.stdout)
            first["spans_s"] = _spans(Path(payload["run_dir"]))
            status = json.loads(_cli("status", "--json", str(spec)).stdout)
            states = {row["name"]: (row["state"], row.get("stage"), row.get("reason")) for row in status["nodes"]}
            not_admitted = {name: f"{state} at {stage}: {reason}" for name, (state, stage, reason) in states.items()
                            if state != "admitted"}

            again, second = _timed(servers, "apply", "--json", str(spec))  # as the team runs it the next day
            record = Path(json.loads(again.stdout)["run_dir"]) / "provision.json"
            if not record.exists():
                raise RuntimeError(f"the second apply provisioned nothing: {again.stdout[-3000:]}"
                                   f"{again.stderr[-3000:]}")
            rows = json.loads(record.read_text())
            second["changed_tasks"] = sum(row["changed"] for row in rows)
            second["hosts"] = len(rows)
            planned, third = _timed(servers, "plan", str(spec))
            third["says"] = planned.stdout.strip().splitlines()[-1:] if planned.stdout.strip() else []
            return {"hosts": hosts, "apply": first, "admitted": sum(s == "admitted" for s, _, _ in states.values()),
                    "not_admitted": not_admitted, "second_apply": second, "plan": third}
    finally:
        stop(daemons)
        if keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 hosts")
    parser.add_argument("--hosts", type=int, default=64, help="hosts in the delivery (default 64)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    parser.add_argument("--keep", action="store_true", help="keep the hosts' directory (its path is printed)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped bench still stops its sshd and closes /root
    hosts = 8 if args.quick else args.hosts
    if not 1 <= hosts <= 250:
        parser.error("1 to 250 hosts (one loopback /24)")
    row = one_delivery(hosts, keep=args.keep)
    print(f"{hosts} hosts: apply {row['apply']['wall_s']} s ({row['admitted']} admitted), "
          f"second apply {row['second_apply']['wall_s']} s ({row['second_apply']['changed_tasks']} changed), "
          f"bastion logins {row['apply']['bastion_logins']}, peak {row['apply']['bastion_peak_connections']}",
          file=sys.stderr)
    if args.json:
        print(json.dumps({"bench": "delivery", **row}))
    sys.exit(1 if row["not_admitted"] or row["second_apply"]["changed_tasks"] else 0)


if __name__ == "__main__":
    main()
