"""Run records: every mutating run leaves ``runs/<timestamp>-<id>/`` saying exactly what ran.

Infra teams lose weeks to "it was the wrong config" (Imbue lost one twice to a
setting not loaded from git). The manifest answers it in one file: the spec and
its hash, tool and dependency versions, git revisions, the host list in rank
order, seeds, the relevant environment, and how the run ended. ``events.jsonl``
is the structured log of the run, one JSON object per line.

Secrets never land here: the environment is captured through an allowlist of
prefixes, names that look secret are dropped even inside it, and the spec itself
cannot hold inline credentials (the loader refuses them).
"""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import provision

#: Environment variables worth recording: they change what NCCL, CUDA, torch and
#: Ansible do, and a wrong one is a classic cause of a slow or hung run.
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "GLOO_", "OMP_", "UCX_", "ANSIBLE_", "PROVISION_", "MASTER_",
                "PYTORCH_", "LD_LIBRARY_PATH", "PATH")
SECRET_NAME = re.compile(r"PASS|SECRET|TOKEN|CREDENTIAL|PRIVATE|_KEY$|^KEY|AUTH", re.IGNORECASE)
DEPENDENCIES = ("pydantic", "pyyaml", "click", "rich", "networkx", "jinja2", "ansible-core", "ansible-runner",
                "paramiko", "fabric", "torch", "numpy")


class RunRecord:
    """The directory of one run; the manifest is rewritten as the run progresses."""

    def __init__(self, runs_dir: Path, command: str, argv: list[str]) -> None:
        stamp = datetime.now(UTC)
        self.id = f"{stamp:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"
        self.path = runs_dir / self.id
        self.command = command
        runs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        runs_dir.chmod(0o700)
        self.path.mkdir(mode=0o700)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []  # e.g. the CLI's per-event progress lines
        self._log = (self.path / "events.jsonl").open("a", encoding="utf-8")
        os.chmod(self.path / "events.jsonl", 0o600)
        self.manifest: dict[str, Any] = {
            "run_id": self.id,
            "command": command,
            "argv": argv,
            "started_at": stamp.isoformat(),
            "finished_at": None,
            "status": "running",
            "exit_code": None,
            "provision_version": provision.__version__,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "controller": platform.node(),
            "user": _user(),
            "cwd": os.getcwd(),
            "tool_git": git_revision(Path(provision.__file__).resolve().parent.parent),
            "dependencies": dependency_versions(),
            "environment": relevant_environment(os.environ),
        }
        self.write_manifest()

    def describe_spec(self, spec_path: Path, sha256: str, *, hosts: list[str], rank_order: list[str],
                      seeds: dict[str, int]) -> None:
        """Record which spec ran, a copy of it, and the host list and seeds derived from it."""
        copy = self.path / "spec.yaml"
        shutil.copyfile(spec_path, copy)
        copy.chmod(0o600)
        self.manifest.update({
            "spec": {"path": str(spec_path.resolve()), "sha256": sha256, "copy": copy.name,
                     "git": git_revision(spec_path.resolve().parent)},
            "hosts": hosts,
            "rank_order": rank_order,
            "seeds": seeds,
        })
        self.write_manifest()

    def note(self, key: str, value: Any) -> None:
        self.manifest[key] = value
        self.write_manifest()

    def event(self, name: str, **fields: Any) -> None:
        record = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": name, **fields}
        self._log.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._log.flush()
        for listener in self.listeners:
            listener(record)

    def finish(self, status: str, exit_code: int) -> None:
        self.manifest.update(status=status, exit_code=exit_code, finished_at=datetime.now(UTC).isoformat())
        self.event("run.finished", status=status, exit_code=exit_code)
        self.write_manifest()
        self._log.close()

    def write_manifest(self) -> None:
        target = self.path / "manifest.json"
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.manifest, indent=2, sort_keys=True, default=str) + "\n")
        temporary.chmod(0o600)
        temporary.replace(target)  # a reader never sees half a manifest


def relevant_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {
        name: value
        for name, value in sorted(environ.items())
        if name.startswith(ENV_PREFIXES) and not SECRET_NAME.search(name)
    }


def dependency_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in DEPENDENCIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_revision(directory: Path) -> dict[str, Any] | None:
    """The commit and dirtiness of the git work tree holding ``directory``, if any."""
    if shutil.which("git") is None:
        return None
    try:
        head = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, check=False)
        if head.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())
