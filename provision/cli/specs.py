"""``provision validate``: every problem of every spec at once, located."""

from __future__ import annotations

from pathlib import Path

import click

from provision.cli.common import emit_json, err, json_option, out
from provision.errors import EXIT_OK, EXIT_USAGE
from provision.spec import SpecError, load_spec
from provision.spec.summary import summarize


@click.command()
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
        summary = summarize(loaded)
        results.append({"file": str(file), "ok": True, **summary})
        if not as_json:
            fabric = summary["fabric"]
            shape = (f"{fabric['tiers']}-tier fabric: {fabric['leaves']} leaves, {fabric['spines']} spines, "
                     f"{fabric['cores']} cores, {fabric['cables']:,} cables" if fabric else "fabric from cabling file")
            domains = summary["nvlink_domains"]
            shown = (f", {len(domains)} NVLink domain(s) of " + ", ".join(f"{d['trays']} trays ({d['size']} GPUs)"
                                                                       for d in domains)) if domains else ""
            out.print(f"ok: {file}: cluster {summary['cluster']}, {summary['nodes']} nodes "
                      f"({summary['gpus']:,} GPUs), {shape}{shown}", markup=False)
    if as_json:
        emit_json({"ok": not failed, "files": results})
    return EXIT_USAGE if failed else EXIT_OK
