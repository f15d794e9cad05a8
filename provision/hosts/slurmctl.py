"""Slurm's controller asked, never changed: ``scontrol`` with the spec's slurm.conf, every call bounded in time.

The readers (``provision triage --job``) ask Slurm through this alone; the sink that changes Slurm
(:mod:`provision.sinks.slurm`) builds on it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from provision.errors import Refusal, UsageProblem
from provision.facts.slurm import (
    SLURM_JOBS,
    SLURM_NODES,
    SlurmJob,
    SlurmNode,
    SlurmOutputError,
    parse_jobs,
    parse_nodes,
)
from provision.spec import LoadedSpec


class SlurmUnreachable(Refusal, RuntimeError):
    """scontrol could not reach slurmctld (or is not installed here): the sync is pending, nothing is lost."""


class SlurmReader:
    """``scontrol`` with the spec's slurm.conf; every call bounded in time."""

    def __init__(self, conf: Path | None, timeout_s: float) -> None:
        self.env = {**os.environ, **({"SLURM_CONF": str(conf)} if conf else {})}
        self.timeout_s = timeout_s

    def run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=self.timeout_s)
        except FileNotFoundError:
            raise SlurmUnreachable(f"{argv[0]} is not installed on this machine") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"{' '.join(argv[:3])} got no answer in {self.timeout_s:g} s") from None
        said = (done.stderr or done.stdout).strip()
        if done.returncode != 0 or "Unable to contact slurm controller" in said:
            raise SlurmUnreachable(f"{' '.join(argv[:4])}: {said.splitlines()[-1] if said else done.returncode}")
        return done.stdout

    def nodes(self) -> dict[str, SlurmNode]:
        text = self.run(SLURM_NODES.argv)
        try:
            return {node.name: node for node in parse_nodes(text)}
        except SlurmOutputError as error:
            raise SlurmUnreachable(f"scontrol's node listing could not be read: {error}") from None

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld holds (a finished one only ``MinJobAge``)."""
        text = self.run(SLURM_JOBS.argv)
        try:
            return parse_jobs(text)
        except SlurmOutputError as error:
            raise SlurmUnreachable(f"scontrol's job listing could not be read: {error}") from None


def reader_settings(loaded: LoadedSpec) -> tuple[Path | None, float]:
    """The slurm.conf to use (relative to the spec's folder; none: the machine's own) and the time limit."""
    settings = loaded.spec.slurm
    if settings is None:
        raise UsageProblem(f"{loaded.path}: the spec has no slurm: section: nothing here asks Slurm or changes it")
    conf = settings.conf
    if conf is not None:
        conf = Path(os.path.expanduser(str(conf)))
        conf = conf if conf.is_absolute() else loaded.path.parent / conf
    return conf, settings.timeout_s


def reader_for(loaded: LoadedSpec) -> SlurmReader:
    return SlurmReader(*reader_settings(loaded))
