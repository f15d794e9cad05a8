"""``provision sim``: the built-in simulated cluster of a spec with a ``simulation:`` section."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

import click
from rich.table import Table

from provision.cli.common import argv, emit_json, json_option, out, spec_argument, state_dir_of, state_dir_option
from provision.errors import EXIT_OK, UsageProblem
from provision.run.context import SpecIdentity, mutating_run
from provision.sim import cluster as sim_cluster
from provision.sim import namespace as sim_namespace
from provision.spec import load_spec


@click.group()
def sim() -> None:
    """The built-in simulated cluster of a spec with a `simulation:` section."""


@sim.command(name="up")
@spec_argument
@state_dir_option
@click.option("--rebuild", is_flag=True, help="Throw away the simulated hosts and build them again.")
@json_option
def sim_up(spec: Path, state_dir: Path | None, rebuild: bool, as_json: bool) -> int:
    """Materialise the simulated hosts (idempotent)."""
    loaded = load_spec(spec)
    target = state_dir_of(loaded, state_dir)
    with mutating_run(target, "sim up", argv(), spec=SpecIdentity(loaded.path.resolve(), loaded.sha256)) as run:
        manifest = sim_cluster.up(loaded, target, rebuild=rebuild)
        run.note("simulation", {"changed": manifest["changed"], "faults": manifest["faults"]})
    if as_json:
        emit_json({**manifest, "sim_dir": str(sim_cluster.sim_dir(target))})
    else:
        out.print(sim_cluster.summary(manifest), markup=False)
        out.print(f"hosts under {sim_cluster.sim_dir(target) / 'nodes'}; run a host's tools with "
                  f"PATH={sim_cluster.node_paths(target, loaded.node_names[0]).bin}:$PATH", markup=False)
    return EXIT_OK


@sim.command(name="down")
@spec_argument
@state_dir_option
def sim_down(spec: Path, state_dir: Path | None) -> int:
    """Remove the simulated hosts."""
    loaded = load_spec(spec)
    target = state_dir_of(loaded, state_dir)
    if not target.exists():
        out.print("no simulated cluster", markup=False)
        return EXIT_OK
    with mutating_run(target, "sim down", argv(), spec=SpecIdentity(loaded.path.resolve(), loaded.sha256)):
        removed = sim_cluster.down(target)
    out.print("removed the simulated cluster" if removed else "no simulated cluster", markup=False)
    return EXIT_OK


@sim.command(name="shell", context_settings={"ignore_unknown_options": True})
@spec_argument
@click.argument("host")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@state_dir_option
def sim_shell(spec: Path, host: str, command: tuple[str, ...], state_dir: Path | None) -> int:
    """Run COMMAND (a shell by default) on simulated HOST presented at the real paths: /sys, /proc, /etc
    and the vendor tools are the host's. Needs root. An sshd started this way is how a playbook reaches
    the host with `simulation.presentation: namespace`."""
    loaded = load_spec(spec)
    if host not in loaded.node_names:
        raise UsageProblem(f"no node named {host!r} in {spec}")
    target = state_dir_of(loaded, state_dir)
    if sim_cluster.read_manifest(target) is None:
        raise sim_cluster.SimError(f"no simulated cluster under {target} (run provision sim up {spec} first)")
    sim_namespace.replace_process(target, host, list(command) or [os.environ.get("SHELL") or "/bin/sh"])
    return EXIT_OK


@sim.command(name="faults")
@spec_argument
@json_option
def sim_faults(spec: Path, as_json: bool) -> int:
    """The spec's injected faults, and the stage and check expected to catch each."""
    loaded = load_spec(spec)
    rows = sim_cluster.describe_faults(loaded)
    if as_json:
        emit_json({"cluster": loaded.spec.cluster.name, "faults": rows})
        return EXIT_OK
    table = Table(title=f"{loaded.spec.cluster.name}: {len(rows)} injected fault(s)", title_justify="left")
    for column in ("kind", "target", "stage", "check", "expected"):
        table.add_column(column, overflow="fold")
    for row in rows:
        where = "/".join(part for part in (row["node"], row["target"]) if part)
        table.add_row(row["kind"], where, row["stage"], row["check"], row["expected"])
    out.print(table)
    return EXIT_OK


@sim.command(name="bmcs")
@spec_argument
@state_dir_option
def sim_bmcs(spec: Path, state_dir: Path | None) -> int:
    """Serve each simulated node's BMC (a Redfish emulator on its loopback BMC address, the spec's credentials)
    and apply their power to the simulated hosts, until interrupted."""
    from provision.sim import bmc as sim_bmc  # imports the Redfish emulator's client libraries

    loaded = load_spec(spec)
    target = state_dir_of(loaded, state_dir)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with sim_bmc.running(loaded, target) as planned:
        for bmc in planned:
            out.print(f"{bmc.node}: BMC at {bmc.url}", markup=False)
        out.print(f"{len(planned)} BMC(s) ready", markup=False)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait()
    return EXIT_OK
