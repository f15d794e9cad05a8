"""``provision topology flaps | repaired | recheck``: name the bad cables, record their repair, re-test them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape
from rich.table import Table

from provision.cli.common import (
    argv,
    emit_json,
    err,
    json_option,
    out,
    spec_argument,
    state_dir_of,
    state_dir_option,
)
from provision.cli.topology import topology
from provision.errors import EXIT_OK, EXIT_PROBLEMS
from provision.network import cable_health
from provision.network.view import view_of_plans, view_of_spec
from provision.pipeline import default_state_dir
from provision.repairs import cables as cable_repairs
from provision.run.context import SpecIdentity
from provision.spec import load_fabric_spec, load_spec

#: What a click option decorates: a command's function, or the command itself.
_Decorated = TypeVar("_Decorated", bound=Callable[..., Any] | click.Command)


def _files_option(*names: str, help_text: str) -> Callable[[_Decorated], _Decorated]:
    return click.option(*names, multiple=True, type=click.Path(path_type=Path, dir_okay=False, exists=True),
                        help=help_text)


@topology.command(name="flaps")
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--design", "plans", multiple=True, type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="No spec: the fabric is these cabling plans (UFM .ndt or CSV; repeatable), link health at its "
                   "defaults.")
@_files_option("--events", help_text="UFM event.log (repeatable; default: the simulated fabric's).")
@_files_option("--syslog", "syslogs", help_text="A host syslog with IPoIB carrier lines (repeatable).")
@click.option("--counters", "counter_dirs", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="A counter snapshot: a perfquery snapshot directory or an ibdiagnet2.db_csv (two or more; "
                   "default: the simulated fabric's).")
@_files_option("--results", help_text="End-to-end test results (JSON) for tomography (repeatable).")
@click.option("--observed", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="ibnetdiscover dump or ibdiagnet2.db_csv: resolves GUID-named counter files and fills GUIDs into "
                   "the disable list.")
@click.option("--year", type=click.IntRange(1970, 9999), help="The year a syslog ends in (syslog omits it).")
@click.option("--netdev-map", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Which HCA each IPoIB netdev is ('host netdev hca' per line, '*' for every host); without it "
                   "the hosts' own sysfs is asked. Never guessed from ibN's number.")
@click.option("--actions", "actions_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write the port-disable list (UFM REST and ibportstate), tickets and re-check routes here.")
@click.option("--burnin-results", "last_burnin", is_flag=True,
              help="Add the pair-test results of the latest burn-in (the default for a simulated cluster).")
@click.option("--execute", is_flag=True,
              help="Also disable the listed switch ports now (ibportstate from --via), and read each one back.")
@click.option("--via", metavar="HOST", help="The host whose HCA sends the disables (default: the spec's first node).")
@state_dir_option
@json_option
def topology_flaps(spec: Path | None, plans: tuple[Path, ...], events: tuple[Path, ...], syslogs: tuple[Path, ...],
                   counter_dirs: tuple[Path, ...],
                   results: tuple[Path, ...], observed: Path | None, year: int | None, netdev_map: Path | None,
                   actions_dir: Path | None, last_burnin: bool, execute: bool, via: str | None,
                   state_dir: Path | None, as_json: bool) -> int:
    """Name the flapping, erroring, down and degraded cables from events, counters and test results (exit 1 if any).

    SPEC may be a cluster spec or a spec of only ``cluster`` and ``fabric`` (with a cabling file); without a spec,
    ``--design`` gives the plans and ``--observed`` the dump."""
    if (spec is None) == (not plans):
        raise click.UsageError("give either SPEC or --design PLAN (one or more), not both")
    if spec is not None:
        loaded = load_fabric_spec(spec)
        view = view_of_spec(loaded)
        directory: Path | None = state_dir or default_state_dir(loaded.path, loaded.spec.cluster.name)
    else:
        view, directory = view_of_plans(plans), state_dir
    request = cable_health.FlapsRequest(list(events), list(syslogs), list(counter_dirs), list(results), observed,
                                         year, last_burnin, actions_dir, execute, via, netdev_map)
    found = cable_repairs.investigate(view, directory, request, argv())
    if not as_json:
        for line in view.plan_problems:
            err.print(f"provision: plan row not used: {line}", markup=False)
    return _render_flaps(found, view.plan_problems, as_json)


def _render_flaps(found: cable_repairs.FlapsOutcome, plan_problems: list[str], as_json: bool) -> int:
    """The suspects, as JSON or as a table, and the exit code: nothing suspect in a partly read file is not
    'no suspect cables'."""
    report, suspects = found.report, found.suspects
    partial = [reading for reading in report.readings if reading.partial]
    if as_json:
        emit_json({"suspects": suspects, "ingestion": report.ingestion, "plan_problems": plan_problems,
                   "readings": [reading.as_dict() for reading in report.readings],
                   "storms": [{"start": storm.start, "end": storm.end, "events": storm.events, "cables": storm.cables}
                              for storm in report.storms],
                   "explained_by_reboots": report.explained_by_reboots,
                   "unmatched": [{"source": u.source, "where": u.where, "text": u.text} for u in report.unmatched[:50]],
                   "unmatched_total": len(report.unmatched), "tomography": report.tomography,
                   "actions": [str(path) for path in found.written], "executed": found.executed})
        return EXIT_PROBLEMS if suspects or partial else EXIT_OK
    if report.storms:
        out.print(f"suppressed {len(report.storms)} reboot storm(s) of "
                  f"{sum(storm.events for storm in report.storms)} event(s)", markup=False)
    if report.unmatched:
        out.print(f"{len(report.unmatched)} observation(s) name ports not in the fabric model, e.g. "
                  f"{report.unmatched[0].where}", markup=False)
    if not suspects and partial:  # the verdict covers what was read, and says what was not
        out.print("Nothing suspect in what could be read, but not all of it could: "
                  + "; ".join(reading.line() for reading in partial)
                  + ". The cables those lines speak of are not known to be healthy.", markup=False, soft_wrap=True)
        return EXIT_PROBLEMS
    if not suspects:
        out.print("No suspect cables.", markup=False)
        return EXIT_OK
    table = Table(title=f"{len(suspects)} suspect cable(s)", title_justify="left")
    for column in ("cable", "class", "score", "flaps", "S/N", "next step"):
        table.add_column(column, overflow="fold")
    for row in suspects:
        table.add_row(escape(row["cable"]), row["class"], f"{row['score']:g}", str(row["flaps_in_window"]),
                      row["serial"] or "", row["history"]["next_step"])
    out.print(table)
    for row in suspects:
        if row["evidence"]:
            out.print(f"{row['cable']}: {len(row['evidence'])} evidence line(s), e.g. {row['evidence'][0]}",
                      markup=False, soft_wrap=True)
    if report.tomography and report.tomography["next_test"]:
        out.print(f"tomography: next test, {len(report.tomography['next_test'])} flow(s), e.g. "
                  f"{report.tomography['next_test'][0]}", markup=False)
    for reading in partial:
        out.print(f"not all evidence was read: {reading.line()}", markup=False, soft_wrap=True)
    for path in found.written[:2]:
        out.print(f"wrote {path}", markup=False)
    for row in found.executed:
        out.print(f"{row['switch']}/{row['port']} ({row['cable']}): {row['result']}: {row['detail']}", markup=False)
    return EXIT_PROBLEMS


@topology.command(name="repaired")
@spec_argument
@click.argument("port", metavar="SWITCH/PORT")
@click.option("--action", required=True, type=click.Choice(cable_health.LADDER),
              help="What was done to the cable (a rung of the repair ladder).")
@click.option("--note", default="", help="Free text kept with the record (ticket number, technician).")
@state_dir_option
@json_option
def topology_repaired(spec: Path, port: str, action: str, note: str, state_dir: Path | None, as_json: bool) -> int:
    """Record a repair of the cable at SWITCH/PORT, so later flaps count against it and the ladder moves on.
    SPEC may be a fabric-only spec (its cabling file is the fabric)."""
    loaded = load_fabric_spec(spec)
    directory = state_dir or default_state_dir(loaded.path, loaded.spec.cluster.name)
    recorded = cable_repairs.record_repair(view_of_spec(loaded), SpecIdentity(loaded.path.resolve(), loaded.sha256),
                                           directory, port, action, note, argv())
    if as_json:
        emit_json(recorded)
    else:
        out.print(f"recorded: {action} of {recorded['cable']}", markup=False)
    return EXIT_OK


@topology.command(name="recheck")
@spec_argument
@click.argument("ports", nargs=-1, required=True, metavar="SWITCH/PORT...")
@state_dir_option
@json_option
def topology_recheck(spec: Path, ports: tuple[str, ...], state_dir: Path | None, as_json: bool) -> int:
    """After a repair, re-test only the routes through the cables at SWITCH/PORT (exit 1 if any is still bad)."""
    loaded = load_spec(spec)
    outcome = cable_repairs.recheck(loaded, state_dir_of(loaded, state_dir), list(ports), argv())
    if as_json:
        emit_json({"run_dir": str(outcome.run_dir), "cables": outcome.rows})
        return outcome.exit_code
    for row in outcome.rows:
        out.print(f"{row['cable']}: {row['verdict']}", markup=False)
        for line in row["evidence"]:
            out.print(f"    {line}", markup=False)
    return outcome.exit_code
