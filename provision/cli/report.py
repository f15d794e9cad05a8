"""``provision report``: the acceptance report of a burn-in as one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import click

from provision.cli.common import emit_json, json_option, out, spec_argument, state_dir_of, state_dir_option
from provision.errors import EXIT_OK, UsageProblem
from provision.report import write_report
from provision.spec import load_spec


@click.command(name="report")
@spec_argument
@click.option("--run", "run_id", metavar="ID", help="The run to report on (default: the latest burn-in).")
@click.option("--campaign", metavar="ID", help="Every run of this burn-in campaign (a resumed burn-in).")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
              help="Where to write the HTML (default: <state dir>/reports/<run or campaign>/report.html); the "
                   "figures are written beside it.")
@state_dir_option
@json_option
def report_command(spec: Path, run_id: str | None, campaign: str | None, output: Path | None,
                   state_dir: Path | None, as_json: bool) -> int:
    """Write the acceptance report: verdicts, a card per quarantined node, plots, the fabric, sign-off."""
    if run_id and campaign:
        raise UsageProblem("--run and --campaign choose different things to report on: give one")
    loaded = load_spec(spec)
    written = write_report(loaded, state_dir_of(loaded, state_dir), run_id=run_id, campaign=campaign,
                           output=output)
    if as_json:
        emit_json({"report": str(written.html), "figures": [str(path) for path in written.figures],
                   "admitted": written.admitted, "quarantined": written.quarantined})
        return EXIT_OK
    out.print(f"report: {written.html} ({written.admitted} admitted, {written.quarantined} quarantined; "
              f"{len(written.figures)} figure file(s) beside it)", markup=False)
    return EXIT_OK
