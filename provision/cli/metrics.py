"""``provision metrics``: the cluster's state and burn-in figures for Prometheus's node_exporter textfile collector."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from provision.cli.common import existing_store, out, spec_argument, state_dir_of, state_dir_option
from provision.errors import EXIT_OK
from provision.sinks import metrics
from provision.spec import load_spec


@click.command(name="metrics")
@spec_argument
@click.option("--textfile", "directory", type=click.Path(path_type=Path, file_okay=False),
              help="Write provision_<cluster>.prom into this directory (node_exporter's "
                   "--collector.textfile.directory); default: the spec's metrics.textfile_dir, else stdout.")
@state_dir_option
def metrics_command(spec: Path, directory: Path | None, state_dir: Path | None) -> int:
    """Write node states, check outcomes, bandwidths, matmul figures, suspect cables and run outcomes as metrics."""
    loaded = load_spec(spec)
    target = state_dir_of(loaded, state_dir)
    directory = directory or metrics.textfile_dir(loaded)
    with existing_store(target) as store:
        if directory is None:
            sys.stdout.write(metrics.exposition(metrics.families(loaded, store, target)))
            return EXIT_OK
        written = metrics.write_textfile(loaded, store, target, directory)
    out.print(f"wrote {written}", markup=False)
    return EXIT_OK
