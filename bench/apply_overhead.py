"""What `provision apply` costs on top of Ansible, what a no-op apply costs, and how apply grows with the cluster.

Every figure is taken on a freshly delivered simulated cluster (the example's hardware, no driver, OFED or
tuning yet), so every role really installs and configures:

* **overhead**: on the same number of hosts (32), plain ``ansible-playbook`` running ``playbooks/site.yml`` with
  the inventory ``provision`` generates, the same forks and the same Ansible settings, against ``provision apply``
  (spec loading, state store, run record, ansible-runner and its event stream, per-host results) up to the end of
  provisioning. Each on its own fresh cluster, in alternating order, ``--repeats`` times; the medians compared.
* **no-op**: a second ``provision apply`` on the converged cluster against the first.
* **growth**: ``provision apply`` on 8, 32 and 64 hosts.
* **strategy**: plain ``ansible-playbook`` with the ``free`` strategy against the default ``linear`` one.

``--quick`` runs 1 host once and skips growth and strategy. Run: python -m bench.apply_overhead [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.simulated import example, provision_cli, write_spec
from provision.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
PHASES = "simulate,register,provision"


def _spec(directory: Path, hosts: int) -> Path:
    data = example()
    data["nodes"]["groups"][0]["hosts"] = f"sim[001-{hosts:03d}]"
    data["nodes"]["groups"][0]["address_start"] = "127.0.1.1"
    data["fabric"].update(switch_radix=32, hosts_per_su=8)  # the example's radix-8 fabric holds 16 hosts at most
    data["simulation"] = {"seed": 1, "faults": []}  # a clean delivery: every role has everything to do
    directory.mkdir(parents=True, exist_ok=True)
    return write_spec(directory, data)


def _timed(function: Any) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def _checked(result: subprocess.CompletedProcess[str], what: str) -> None:
    if result.returncode != 0:
        raise SystemExit(f"{what} failed (exit {result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}")


def _materialised(directory: Path, hosts: int) -> Path:
    """A spec whose simulated hosts are built (their hardware roots too, which are otherwise built on first
    touch), so no timed figure includes building them: real hosts exist before anyone provisions them."""
    from provision.sim import cluster

    spec = _spec(directory, hosts)
    _checked(provision_cli("sim", "up", str(spec), cwd=directory), "sim up")
    loaded = load_spec(spec)
    cluster.materialize(directory / ".provision" / loaded.spec.cluster.name, [node.name for node in loaded.nodes])
    return spec


def provision_apply(spec: Path) -> float:
    return _timed(lambda: _checked(provision_cli("apply", str(spec), "--phases", PHASES, cwd=spec.parent),
                                   "provision apply"))


def plain_playbook(spec: Path, strategy: str = "linear") -> float:
    """``ansible-playbook`` as an operator would run it: the generated inventory, the spec's forks, and the
    settings ``provision`` gives ansible-runner."""
    from provision.hosts import ansible, inventory

    loaded = load_spec(spec)
    state_dir = spec.parent / ".provision" / loaded.spec.cluster.name
    path = inventory.write(loaded, state_dir, spec.parent / "inventory.yml")
    env = {**os.environ, **ansible.settings(spec.parent / "ansible"), "ANSIBLE_STRATEGY": strategy}
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(path), "site.yml",
               "-f", str(loaded.spec.connection.forks)]
    return _timed(lambda: _checked(subprocess.run(command, cwd=ROOT / "playbooks", env=env, capture_output=True,
                                                  text=True, timeout=3600, check=False), "ansible-playbook"))


def measure(quick: bool, repeats: int) -> dict[str, Any]:
    size = 1 if quick else 32
    result: dict[str, Any] = {"hosts": size, "repeats": repeats}
    with tempfile.TemporaryDirectory(prefix="apply-overhead-") as name:
        work = Path(name)
        plain, ours, noop = [], [], []
        for repeat in range(repeats):
            order = ("plain", "ours") if repeat % 2 == 0 else ("ours", "plain")
            for which in order:
                spec = _materialised(work / f"{which}-{repeat}", size)
                if which == "plain":
                    plain.append(plain_playbook(spec))
                else:
                    ours.append(provision_apply(spec))
                    noop.append(provision_apply(spec))
        result.update(plain_ansible_s=[round(value, 1) for value in plain],
                      provision_apply_s=[round(value, 1) for value in ours],
                      noop_apply_s=[round(value, 1) for value in noop])
        result["overhead_ratio"] = round(statistics.median(ours) / statistics.median(plain), 3)
        result["noop_fraction"] = round(statistics.median(noop) / statistics.median(ours), 3)
        if not quick:
            result["growth_s"] = {str(size): round(statistics.median(ours), 1)}
            for hosts in (8, 64):
                result["growth_s"][str(hosts)] = round(provision_apply(_materialised(work / f"grow-{hosts}",
                                                                                      hosts)), 1)
            result["growth_s"] = dict(sorted(result["growth_s"].items(), key=lambda item: int(item[0])))
            result["plain_free_strategy_s"] = round(plain_playbook(_materialised(work / "free", size), "free"), 1)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.apply_overhead")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None, help="paired runs (2; 1 with --quick)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.quick, args.repeats or (1 if args.quick else 2))
    if not args.json:
        print(f"{result['hosts']} hosts: provision apply / ansible-playbook = {result['overhead_ratio']}, "
              f"no-op apply = {result['noop_fraction']:.0%} of the first")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
