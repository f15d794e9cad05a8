"""Starting a command on N hosts at once: the session launcher (one SSH connection per host, held by the
controller, as ``burnin.launcher: ssh`` does) against one ``srun`` (``burnin.launcher: slurm``: slurmd fans out).

Real components on loopback: one OpenSSH sshd per host (127.0.0.11 up, key login, host keys checked) reached
through the launcher's own ``SshSession``; one slurmctld and one slurmd per host. The payload is ``/bin/true``, so
the figure is the launch itself (connect, authenticate, start, collect the exit) and not the agent's own start-up
(importing torch costs ~1.4 s of CPU per process, which on a 2-core machine would drown the launch).
N = 4, 8, 16, each median of R rounds, both launchers side by side in one run; the growth per host is the slope
of a least-squares line through the three medians.

Run (root; needs openssh-server, slurm-wlm and munge): python -m bench.launch_fanout [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from provision.hosts.connection import ConnectionModel
from provision.hosts.remote import SshSession
from tests import slurmcluster, sshd
from topology import hostlist

SIZES = (4, 8, 16)


def _slope(points: list[tuple[int, float]]) -> float:
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x in xs)


def ssh_fanout(addresses: dict[str, str], model: ConnectionModel) -> float:
    """Open a session to every host in parallel, run the payload, close: the session launcher's launch."""
    def one(item: tuple[str, str]) -> int:
        host, address = item
        session = SshSession(host, address, model)
        try:
            return session.run(["/bin/true"], 60).rc
        finally:
            session.close()

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(addresses)) as pool:
        codes = list(pool.map(one, addresses.items()))
    took = time.monotonic() - started
    assert codes == [0] * len(addresses), codes
    return took


def srun_fanout(cluster: slurmcluster.SlurmCluster, hosts: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(["srun", f"--nodelist={hostlist.compress(hosts)}", f"--nodes={len(hosts)}",
                           f"--ntasks={len(hosts)}", "--ntasks-per-node=1", "--time=1", "--quiet", "/bin/true"],
                          env=cluster.env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return took


def measure(rounds: int) -> dict[str, Any]:
    hosts = hostlist.expand(f"sim[01-{max(SIZES):02d}]")
    addresses = {host: f"127.0.0.{11 + index}" for index, host in enumerate(hosts)}
    with tempfile.TemporaryDirectory(prefix="bench-fanout-") as scratch:
        work = Path(scratch)
        work.chmod(0o755)  # sshd reads authorized_keys as the login user, who must get through
        (work / "ssh").mkdir()
        server = sshd.LoopbackSshd(work / "ssh", addresses)
        daemons = [subprocess.Popen(server.command(host), stderr=subprocess.DEVNULL) for host in hosts]
        try:
            for address in addresses.values():
                sshd.wait_listening(address, server.port)
            model = ConnectionModel("ssh", sshd.USER, server.port, server.client_key, server.known_hosts, None,
                                    False, 20)
            with slurmcluster.running(work / "slurm", hosts) as cluster:
                rows = []
                ssh_fanout({hosts[0]: addresses[hosts[0]]}, model)  # warm: first connection loads paramiko's keys
                srun_fanout(cluster, hosts[:1])
                for size in SIZES:
                    chosen = {host: addresses[host] for host in hosts[:size]}
                    ssh_times, srun_times = [], []
                    for _ in range(rounds):  # interleaved, so a slow moment of the machine hits both
                        ssh_times.append(ssh_fanout(chosen, model))
                        srun_times.append(srun_fanout(cluster, hosts[:size]))
                    rows.append({"hosts": size, "ssh_s": round(statistics.median(ssh_times), 3),
                                 "srun_s": round(statistics.median(srun_times), 3),
                                 "ssh_runs": [round(t, 3) for t in ssh_times],
                                 "srun_runs": [round(t, 3) for t in srun_times]})
        finally:
            sshd.stop(daemons)
    for row in rows:
        row["srun_over_ssh"] = round(row["srun_s"] / row["ssh_s"], 2)
    return {"benchmark": "launch_fanout", "rounds": rounds, "payload": "/bin/true", "rows": rows,
            "ssh_growth_s_per_host": round(_slope([(row["hosts"], row["ssh_s"]) for row in rows]), 4),
            "srun_growth_s_per_host": round(_slope([(row["hosts"], row["srun_s"]) for row in rows]), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.launch_fanout")
    parser.add_argument("--quick", action="store_true", help="3 rounds per size instead of 7")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args(argv)
    if not (slurmcluster.available() and Path(sshd.SSHD).exists()):
        print(f"launch_fanout: {slurmcluster.MISSING}; and openssh-server", file=sys.stderr)
        return 2
    result = measure(3 if args.quick else 7)
    print(f"{'hosts':>5}  {'ssh (s)':>8}  {'srun (s)':>8}  srun/ssh")
    for row in result["rows"]:
        print(f"{row['hosts']:>5}  {row['ssh_s']:>8.3f}  {row['srun_s']:>8.3f}  {row['srun_over_ssh']:>8.2f}")
    print(f"growth per host: ssh {result['ssh_growth_s_per_host'] * 1000:.1f} ms, "
          f"srun {result['srun_growth_s_per_host'] * 1000:.1f} ms")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
