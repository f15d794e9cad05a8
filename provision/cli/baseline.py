"""``provision baseline show|export|import``: the fleet's baseline per hardware profile, and the file it travels in."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table

from provision.cli.common import (
    argv,
    emit_json,
    existing_store,
    json_option,
    out,
    spec_option,
    spec_or_state_dir,
    state_dir_option,
)
from provision.errors import EXIT_OK
from provision.fleet import baselines

profile_option = click.option("--profile", help="Only this hardware profile.")


@click.group(name="baseline")
def baseline_group() -> None:
    """What the same hardware measured before: every admitted node's figures, per hardware profile."""


@baseline_group.command(name="show")
@spec_option
@profile_option
@state_dir_option
@json_option
def show(spec: Path | None, profile: str | None, state_dir: Path | None, as_json: bool) -> int:
    """Each profile's figures: samples (n), median, robust spread (sd: 1.4826 x MAD), 5th and 95th percentiles,
    and how many campaigns (runs) they came from."""
    _loaded, directory = spec_or_state_dir(spec, state_dir)
    with existing_store(directory) as store:
        found = baselines.profiles(store, profile)
    if as_json:
        emit_json({"profiles": [entry.as_dict() for entry in found]})
        return EXIT_OK
    if not found:
        out.print("no baseline yet: a campaign's admitted nodes add theirs when it ends, or "
                  "`provision baseline import FILE`", markup=False)
        return EXIT_OK
    for entry in found:
        table = Table(title=f"{entry.profile} ({entry.hardware})", title_justify="left", box=box.SIMPLE,
                      pad_edge=False)
        for column in ("figure", "n", "median", "sd", "p05", "p95", "runs"):
            table.add_column(column, justify="left" if column == "figure" else "right", no_wrap=True)
        for name, figure in entry.figures.items():
            table.add_row(name, str(figure["count"]), f"{figure['median']:.4g}", f"{figure['robust_sd']:.2g}",
                          f"{figure['p05']:.4g}", f"{figure['p95']:.4g}", str(len(figure["campaigns"])))
        out.print(table)
    return EXIT_OK


@baseline_group.command(name="export")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@spec_option
@profile_option
@state_dir_option
def export(file: Path, spec: Path | None, profile: str | None, state_dir: Path | None) -> int:
    """Write the baseline's samples to FILE (JSON, format in docs/baselines.md), for another cluster to import."""
    loaded, directory = spec_or_state_dir(spec, state_dir)
    cluster = loaded.spec.cluster.name if loaded is not None else directory.name  # .provision/<cluster>
    with existing_store(directory) as store:
        count = baselines.export(store, file, cluster=cluster, profile=profile)
    out.print(f"wrote {count} samples to {file}", markup=False)
    return EXIT_OK


@baseline_group.command(name="import")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@spec_option
@state_dir_option
@json_option
def import_(file: Path, spec: Path | None, state_dir: Path | None, as_json: bool) -> int:
    """Add FILE's samples to this cluster's baseline (all or none; a sample kept already is not added twice)."""
    _loaded, directory = spec_or_state_dir(spec, state_dir)
    done = baselines.import_file(directory, file, argv=argv())
    if as_json:
        emit_json(done.as_dict())
        return EXIT_OK
    out.print(f"{done.added} of {done.read} samples added ({done.source}); run {done.run_id}", markup=False)
    return EXIT_OK
