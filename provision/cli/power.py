"""``provision power status | cycle``: the nodes' power through their BMCs (Redfish)."""

from __future__ import annotations

from pathlib import Path

import click

from provision.cli.common import argv, emit_json, json_option, out, spec_argument, state_dir_of, state_dir_option
from provision.errors import EXIT_OK, EXIT_PROBLEMS, UsageProblem
from provision.hosts import bmc
from provision.run.context import SpecIdentity, mutating_run
from provision.spec import LoadedSpec, load_spec
from topology import hostlist


@click.group(name="power")
def power_group() -> None:
    """Power state and power cycles through the nodes' BMCs (the spec's bmc: section)."""


def _names(loaded: LoadedSpec, hosts: str | None) -> list[str]:
    if hosts is None:
        return loaded.node_names
    try:
        names = hostlist.expand(hosts)
    except hostlist.HostlistError as error:
        raise UsageProblem(f"{hosts}: {error}") from None
    unknown = [name for name in names if name not in loaded.node_names]
    if unknown:
        raise UsageProblem(f"not in {loaded.path}: {hostlist.compress(unknown)}")
    return names


def _render(results: list[bmc.PowerResult], as_json: bool) -> int:
    code = EXIT_OK if all(result.ok for result in results) else EXIT_PROBLEMS
    if as_json:
        emit_json({"nodes": [result.as_dict() for result in results]})
        return code
    for result in results:
        steps = f" ({'; '.join(result.steps)})" if result.steps else ""
        out.print(f"{result.node}: {result.state}{steps}{': ' + result.detail if result.detail else ''}",
                  markup=False)
    return code


@power_group.command(name="status")
@spec_argument
@click.option("--limit", "hosts", metavar="HOSTLIST", help="Only these nodes (Slurm hostlist syntax).")
@json_option
def power_status(spec: Path, hosts: str | None, as_json: bool) -> int:
    """Each node's power state as its BMC reports it (exit 1 if any BMC could not be read)."""
    loaded = load_spec(spec)
    return _render(bmc.power_status(loaded, _names(loaded, hosts)), as_json)


@power_group.command(name="cycle")
@spec_argument
@click.argument("hosts", metavar="HOSTLIST")
@state_dir_option
@json_option
def power_cycle(spec: Path, hosts: str, state_dir: Path | None, as_json: bool) -> int:
    """Force each node off and on again, waiting for its BMC to report each state (a recorded run; exit 1 if any
    node did not come back on)."""
    loaded = load_spec(spec)
    names = _names(loaded, hosts)
    with mutating_run(state_dir_of(loaded, state_dir), "power-cycle", argv(),
                      spec=SpecIdentity(loaded.path.resolve(), loaded.sha256)) as run:
        results = bmc.power_cycle(loaded, names)
        run.note("power-cycle", [result.as_dict() for result in results])
        run.conclude(EXIT_OK if all(result.ok for result in results) else EXIT_PROBLEMS)
    return _render(results, as_json)
