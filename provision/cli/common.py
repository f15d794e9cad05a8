"""What every command module shares: the consoles, the common options, JSON output, where state lives."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from provision import pipeline
from provision.errors import UsageProblem
from provision.spec import LoadedSpec, load_spec
from provision.state import StateStore

out = Console(highlight=False, soft_wrap=True, emoji=False)  # ":100:" in FILE:100:5 is not 💯
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

spec_argument = click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
state_dir_option = click.option("--state-dir", type=click.Path(path_type=Path, file_okay=False),
                                 help="Where the state store and run records live (default: .provision/<cluster> "
                                      "next to the spec).")
spec_option = click.option("--spec", type=click.Path(path_type=Path, dir_okay=False),
                           help="The cluster's spec file (default: the one cluster under ./.provision).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
forks_option = click.option("--forks", type=click.IntRange(min=1), default=None,
                            help="Parallel Ansible hosts (default: connection.forks of the spec).")
limit_option = click.option("--limit", metavar="HOSTLIST", help="Only these hosts (Slurm hostlist syntax).")
wait_lock_option = click.option("--wait-lock", type=click.FloatRange(min=0), default=0.0, show_default=True,
                                metavar="SECONDS",
                                help="Wait this long for another mutating command to finish instead of failing "
                                     "at once.")


def emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def argv() -> list[str]:
    """The command line as typed, kept in each run record."""
    return sys.argv[1:]


def state_dir_of(loaded: LoadedSpec, override: Path | None) -> Path:
    return override if override is not None else pipeline.default_state_dir(loaded.path, loaded.spec.cluster.name)


def state_dir_without_spec(override: Path | None) -> Path:
    """``--state-dir`` or the one cluster under ``./.provision``."""
    return override or pipeline.find_state_dir(Path.cwd())


def spec_or_state_dir(spec: Path | None, state_dir: Path | None) -> tuple[LoadedSpec | None, Path]:
    """For a command whose spec is optional (``--spec``): the spec, if given, and the state directory it names,
    ``--state-dir``, or the one cluster under ``./.provision``."""
    loaded = load_spec(spec) if spec is not None else None
    return loaded, state_dir_of(loaded, state_dir) if loaded is not None else state_dir_without_spec(state_dir)


def existing_store(directory: Path) -> StateStore:
    """The state store, read-only, for a command that reads what earlier runs wrote: none yet is the user's to fix."""
    store = StateStore.open_readonly(directory)
    if store is None:
        raise UsageProblem(f"no state store in {directory}: run `provision apply` first")
    return store
