"""``provision hostlist expand|compress``: Slurm hostlist syntax, as scontrol speaks it."""

from __future__ import annotations

import sys

import click

from provision.errors import EXIT_OK
from topology import hostlist


@click.group(name="hostlist")
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
