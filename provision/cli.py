"""The ``provision`` command line.

Exit codes are a contract for scripts and CI: 0 success; 1 the run worked but
found problems (quarantined nodes, audit violations); 2 bad usage, a bad spec,
or a refusal before anything changed (e.g. the cluster lock is held); 3 an
internal error, with the run directory named so the evidence is one step away.
Read commands take ``--json``; humans get tables.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from provision import __version__, hostlist, pipeline
from provision import linkhealth as linkhealth_glue
from provision.burnin import pairs as pairs_stage
from provision.fabric import (
    IdentityError,
    audit_against_plans,
    audit_against_spec,
    audit_change,
    design_fabric,
    problem_places,
)
from provision.observe import open_session
from provision.runs import RunRecord
from provision.secrets import SecretUnavailable
from provision.sim import cluster as sim_cluster
from provision.sim import namespace as sim_namespace
from provision.spec import LoadedSpec, SpecError, load_spec
from provision.spec.thresholds import effective_thresholds
from provision.state import ClusterLock, LockHeld, NodeState, StateStore, StoreError
from provision.state.lifecycle import TransitionError
from topology import cabling, export, ibnetdiscover, rules
from topology.model import Cable, Fabric

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _Session:
    """What the error handler needs to know about the command in flight."""

    run: RunRecord | None = None


def _emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def _state_dir(loaded: LoadedSpec, override: Path | None) -> Path:
    return override if override is not None else pipeline.default_state_dir(loaded.path, loaded.spec.cluster.name)


state_dir_option = click.option("--state-dir", type=click.Path(path_type=Path, file_okay=False),
                                 help="Where the state store and run records live (default: .provision/<cluster> "
                                      "next to the spec).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
forks_option = click.option("--forks", type=click.IntRange(min=1), default=None,
                            help="Parallel Ansible hosts (default: connection.forks of the spec).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
def cli() -> None:
    """Turn a delivery of bare-metal GPU servers into a healthy, admitted cluster."""


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@json_option
def validate(files: tuple[Path, ...], as_json: bool) -> int:
    """Check spec FILES and report every problem at once (exit 2 if any)."""
    results = []
    failed = False
    for file in files:
        try:
            loaded = load_spec(file)
        except SpecError as error:
            failed = True
            results.append({"file": str(file), "ok": False, "issues": [issue.as_dict() for issue in error.issues]})
            if not as_json:
                for issue in error.issues:
                    err.print(str(issue), markup=False)
            continue
        summary = _spec_summary(loaded)
        results.append({"file": str(file), "ok": True, **summary})
        if not as_json:
            fabric = summary["fabric"]
            shape = (f"{fabric['tiers']}-tier fabric: {fabric['leaves']} leaves, {fabric['spines']} spines, "
                     f"{fabric['cores']} cores, {fabric['cables']:,} cables" if fabric else "fabric from cabling file")
            out.print(f"ok: {file}: cluster {summary['cluster']}, {summary['nodes']} nodes "
                      f"({summary['gpus']:,} GPUs), {shape}", markup=False)
    if as_json:
        _emit_json({"ok": not failed, "files": results})
    return EXIT_USAGE if failed else EXIT_OK


def _spec_summary(loaded: LoadedSpec) -> dict[str, Any]:
    spec = loaded.spec
    gpus = sum(spec.hardware[node.hardware].gpu.count for node in loaded.nodes)
    fabric = loaded.fabric
    thresholds = {
        name: {key: {"value": value.value, "reason": value.reason}
               for key, value in effective_thresholds(profile, spec.fabric, spec.burnin.thresholds).items()}
        for name, profile in spec.hardware.items()
    }
    return {
        "cluster": spec.cluster.name,
        "nodes": len(loaded.nodes),
        "hosts": hostlist.compress(loaded.node_names),
        "gpus": gpus,
        "sha256": loaded.sha256,
        "fabric": None if fabric is None else {
            "tiers": fabric.tiers, "scalable_units": fabric.scalable_units, "leaves": fabric.leaves,
            "spines": fabric.spines, "cores": fabric.cores, "cables": fabric.cables,
            "spine_grouping": fabric.spine_grouping,
        },
        "thresholds": thresholds,
    }


@cli.command()
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
@click.option("--limit", metavar="HOSTLIST", help="Only these hosts (Slurm hostlist syntax).")
@click.option("--phases", metavar="LIST", help="Comma-separated phases to consider.")
@forks_option
@json_option
def plan(spec: Path, state_dir: Path | None, limit: str | None, phases: str | None, forks: int | None,
         as_json: bool) -> int:
    """Show what `apply` would change, without changing anything."""
    loaded = load_spec(spec)
    reports = pipeline.plan(loaded, _state_dir(loaded, state_dir), limit=limit, phases=phases, forks=forks)
    if as_json:
        _emit_json({"cluster": loaded.spec.cluster.name, "phases": [
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


def _run_pipeline(loaded: LoadedSpec, target: Path, *, show_progress: bool, **options: Any) -> pipeline.ApplyResult:
    """The pipeline with live progress bars on a terminal; the run in flight is remembered for error reports."""

    def remember(run: RunRecord) -> None:
        _Session.run = run

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not (show_progress and out.is_terminal)) as bars:
        def progress(description: str, total: int):
            task = bars.add_task(description, total=total)
            return lambda steps: bars.advance(task, steps)

        return pipeline.apply(loaded, target, argv=sys.argv[1:], on_run_created=remember, progress=progress,
                              **options)


@cli.command()
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
@click.option("--limit", metavar="HOSTLIST", help="Only these hosts (Slurm hostlist syntax).")
@click.option("--phases", metavar="LIST", help="Comma-separated phases to run (default: all).")
@click.option("--wait-lock", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="SECONDS",
              help="Wait this long for another mutating command to finish instead of failing at once.")
@forks_option
@json_option
def apply(spec: Path, state_dir: Path | None, limit: str | None, phases: str | None, wait_lock: float,
          forks: int | None, as_json: bool) -> int:
    """Converge the cluster to SPEC and record the run."""
    loaded = load_spec(spec)
    target = _state_dir(loaded, state_dir)
    result = _run_pipeline(loaded, target, show_progress=not as_json, limit=limit, phases=phases,
                           wait_lock_s=wait_lock, forks=forks)
    if as_json:
        _emit_json({"run_id": result.run.id, "run_dir": str(result.run.path), "exit_code": result.exit_code,
                    "phases": [{"phase": r.name, "summary": r.summary, **r.details} for r in result.reports],
                    "quarantined": result.quarantined})
        return result.exit_code
    for report in result.reports:
        out.print(f"[bold]{report.name}[/]: {escape(report.summary)}")
    out.print(f"run {result.run.id}: record in {result.run.path}")
    with StateStore(target) as store:
        _print_status(loaded.spec.cluster.name, store)
    return result.exit_code


@cli.command()
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
@click.option("--limit", metavar="HOSTLIST", help="Only these hosts (Slurm hostlist syntax).")
@click.option("--wait-lock", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="SECONDS",
              help="Wait this long for another mutating command to finish instead of failing at once.")
@forks_option
@json_option
def burnin(spec: Path, state_dir: Path | None, limit: str | None, wait_lock: float, forks: int | None,
           as_json: bool) -> int:
    """Run the burn-in stages alone on provisioned nodes; admit or quarantine each (resumes an interrupted one)."""
    loaded = load_spec(spec)
    target = _state_dir(loaded, state_dir)
    phases = "simulate,register,burnin" if loaded.spec.simulation is not None else "register,burnin"
    result = _run_pipeline(loaded, target, show_progress=not as_json, limit=limit, phases=phases,
                           wait_lock_s=wait_lock, forks=forks, command="burnin", retest_quarantined=True)
    report = next((report for report in result.reports if report.name == "burnin"), None)
    with StateStore(target) as store:
        names = {node.name for node in result.targets}
        nodes = [record for record in store.nodes() if record.name in names]
        if as_json:
            _emit_json({"run_id": result.run.id, "run_dir": str(result.run.path), "exit_code": result.exit_code,
                        "summary": report.summary if report else "", "stopped": result.stopped,
                        "fabric_findings": store.cables_found(result.run.id),
                        "nodes": [{"node": record.name, "state": str(record.state), "stage": record.stage,
                                   "check": _quarantine_check(store, record.name)
                                   if record.state is NodeState.QUARANTINED else None,
                                   "reason": record.reason} for record in nodes]})
            return result.exit_code
        if report:
            out.print(f"[bold]burnin[/]: {escape(report.summary)}")
        out.print(f"run {result.run.id}: record in {result.run.path}")
        _print_status(loaded.spec.cluster.name, store)
    return result.exit_code


def _quarantine_check(store: StateStore, name: str) -> str | None:
    """The check named in the node's latest quarantine evidence."""
    for row in reversed(store.history(name)):
        if row["to_state"] == NodeState.QUARANTINED.value:
            return row["evidence"].get("check") or row["evidence"].get("failed_task")
    return None


@cli.command()
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
@json_option
def status(spec: Path | None, state_dir: Path | None, as_json: bool) -> int:
    """Nodes by lifecycle state, and why the quarantined ones are quarantined."""
    if spec is not None:
        loaded = load_spec(spec)
        directory, cluster = _state_dir(loaded, state_dir), loaded.spec.cluster.name
    else:
        directory = state_dir or pipeline.find_state_dir(Path.cwd())
        cluster = directory.name
    store = StateStore.open_readonly(directory)
    if store is None:
        raise pipeline.UsageProblem(f"no state store in {directory}: run `provision apply` first")
    with store:
        if as_json:
            runs = store.runs(limit=1)
            _emit_json({"cluster": cluster, "state_dir": str(directory), "counts": store.counts(),
                        "nodes": [record.as_dict() for record in store.nodes()],
                        "last_run": runs[0] if runs else None})
        else:
            _print_status(cluster, store)
    return EXIT_OK


def _print_status(cluster: str, store: StateStore) -> None:
    counts = store.counts()
    records = store.nodes()
    table = Table(title=f"{cluster}: {sum(counts.values())} nodes", title_justify="left")
    table.add_column("state")
    table.add_column("nodes", justify="right")
    table.add_column("hosts")
    for state in NodeState:
        names = [record.name for record in records if record.in_spec and record.state is state]
        table.add_row(state.value, str(counts[state.value]), hostlist.compress(names) if names else "")
    out.print(table)
    gone = [record.name for record in records if not record.in_spec]
    if gone:
        out.print(f"not in the spec any more (history kept): {hostlist.compress(gone)}")
    held = [record for record in records if record.in_spec and record.state is NodeState.QUARANTINED]
    if held:
        reasons = Table(title="quarantined", title_justify="left")
        for column in ("node", "stage", "reason", "since"):
            reasons.add_column(column)
        for record in held:
            reasons.add_row(record.name, record.stage or "", record.reason, record.updated_at)
        out.print(reasons)


def _operator_move(target_state: NodeState, hosts: str, reason: str, spec: Path | None,
                   state_dir: Path | None) -> int:
    """An operator's move of nodes, under the cluster lock, with a run record and one history row each."""
    if spec is not None:
        directory = _state_dir(load_spec(spec), state_dir)
    else:
        directory = state_dir or pipeline.find_state_dir(Path.cwd())
    if StateStore.open_readonly(directory) is None:
        raise pipeline.UsageProblem(f"no state store in {directory}: run `provision apply` first")
    try:
        names = hostlist.expand(hosts)
    except hostlist.HostlistError as error:
        raise click.UsageError(str(error)) from None
    command = target_state.value if target_state is not NodeState.ADMITTED else "admit"
    with ClusterLock(directory, command), StateStore(directory) as store:
        unknown = [name for name in names if store.node(name) is None]
        if unknown:
            raise pipeline.UsageProblem(f"not in the state store: {hostlist.compress(unknown)}")
        run = RunRecord(directory / "runs", command, sys.argv[1:])
        _Session.run = run
        run.note("operator_move", {"to": target_state.value, "hosts": names, "reason": reason})
        store.start_run(run.id, command, run.path, spec.resolve() if spec else directory, "")
        try:
            with store.transaction():  # all or nothing: a refused move leaves every node as it was
                for name in names:
                    record = store.node(name)
                    assert record is not None
                    store.transition(name, target_state, run_id=run.id, reason=reason, by_operator=True,
                                     stage=record.stage if target_state is NodeState.QUARANTINED else None,
                                     evidence={"operator": True})
        except Exception:
            store.finish_run(run.id, "failed", EXIT_USAGE)
            run.finish("failed", EXIT_USAGE)
            raise
        store.finish_run(run.id, "succeeded", EXIT_OK)
        run.finish("succeeded", EXIT_OK)
    out.print(f"{target_state.value}: {hostlist.compress(names)} ({reason})", markup=False)
    return EXIT_OK


def _operator_command(target_state: NodeState, help_text: str):
    @click.argument("hosts", metavar="HOSTLIST")
    @click.option("--reason", required=True, help="Why; kept in the node's history.")
    @click.option("--spec", type=click.Path(path_type=Path, dir_okay=False), help="The cluster's spec file.")
    @state_dir_option
    def command(hosts: str, reason: str, spec: Path | None, state_dir: Path | None) -> int:
        if not reason.strip():
            raise click.UsageError("--reason must say why")
        return _operator_move(target_state, hosts, reason, spec, state_dir)

    command.__doc__ = help_text
    return command


cli.command(name="admit")(_operator_command(NodeState.ADMITTED, "Admit nodes by hand (an operator's decision)."))
cli.command(name="quarantine")(_operator_command(NodeState.QUARANTINED, "Take nodes out of service for repair."))
cli.command(name="drain")(_operator_command(
    NodeState.DRAINED, "Set nodes aside; the pipeline leaves them alone until an operator moves them."))


@cli.group()
def sim() -> None:
    """The built-in simulated cluster of a spec with a `simulation:` section."""


@sim.command(name="up")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
@click.option("--rebuild", is_flag=True, help="Throw away the simulated hosts and build them again.")
@json_option
def sim_up(spec: Path, state_dir: Path | None, rebuild: bool, as_json: bool) -> int:
    """Materialise the simulated hosts (idempotent)."""
    loaded = load_spec(spec)
    target = _state_dir(loaded, state_dir)
    with ClusterLock(_ensure(target), "sim up"):
        manifest = sim_cluster.up(loaded, target, rebuild=rebuild)
    if as_json:
        _emit_json({**manifest, "sim_dir": str(sim_cluster.sim_dir(target))})
    else:
        out.print(sim_cluster.summary(manifest), markup=False)
        out.print(f"hosts under {sim_cluster.sim_dir(target) / 'nodes'}; run a host's tools with "
                  f"PATH={sim_cluster.node_paths(target, loaded.node_names[0]).bin}:$PATH", markup=False)
    return EXIT_OK


@sim.command(name="down")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@state_dir_option
def sim_down(spec: Path, state_dir: Path | None) -> int:
    """Remove the simulated hosts."""
    loaded = load_spec(spec)
    target = _state_dir(loaded, state_dir)
    if not target.exists():
        out.print("no simulated cluster", markup=False)
        return EXIT_OK
    with ClusterLock(target, "sim down"):
        removed = sim_cluster.down(target)
    out.print("removed the simulated cluster" if removed else "no simulated cluster", markup=False)
    return EXIT_OK


@sim.command(name="shell", context_settings={"ignore_unknown_options": True})
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("host")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@state_dir_option
def sim_shell(spec: Path, host: str, command: tuple[str, ...], state_dir: Path | None) -> int:
    """Run COMMAND (a shell by default) on simulated HOST presented at the real paths: /sys, /proc, /etc
    and the vendor tools are the host's. Needs root. An sshd started this way is how a playbook reaches
    the host with `simulation.presentation: namespace`."""
    loaded = load_spec(spec)
    if host not in loaded.node_names:
        raise pipeline.UsageProblem(f"no node named {host!r} in {spec}")
    target = _state_dir(loaded, state_dir)
    if sim_cluster.read_manifest(target) is None:
        raise sim_cluster.SimError(f"no simulated cluster under {target} (run provision sim up {spec} first)")
    sim_namespace.replace_process(target, host, list(command) or [os.environ.get("SHELL") or "/bin/sh"])


@sim.command(name="faults")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@json_option
def sim_faults(spec: Path, as_json: bool) -> int:
    """The spec's injected faults, and the stage and check expected to catch each."""
    loaded = load_spec(spec)
    rows = sim_cluster.describe_faults(loaded)
    if as_json:
        _emit_json({"cluster": loaded.spec.cluster.name, "faults": rows})
        return EXIT_OK
    table = Table(title=f"{loaded.spec.cluster.name}: {len(rows)} injected fault(s)", title_justify="left")
    for column in ("kind", "target", "stage", "check", "expected"):
        table.add_column(column, overflow="fold")
    for row in rows:
        where = "/".join(part for part in (row["node"], row["target"]) if part)
        table.add_row(row["kind"], where, row["stage"], row["check"], row["expected"])
    out.print(table)
    return EXIT_OK


def _ensure(directory: Path) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


@cli.group()
def topology() -> None:
    """The InfiniBand fabric: design rules and (as they land) audits."""


@topology.command(name="check")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@json_option
def topology_check(spec: Path, as_json: bool) -> int:
    """Run the fat-tree design rules on the fabric SPEC designs (exit 1 if any rule breaks)."""
    loaded = load_spec(spec)
    try:
        design = design_fabric(loaded)
    except ValueError as error:
        raise pipeline.UsageProblem(str(error)) from None
    results = rules.check_all(design, oversubscription=loaded.spec.fabric.oversubscription_ratio,
                              designed_uplinks=loaded.fabric.leaf_uplinks if loaded.fabric else None)
    bisection, needed = rules.bisection_gbps(design)
    broken = sum(len(violations) for violations in results.values())
    if as_json:
        _emit_json({"cluster": loaded.spec.cluster.name, "switches": loaded.fabric.switches if loaded.fabric else 0,
                    "cables": design.graph.number_of_edges(), "bisection_gbps": bisection,
                    "full_bisection_gbps": needed,
                    "rules": {name: [v.as_dict() for v in violations] for name, violations in results.items()}})
        return EXIT_PROBLEMS if broken else EXIT_OK
    table = Table(title=f"{loaded.spec.cluster.name}: {design.graph.number_of_edges():,} cables, bisection "
                        f"{bisection / 1000:g} of {needed / 1000:g} Tb/s", title_justify="left")
    for column in ("rule", "result", "first findings"):
        table.add_column(column, overflow="fold")
    for name, violations in results.items():
        table.add_row(name, "ok" if not violations else f"{len(violations)} violation(s)",
                      "\n".join(v.message for v in violations[:3]))
    out.print(table)
    return EXIT_PROBLEMS if broken else EXIT_OK


@topology.command(name="audit")
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--observed", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="ibnetdiscover output of the as-built fabric (default: the simulated cluster's).")
@click.option("--design", "plans", multiple=True, type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="An explicit cabling plan (UFM .ndt or CSV) instead of a spec; may be repeated.")
@click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="An earlier dump: report what changed since, and re-check only the cables the change touched.")
@click.option("--guid-map", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Node GUID -> name (ibnetdiscover's --node-name-map format, or H-<guid> <name>), for HCAs whose "
                   "node description is still the vendor's: name each '<host> <hca>'.")
@state_dir_option
@json_option
def topology_audit(spec: Path | None, observed: Path | None, plans: tuple[Path, ...], baseline: Path | None,
                   guid_map: Path | None, state_dir: Path | None, as_json: bool) -> int:
    """Compare the as-built fabric with the design, cable by cable (exit 1 if anything is found)."""
    if (spec is None) == (not plans):
        raise click.UsageError("give either SPEC or --design PLAN (one or more), not both")
    loaded = load_spec(spec) if spec is not None else None
    if observed is None:
        if loaded is None or loaded.spec.simulation is None:
            raise click.UsageError("--observed DUMP is required (only a simulated cluster has a dump of its own)")
        observed = sim_cluster.sim_dir(_state_dir(loaded, state_dir)) / "fabric" / "ibnetdiscover.txt"
        if not observed.exists():
            raise pipeline.UsageProblem(f"no simulated fabric dump at {observed}: run `provision sim up` first")
    names = _read_guid_map(guid_map) if guid_map is not None else {}
    discovery = _read_dump(observed, names)
    shared = Counter(node.description for node in discovery.nodes.values() if node.kind == "ca").most_common(1)
    if shared and shared[0][1] > 1:  # rdma-ndd never ran: every HCA says what it is, not whose it is
        err.print(f"provision: {shared[0][1]} HCAs share the node description {shared[0][0]!r}; name them with "
                  "--guid-map (0x<guid> \"<host> <hca>\" per line)", markup=False)
    planned = []
    for plan in plans:
        try:
            planned += cabling.parse_plan(plan.read_text(errors="replace"))
        except cabling.PlanError as error:
            raise pipeline.UsageProblem(f"{plan}: {error}") from None
    if baseline is not None:
        return _print_change(audit_change(loaded, planned, _read_dump(baseline, names), discovery), baseline, observed,
                             as_json)
    report = audit_against_spec(loaded, discovery) if loaded is not None else audit_against_plans(planned, discovery)
    counts = {category: sum(1 for f in report.findings if f.category == category)
              for category in ("miswired", "missing", "port_down", "degraded", "extra")}
    if as_json:
        _emit_json({"observed": str(observed), "counts": counts, "cables": [f.as_dict() for f in report.findings],
                    "rules": {name: [v.as_dict() for v in found] for name, found in report.violations.items()},
                    "unparsed_lines": len(discovery.skipped)})
        return EXIT_PROBLEMS if report.problems else EXIT_OK
    if not report.problems:
        out.print(f"No problems: every designed cable is in place ({observed}).", markup=False)
        return EXIT_OK
    table = Table(title=f"cabling audit of {observed}: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n),
                  title_justify="left")
    for column in ("problem", "designed", "found", "swap partner", "rules broken", "detail"):
        table.add_column(column, overflow="fold")
    for finding in report.findings:
        table.add_row(finding.category, cabling_label(finding.expected), cabling_label(finding.actual),
                      cabling_label(finding.swap_partner), ", ".join(finding.rules), finding.detail)
    out.print(table)
    for name, found in report.violations.items():
        if found:
            out.print(f"[bold]{name}[/]: {len(found)} violation(s); first: {found[0].message}")
    return EXIT_PROBLEMS


@topology.command(name="slurm")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write here, not stdout.")
def topology_slurm(spec: Path, output: Path | None) -> int:
    """Slurm topology.conf (tree plugin) for the fabric SPEC designs."""
    loaded = load_spec(spec)
    try:
        design = design_fabric(loaded)
    except ValueError as error:
        raise pipeline.UsageProblem(str(error)) from None
    text = export.slurm_topology(design, grouping=loaded.fabric.spine_grouping if loaded.fabric else "none",
                                 title=loaded.spec.cluster.name)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        out.print(f"wrote {output}", markup=False)
    return EXIT_OK


@topology.command(name="draw")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--observed", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Mark the problems an audit of this dump finds (default: the simulated fabric's, if any).")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=Path("fabric.svg"),
              show_default=True)
@state_dir_option
def topology_draw(spec: Path, observed: Path | None, output: Path, state_dir: Path | None) -> int:
    """An SVG of the fabric, summarised per scalable unit, problem cables in red."""
    loaded = load_spec(spec)
    try:
        design = design_fabric(loaded)
    except ValueError as error:
        raise pipeline.UsageProblem(str(error)) from None
    if observed is None and loaded.spec.simulation is not None:
        candidate = sim_cluster.sim_dir(_state_dir(loaded, state_dir)) / "fabric" / "ibnetdiscover.txt"
        observed = candidate if candidate.exists() else None
    boxes: dict[str, int] = {}
    bundles: dict[tuple[str, str], int] = {}
    title = f"{loaded.spec.cluster.name}: {design.graph.number_of_edges():,} cables (design)"
    if observed is not None:
        report = audit_against_spec(loaded, _read_dump(observed), design)
        boxes, bundles = problem_places(design, report.findings)
        title = f"{loaded.spec.cluster.name}: {len(report.findings)} problem cable(s) in {observed.name}"
    output.write_text(export.draw_svg(design, title=title, problems=boxes, bundle_problems=bundles))
    out.print(f"wrote {output}", markup=False)
    return EXIT_OK


def _files_option(*names: str, help_text: str):
    return click.option(*names, multiple=True, type=click.Path(path_type=Path, dir_okay=False, exists=True),
                        help=help_text)


@topology.command(name="flaps")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@_files_option("--events", help_text="UFM event.log (repeatable; default: the simulated fabric's).")
@_files_option("--syslog", "syslogs", help_text="A host syslog with IPoIB carrier lines (repeatable).")
@click.option("--counters", "counter_dirs", multiple=True,
              type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="A perfquery snapshot directory (two or more; default: the simulated fabric's).")
@_files_option("--results", help_text="End-to-end test results (JSON) for tomography (repeatable).")
@click.option("--observed", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="ibnetdiscover dump: resolves GUID-named counter files and fills GUIDs into the disable list.")
@click.option("--year", type=click.IntRange(1970, 9999), help="The year a syslog ends in (syslog omits it).")
@click.option("--actions", "actions_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write the port-disable list (UFM REST and ibportstate), tickets and re-check routes here.")
@click.option("--burnin-results", "last_burnin", is_flag=True,
              help="Add the pair-test results of the latest burn-in (the default for a simulated cluster).")
@click.option("--execute", is_flag=True,
              help="Also disable the listed switch ports now (ibportstate from --via), and read each one back.")
@click.option("--via", metavar="HOST", help="The host whose HCA sends the disables (default: the spec's first node).")
@state_dir_option
@json_option
def topology_flaps(spec: Path, events: tuple[Path, ...], syslogs: tuple[Path, ...], counter_dirs: tuple[Path, ...],
                   results: tuple[Path, ...], observed: Path | None, year: int | None, actions_dir: Path | None,
                   last_burnin: bool, execute: bool, via: str | None, state_dir: Path | None, as_json: bool) -> int:
    """Name the flapping, erroring, down and degraded cables from events, counters and test results (exit 1 if any)."""
    loaded = load_spec(spec)
    if execute and actions_dir is None:
        raise click.UsageError("--execute runs the disable list that --actions DIR writes: give --actions too")
    if via is not None and via not in loaded.node_names:
        raise pipeline.UsageProblem(f"--via {via}: no node named {via!r} in {spec}")
    try:
        fabric = design_fabric(loaded)
    except ValueError as error:
        raise pipeline.UsageProblem(str(error)) from None
    directory = _state_dir(loaded, state_dir)
    if not (events or syslogs or counter_dirs or results) and loaded.spec.simulation is not None:
        simulated = sim_cluster.sim_dir(directory) / "fabric"
        if not (simulated / "ufm" / "event.log").exists():
            raise pipeline.UsageProblem(f"no simulated fabric history under {simulated}: run `provision sim up` first")
        events = (simulated / "ufm" / "event.log",)
        counter_dirs = tuple(sorted((simulated / "counters").iterdir()))
        observed = observed or simulated / "ibnetdiscover.txt"
        last_burnin = True
    if last_burnin and not results:
        latest = pairs_stage.latest_results(directory)
        if latest is None and not events:
            raise pipeline.UsageProblem(f"no burn-in under {directory} has run the pairs stage yet")
        results = (latest,) if latest else ()
    if not (events or syslogs or counter_dirs or results):
        raise click.UsageError("give at least one of --events, --syslog, --counters, --results")
    inputs = linkhealth_glue.Inputs(list(events), list(syslogs), list(counter_dirs), list(results), observed, year)
    store = StateStore.open_readonly(directory)
    try:
        report = linkhealth_glue.analyse(loaded, fabric, inputs, store)
    except (linkhealth_glue.EvidenceError, ibnetdiscover.DumpError) as error:
        raise pipeline.UsageProblem(str(error)) from None
    finally:
        if store is not None:
            store.close()
    suspects = [linkhealth_glue.suspect_dict(item, fabric, report.history[linkhealth_glue.cable_key(item.cable)])
                for item in report.suspects]
    written: list[Path] = []
    executed: list[dict[str, Any]] = []
    if actions_dir is not None:
        written = linkhealth_glue.write_actions(actions_dir, report, fabric)
        if execute:
            executed = _disable_ports(loaded, directory, linkhealth_glue.port_disables(report, fabric), via)
    payload = {"suspects": suspects, "ingestion": report.ingestion,
               "storms": [{"start": storm.start, "end": storm.end, "events": storm.events, "cables": storm.cables}
                          for storm in report.storms],
               "explained_by_reboots": report.explained_by_reboots,
               "unmatched": [{"source": u.source, "where": u.where, "text": u.text} for u in report.unmatched[:50]],
               "unmatched_total": len(report.unmatched), "tomography": report.tomography,
               "actions": [str(path) for path in written], "executed": executed}
    if as_json:
        _emit_json(payload)
        return EXIT_PROBLEMS if suspects else EXIT_OK
    for source, summary in report.ingestion.items():
        if isinstance(summary, dict) and summary.get("malformed"):
            out.print(f"{source}: {summary['malformed']} line(s) not understood, e.g. "
                      f"{summary['malformed_samples'][0]!r}", markup=False)
    if report.storms:
        out.print(f"suppressed {len(report.storms)} reboot storm(s) of "
                  f"{sum(storm.events for storm in report.storms)} event(s)", markup=False)
    if report.unmatched:
        out.print(f"{len(report.unmatched)} observation(s) name ports not in the fabric model, e.g. "
                  f"{report.unmatched[0].where}", markup=False)
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
    for path in written[:2]:
        out.print(f"wrote {path}", markup=False)
    for row in executed:
        out.print(f"{row['switch']}/{row['port']} ({row['cable']}): {row['result']}: {row['detail']}", markup=False)
    return EXIT_PROBLEMS


@topology.command(name="repaired")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("port", metavar="SWITCH/PORT")
@click.option("--action", required=True, type=click.Choice(linkhealth_glue.LADDER),
              help="What was done to the cable (a rung of the repair ladder).")
@click.option("--note", default="", help="Free text kept with the record (ticket number, technician).")
@state_dir_option
def topology_repaired(spec: Path, port: str, action: str, note: str, state_dir: Path | None) -> int:
    """Record a repair of the cable at SWITCH/PORT, so later flaps count against it and the ladder moves on."""
    loaded = load_spec(spec)
    try:
        fabric = design_fabric(loaded)
    except ValueError as error:
        raise pipeline.UsageProblem(str(error)) from None
    cable = _cable_at_port(fabric, port)
    directory = _state_dir(loaded, state_dir)
    with ClusterLock(directory, "repaired"), StateStore(directory) as store:
        run = RunRecord(directory / "runs", "repaired", sys.argv[1:])
        _Session.run = run
        key = linkhealth_glue.cable_key(cable)
        run.note("cable_repair", {"cable": key, "action": action, "note": note})
        store.start_run(run.id, "repaired", run.path, spec.resolve(), loaded.sha256)
        store.record_cable(key, "repair", {"action": action, "note": note}, run_id=run.id)
        store.finish_run(run.id, "succeeded", EXIT_OK)
        run.finish("succeeded", EXIT_OK)
    out.print(f"recorded: {action} of {key}", markup=False)
    return EXIT_OK


@topology.command(name="recheck")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("ports", nargs=-1, required=True, metavar="SWITCH/PORT...")
@state_dir_option
@json_option
def topology_recheck(spec: Path, ports: tuple[str, ...], state_dir: Path | None, as_json: bool) -> int:
    """After a repair, re-test only the routes through the cables at SWITCH/PORT (exit 1 if any is still bad)."""
    from provision.burnin.launch import run_seed
    from provision.burnin.recheck import recheck_cables

    loaded = load_spec(spec)
    try:
        fabric = design_fabric(loaded)
    except ValueError as error:
        raise pipeline.UsageProblem(str(error)) from None
    cables = [_cable_at_port(fabric, port) for port in ports]
    directory = _state_dir(loaded, state_dir)
    in_service = (NodeState.PROVISIONED, NodeState.BURNING_IN, NodeState.ADMITTED)
    with ClusterLock(directory, "recheck"), StateStore(directory) as store:
        states = {record.name: record.state for record in store.nodes()}
        nodes = [node for node in loaded.nodes if states.get(node.name) in in_service]
        if len(nodes) < 2:
            raise pipeline.UsageProblem(f"{len(nodes)} node(s) in service under {directory}: a recheck needs two "
                                        "provisioned hosts whose routes cross the cable")
        run = RunRecord(directory / "runs", "recheck", sys.argv[1:])
        _Session.run = run
        store.start_run(run.id, "recheck", run.path, spec.resolve(), loaded.sha256)
        rechecks = recheck_cables(loaded, fabric, nodes, directory, cables, seed=run_seed(run.id))
        rows = [recheck.as_dict(linkhealth_glue.cable_key(recheck.cable)) for recheck in rechecks]
        for row in rows:
            store.record_cable(row["cable"], "recheck", {"verdict": row["verdict"], "evidence": row["evidence"]},
                               run_id=run.id)
        run.note("recheck", rows)
        code = EXIT_OK if all(row["verdict"] == "healthy" for row in rows) else EXIT_PROBLEMS
        status = "succeeded" if code == EXIT_OK else "problems-found"
        store.finish_run(run.id, status, code)
        run.finish(status, code)
    if as_json:
        _emit_json({"run_dir": str(run.path), "cables": rows})
        return code
    for row in rows:
        out.print(f"{row['cable']}: {row['verdict']}", markup=False)
        for line in row["evidence"]:
            out.print(f"    {line}", markup=False)
    return code


def _disable_ports(loaded: LoadedSpec, directory: Path, disables: list[linkhealth_glue.PortDisable],
                   via: str | None) -> list[dict[str, Any]]:
    """``--execute``: a mutating run, so it takes the cluster lock and leaves a run record of what it ran."""
    node = next(node for node in loaded.nodes if node.name == (via or loaded.node_names[0]))
    with ClusterLock(_ensure(directory), "disable ports"):
        run = RunRecord(directory / "runs", "disable-ports", sys.argv[1:])
        _Session.run = run
        session = open_session(loaded, node, directory)
        try:
            rows = linkhealth_glue.execute_disables(disables, session, timeout_s=60.0)
        finally:
            session.close()
        run.note("disable-ports", {"via": node.name, "ports": rows})
        failed = any(row["result"] != "disabled" for row in rows)
        run.finish("problems-found" if failed else "succeeded", EXIT_PROBLEMS)
    return rows


def _cable_at_port(fabric: Fabric, port: str) -> Cable:
    """The designed cable plugged into SWITCH/PORT, or a usage error naming the argument."""
    node, _, number = port.rpartition("/")
    cable = fabric.cable_at((node, int(number))) if number.isdigit() else None
    if cable is None:
        raise pipeline.UsageProblem(f"{port}: no such cabled port in the fabric design (write SWITCH/PORT)")
    return cable


def _read_dump(path: Path, names: dict[str, str] | None = None) -> ibnetdiscover.Discovery:
    try:
        discovery = ibnetdiscover.parse(path.read_text(errors="replace"))
    except ibnetdiscover.DumpError as error:
        raise pipeline.UsageProblem(f"{path}: {error}") from None
    if names:
        ibnetdiscover.apply_names(discovery, names)
    return discovery


def _read_guid_map(path: Path) -> dict[str, str]:
    names = ibnetdiscover.parse_guid_map(path.read_text(errors="replace"))
    if not names:
        raise pipeline.UsageProblem(f"{path}: no GUID map entries (expected lines like 0x<guid> \"<host> <hca>\" "
                                    "or H-<guid> <host>)")
    return names


def _print_change(change, baseline: Path, observed: Path, as_json: bool) -> int:
    groups = {"fixed": change.fixed, "still broken": change.still_broken, "newly broken": change.newly_broken,
              "untouched": change.untouched}
    remaining = len(change.still_broken) + len(change.newly_broken) + len(change.untouched)
    if as_json:
        _emit_json({"baseline": str(baseline), "observed": str(observed),
                    "cables_added": [cabling_label((link.a, link.b)) for link in change.added],
                    "cables_removed": [cabling_label((link.a, link.b)) for link in change.removed],
                    **{name.replace(" ", "_"): [f.as_dict() for f in found] for name, found in groups.items()}})
        return EXIT_PROBLEMS if remaining else EXIT_OK
    out.print(f"since {baseline}: {len(change.added)} cable(s) appeared, {len(change.removed)} disappeared",
              markup=False)
    table = Table(title="re-checked where the change touched", title_justify="left")
    for column in ("status", "problem", "designed", "found", "detail"):
        table.add_column(column, overflow="fold")
    for name in ("fixed", "still broken", "newly broken"):
        for finding in groups[name]:
            table.add_row(name, finding.category, cabling_label(finding.expected), cabling_label(finding.actual),
                          finding.detail)
    out.print(table)
    if change.untouched:
        out.print(f"{len(change.untouched)} other problem(s) the change did not touch remain (not re-checked)",
                  markup=False)
    return EXIT_PROBLEMS if remaining else EXIT_OK


def cabling_label(pair: tuple[tuple[str, str], tuple[str, str]] | None) -> str:
    """``sim01 mlx5_4 - leaf-su01-r2/3``: an HCA end by its description, a switch end as switch/port."""
    if pair is None:
        return ""
    return " - ".join(port if " " in port else f"{device}/{port}" for device, port in pair)


@cli.group(name="hostlist")
def hostlist_group() -> None:
    """Expand and compress Slurm hostlist expressions."""


@hostlist_group.command(name="expand")
@click.argument("expression")
def hostlist_expand(expression: str) -> int:
    """Print one host per line (like `scontrol show hostnames`)."""
    try:
        names = hostlist.expand(expression)
    except hostlist.HostlistError as error:
        raise click.UsageError(str(error)) from None
    sys.stdout.write("".join(f"{name}\n" for name in names))
    return EXIT_OK


@hostlist_group.command(name="compress")
@click.argument("names", nargs=-1, required=True)
def hostlist_compress(names: tuple[str, ...]) -> int:
    """Print the compressed expression (like `scontrol show hostlist`)."""
    flat = [name for argument in names for name in argument.replace(",", " ").split()]
    sys.stdout.write(hostlist.compress(flat) + "\n")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point: map every outcome to the documented exit codes."""
    _Session.run = None
    try:
        code = cli.main(args=argv, prog_name="provision", standalone_mode=False)
        return code if isinstance(code, int) else EXIT_OK
    except SpecError as error:
        for issue in error.issues:
            err.print(str(issue), markup=False)
        return EXIT_USAGE
    except (pipeline.UsageProblem, LockHeld, StoreError, sim_cluster.SimError, IdentityError,
            SecretUnavailable, TransitionError) as error:
        err.print(f"provision: {error}", markup=False)
        return EXIT_USAGE
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as error:
        error.show()
        return EXIT_USAGE
    except (click.exceptions.Abort, KeyboardInterrupt):
        where = f" (run record: {_Session.run.path})" if _Session.run else ""
        err.print(f"provision: interrupted{where}", markup=False)
        return 130
    except Exception as error:  # the contract: never a bare traceback, always exit 3
        return _internal_error(error)


def _internal_error(error: Exception) -> int:
    details = traceback.format_exc()
    run = _Session.run
    if run is not None:
        (run.path / "error.txt").write_text(details)
        err.print(f"provision: internal error: {error!r}; details in {run.path / 'error.txt'}", markup=False)
    else:
        err.print(f"provision: internal error: {error!r}", markup=False)
        err.print(details, markup=False)
    return EXIT_INTERNAL


def entry() -> None:
    sys.exit(main())
