"""``provision topology``: the fabric's design rules, Slurm topology, a drawing; the audit and the cable
commands register themselves on this group from their own modules."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from provision.cli.common import (
    emit_json,
    existing_store,
    json_option,
    out,
    spec_argument,
    state_dir_of,
    state_dir_option,
)
from provision.errors import EXIT_OK, EXIT_PROBLEMS, UsageProblem
from provision.fleet import domains
from provision.network.sources import design_fabric, problem_places, read_observed, simulated_dump
from provision.network.view import view_of_spec
from provision.spec import LoadedSpec, load_fabric_spec, load_spec
from topology import export, rules


@click.group()
def topology() -> None:
    """The InfiniBand fabric: design rules, audits, flapping cables and their repair."""


@topology.command(name="check")
@spec_argument
@json_option
def topology_check(spec: Path, as_json: bool) -> int:
    """Run the fat-tree design rules on the fabric SPEC designs (exit 1 if any rule breaks)."""
    loaded = load_spec(spec)
    design = design_fabric(loaded)
    results = rules.check_all(design, oversubscription=loaded.spec.fabric.oversubscription_ratio,
                              designed_uplinks=loaded.fabric.leaf_uplinks if loaded.fabric else None)
    bisection, needed = rules.bisection_gbps(design)
    broken = sum(len(violations) for violations in results.values())
    if as_json:
        emit_json({"cluster": loaded.spec.cluster.name, "switches": loaded.fabric.switches if loaded.fabric else 0,
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


@topology.command(name="slurm")
@spec_argument
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write here, not stdout.")
@click.option("--plugin", type=click.Choice(["block", "tree"]), default=None,
              help="With nvlink_domains: topology/block (Slurm 23.11+, the default) or topology/tree (older Slurm).")
@click.option("--admitted", is_flag=True,
              help="With nvlink_domains: only each domain's admitted trays (from the state store): the size that "
                   "remains after a failed tray.")
@state_dir_option
def topology_slurm(spec: Path, output: Path | None, plugin: str | None, admitted: bool,
                   state_dir: Path | None) -> int:
    """Slurm topology.conf for SPEC: the NVLink domains where it has them (a job placed inside one domain), else
    the InfiniBand fabric it designs (tree plugin)."""
    loaded = load_spec(spec)
    if loaded.spec.nvlink_domains:
        domains, notes = _domain_trays(loaded, state_dir, admitted)
        text = export.slurm_domains(domains, plugin=plugin or "block", title=loaded.spec.cluster.name, notes=notes)
    elif plugin == "block" or admitted:
        raise UsageProblem("--plugin block and --admitted place jobs in NVLink domains: this spec has no "
                           "nvlink_domains (its topology is the InfiniBand fabric's: topology/tree)")
    else:
        design = design_fabric(loaded)
        text = export.slurm_topology(design, grouping=loaded.fabric.spine_grouping if loaded.fabric else "none",
                                     title=loaded.spec.cluster.name)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        out.print(f"wrote {output}", markup=False)
    return EXIT_OK


def _domain_trays(loaded: LoadedSpec, state_dir: Path | None,
                  admitted: bool) -> tuple[list[tuple[str, list[str]]], dict[str, str]]:
    """Each domain's trays jobs may use (``--admitted``: by its policy, from the store) and a note each."""
    states = None
    if admitted:
        with existing_store(state_dir_of(loaded, state_dir)) as store:
            states = {record.name: record.state.value for record in store.nodes()}
    found = domains.standings(loaded, states)
    return [(one.name, list(one.usable)) for one in found], {one.name: one.note for one in found}


@topology.command(name="draw")
@spec_argument
@click.option("--observed", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Mark the problems an audit of this dump finds (default: the simulated fabric's, if any).")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=Path("fabric.svg"),
              show_default=True)
@state_dir_option
def topology_draw(spec: Path, observed: Path | None, output: Path, state_dir: Path | None) -> int:
    """An SVG of the fabric, summarised per scalable unit, problem cables in red.

    SPEC may be a fabric-only spec (its cabling file is then the fabric, drawn switch by switch)."""
    view = view_of_spec(load_fabric_spec(spec))
    design = view.fabric
    loaded = view.cluster_spec
    if observed is None and loaded is not None:
        observed = simulated_dump(loaded, state_dir_of(loaded, state_dir), required=False)
    boxes: dict[str, int] = {}
    bundles: dict[tuple[str, str], int] = {}
    kind = "design" if view.designed else "plan"
    title = f"{view.name}: {design.graph.number_of_edges():,} cables ({kind})"
    if observed is not None:
        discovery, reading = read_observed(observed)
        if reading.partial:
            out.print(f"not all of the dump was read (the drawing shows what was): {reading.line()}", markup=False,
                      soft_wrap=True)
        report = view.audit(discovery)
        boxes, bundles = problem_places(design, report.findings)
        title = f"{view.name}: {len(report.findings)} problem cable(s) in {observed.name}"
    output.write_text(export.draw_svg(design, title=title, problems=boxes, bundle_problems=bundles))
    out.print(f"wrote {output}", markup=False)
    return EXIT_OK
