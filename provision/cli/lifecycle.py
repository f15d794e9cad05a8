"""The lifecycle commands: ``plan`` (read-only), ``apply`` and ``burnin`` (one recorded run each), ``status``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.live import Live
from rich.markup import escape

from provision import pipeline
from provision.cli.common import (
    argv,
    emit_json,
    err,
    existing_store,
    forks_option,
    json_option,
    limit_option,
    out,
    spec_argument,
    state_dir_of,
    state_dir_option,
    state_dir_without_spec,
    wait_lock_option,
)
from provision.cli.live import Board
from provision.cli.progress import event_printer
from provision.cli.render import print_status, quarantine_check
from provision.errors import EXIT_OK
from provision.fleet.capacity import capacity
from provision.run import context as run_context
from provision.spec import LoadedSpec, load_spec
from provision.state import NodeState, StateStore


@click.command()
@spec_argument
@state_dir_option
@limit_option
@click.option("--phases", metavar="LIST", help="Comma-separated phases to consider.")
@forks_option
@json_option
def plan(spec: Path, state_dir: Path | None, limit: str | None, phases: str | None, forks: int | None,
         as_json: bool) -> int:
    """Show what `apply` would change, without changing anything."""
    loaded = load_spec(spec)
    reports = pipeline.plan(loaded, state_dir_of(loaded, state_dir), limit=limit, phases=phases, forks=forks)
    if as_json:
        emit_json({"cluster": loaded.spec.cluster.name, "phases": [
            {"phase": report.name, "summary": report.summary, **report.details} for report in reports]})
        return EXIT_OK
    changes = [report for report in reports if any(report.details.values())]
    if not changes:
        out.print(f"No changes: {loaded.spec.cluster.name} ({len(loaded.nodes)} nodes) matches the spec.")
        return EXIT_OK
    for report in changes:
        out.print(f"[bold]{report.name}[/]: {escape(report.summary)}")
        for host, tasks in sorted(report.details.get("changes", {}).items()):
            out.print(f"  {host}:", markup=False)
            for change in tasks:
                out.print(f"    ~ {change['task']}", markup=False)
                for line in (change.get("diff") or "").splitlines()[:12]:
                    out.print(f"        {line}", markup=False)
        for host, failure in sorted(report.details.get("failures", {}).items()):
            out.print(f"  {host}: would fail at {failure}", markup=False)
    return EXIT_OK


def _run_pipeline(loaded: LoadedSpec, target: Path, *, show_progress: bool, verbose: bool = False,
                  **options: Any) -> pipeline.ApplyResult:
    """The pipeline with a live board per host on a terminal, one line per event elsewhere (a CI log)."""
    if show_progress and (verbose or not err.is_terminal):
        run_context.subscribe(event_printer(verbose=verbose))
    if not (show_progress and out.is_terminal and err.is_terminal and not verbose):
        return pipeline.apply(loaded, target, argv=argv(), **options)
    board = Board(loaded.node_names if not options.get("limit") else [])
    run_context.subscribe(board.apply)
    with Live(get_renderable=board.render, console=err, refresh_per_second=4, transient=False):
        return pipeline.apply(loaded, target, argv=argv(), **options)


verbose_option = click.option("-v", "--verbose", is_flag=True, help="Also print every Ansible task of every host.")


@click.command()
@spec_argument
@state_dir_option
@limit_option
@click.option("--phases", metavar="LIST", help="Comma-separated phases to run (default: all).")
@wait_lock_option
@forks_option
@verbose_option
@json_option
def apply(spec: Path, state_dir: Path | None, limit: str | None, phases: str | None, wait_lock: float,
          forks: int | None, verbose: bool, as_json: bool) -> int:
    """Converge the cluster to SPEC and record the run."""
    loaded = load_spec(spec)
    target = state_dir_of(loaded, state_dir)
    result = _run_pipeline(loaded, target, show_progress=not as_json, verbose=verbose, limit=limit, phases=phases,
                           wait_lock_s=wait_lock, forks=forks)
    if as_json:
        emit_json({"run_id": result.run.id, "run_dir": str(result.run.path), "exit_code": result.exit_code,
                   "phases": [{"phase": r.name, "summary": r.summary, **r.details} for r in result.reports],
                   "quarantined": result.quarantined})
        return result.exit_code
    for report in result.reports:
        out.print(f"[bold]{report.name}[/]: {escape(report.summary)}")
    out.print(f"run {result.run.id}: record in {result.run.path}")
    with StateStore(target) as store:
        print_status(loaded.spec.cluster.name, store, loaded.spec.admission.spare_fraction)
    return result.exit_code


@click.command()
@spec_argument
@state_dir_option
@limit_option
@wait_lock_option
@forks_option
@verbose_option
@json_option
def burnin(spec: Path, state_dir: Path | None, limit: str | None, wait_lock: float, forks: int | None,
           verbose: bool, as_json: bool) -> int:
    """Run the burn-in stages alone on provisioned nodes; admit or quarantine each (resumes an interrupted one)."""
    loaded = load_spec(spec)
    target = state_dir_of(loaded, state_dir)
    phases = "simulate,register,burnin" if loaded.spec.simulation is not None else "register,burnin"
    result = _run_pipeline(loaded, target, show_progress=not as_json, verbose=verbose, limit=limit, phases=phases,
                           wait_lock_s=wait_lock, forks=forks, command="burnin", retest_quarantined=True)
    report = next((report for report in result.reports if report.name == "burnin"), None)
    with StateStore(target) as store:
        names = {node.name for node in result.targets}
        nodes = [record for record in store.nodes() if record.name in names]
        if as_json:
            emit_json({"run_id": result.run.id, "run_dir": str(result.run.path), "exit_code": result.exit_code,
                       "summary": report.summary if report else "", "stopped": result.stopped,
                       "fabric_findings": store.cables_found(result.run.id),
                       "nodes": [{"node": record.name, "state": str(record.state), "stage": record.stage,
                                  "check": quarantine_check(store, record.name)
                                  if record.state is NodeState.QUARANTINED else None,
                                  "reason": record.reason} for record in nodes]})
            return result.exit_code
        if report:
            out.print(f"[bold]burnin[/]: {escape(report.summary)}")
        out.print(f"run {result.run.id}: record in {result.run.path}")
        print_status(loaded.spec.cluster.name, store, loaded.spec.admission.spare_fraction)
    return result.exit_code


@click.command()
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
@json_option
def status(spec: Path | None, state_dir: Path | None, as_json: bool) -> int:
    """Nodes by lifecycle state, and why the quarantined ones are quarantined."""
    if spec is not None:
        loaded = load_spec(spec)
        directory, cluster = state_dir_of(loaded, state_dir), loaded.spec.cluster.name
        spare: float | None = loaded.spec.admission.spare_fraction
    else:
        spare = None
        directory = state_dir_without_spec(state_dir)
        cluster = directory.name
    with existing_store(directory) as store:
        if as_json:
            runs = store.runs(limit=1)
            in_spec = [record for record in store.nodes() if record.in_spec]
            admitted = sum(1 for record in in_spec if record.state is NodeState.ADMITTED)
            emit_json({"cluster": cluster, "state_dir": str(directory), "counts": store.counts(),
                       "capacity": capacity(len(in_spec), admitted, spare).as_dict() if spare is not None else None,
                       "nodes": [record.as_dict() for record in store.nodes()],
                       "last_run": runs[0] if runs else None, "watch_breaker": store.breaker(),
                       "forecasts": [row for row in store.forecasts() if row["hours"] is not None]})
        else:
            print_status(cluster, store, spare)
    return EXIT_OK
