"""``provision topology audit``: the as-built fabric against the design, cable by cable."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from provision.cli.common import emit_json, err, json_option, out, state_dir_of, state_dir_option
from provision.cli.topology import topology
from provision.errors import EXIT_OK, EXIT_PROBLEMS
from provision.evidence import Reading
from provision.network.sources import (
    AuditReport,
    Plans,
    audit_change,
    cabling_label,
    read_guid_map,
    read_observed,
    shared_description,
    simulated_dump,
)
from provision.network.view import view_of_plans, view_of_spec
from provision.spec import load_fabric_spec
from topology.audit import ChangeReport
from topology.rules import RULES

CATEGORIES = ("miswired", "missing", "port_down", "degraded", "extra")


@topology.command(name="audit")
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--observed", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="ibnetdiscover output or ibdiagnet2.db_csv of the as-built fabric (default: the simulated "
                   "cluster's).")
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
    view = view_of_spec(load_fabric_spec(spec)) if spec is not None else view_of_plans(plans)
    loaded = view.cluster_spec
    if observed is None:
        if loaded is None:
            raise click.UsageError("--observed DUMP is required (only a simulated cluster has a dump of its own)")
        observed = simulated_dump(loaded, state_dir_of(loaded, state_dir))
        assert observed is not None
    names = read_guid_map(guid_map) if guid_map is not None else {}
    discovery, reading = read_observed(observed, names)
    if (shared := shared_description(discovery)) is not None:  # rdma-ndd never ran
        err.print(f"provision: {shared[1]} HCAs share the node description {shared[0]!r}; name them with "
                  "--guid-map (0x<guid> \"<host> <hca>\" per line)", markup=False)
    planned = view.plans or Plans([], [])
    if not as_json:
        for line in planned.unread:
            err.print(f"provision: row not read, the rest audited: {line}", markup=False)
    if baseline is not None:
        before, was_read = read_observed(baseline, names)
        partial = [read for read in (reading, was_read) if read.partial]
        if not as_json:
            for read in partial:
                out.print(f"not all of the dumps was read: {read.line()}", markup=False, soft_wrap=True)
        code = _print_change(audit_change(loaded if view.designed else None, planned.cables, before, discovery),
                             baseline, observed, as_json, partial)
        return EXIT_PROBLEMS if partial else code
    return _render_audit(view.audit(discovery), view.designed, planned, observed, reading, len(discovery.skipped),
                         as_json)


def _render_audit(report: AuditReport, designed: bool, planned: Plans, observed: Path, reading: Reading,
                  unparsed: int, as_json: bool) -> int:
    """The audit's verdict, as JSON or as a table, and its exit code: partly read is not 'no problems'."""
    not_applicable = [] if designed else list(RULES)
    attributes = planned.attributes()
    counts = {category: sum(1 for f in report.findings if f.category == category) for category in CATEGORIES}
    if as_json:
        emit_json({"observed": str(observed), "counts": counts,
                   "cables": [{**f.as_dict(), "attributes": attributes.get(frozenset(f.expected), {})
                               if f.expected else {}} for f in report.findings],
                   "rules": {name: [v.as_dict() for v in found] for name, found in report.violations.items()},
                   "rules_not_applicable": not_applicable,
                   "unparsed_lines": unparsed, "unread_plan_rows": planned.unread,
                   "readings": [reading.as_dict()]})
        return EXIT_PROBLEMS if report.problems or reading.partial else EXIT_OK
    if not_applicable:
        out.print(f"design rules not applicable: {', '.join(not_applicable)} (the fabric is a cabling plan, not a "
                  "fat tree designed from parameters: there is no intent to check them against)", markup=False)
    if not report.problems and reading.partial:  # the verdict covers what was read, and says what was not
        out.print(f"Nothing wrong in what could be read of {observed}, but not all of it could: {reading.line()}. "
                  "The cables those lines describe are not known to be in place.", markup=False, soft_wrap=True)
        return EXIT_PROBLEMS
    if not report.problems:
        out.print(f"No problems: every designed cable is in place ({observed}).", markup=False)
        return EXIT_OK
    if reading.partial:
        out.print(f"not all of the dump was read: {reading.line()}", markup=False, soft_wrap=True)
    table = Table(title=f"cabling audit of {observed}: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n),
                  title_justify="left")
    for column in ("problem", "designed", "found", "swap partner", "rules broken", "detail"):
        table.add_column(column, overflow="fold")
    for finding in report.findings:
        where = attributes.get(frozenset(finding.expected), {}) if finding.expected else {}
        detail = "; ".join([finding.detail, *(f"{key}: {value}" for key, value in where.items())]).strip("; ")
        table.add_row(finding.category, cabling_label(finding.expected), cabling_label(finding.actual),
                      cabling_label(finding.swap_partner), ", ".join(finding.rules), detail)
    out.print(table)
    for name, found in report.violations.items():
        if found:
            out.print(f"[bold]{name}[/]: {len(found)} violation(s); first: {found[0].message}")
    return EXIT_PROBLEMS


def _print_change(change: ChangeReport, baseline: Path, observed: Path, as_json: bool,
                  partial: list[Reading]) -> int:
    groups = {"fixed": change.fixed, "still broken": change.still_broken, "newly broken": change.newly_broken,
              "untouched": change.untouched}
    remaining = len(change.still_broken) + len(change.newly_broken) + len(change.untouched)
    if as_json:
        emit_json({"baseline": str(baseline), "observed": str(observed),
                   "readings": [reading.as_dict() for reading in partial],
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
