"""How a host is read or worked on: one command's result, the session protocol every probe speaks, and the
local session (child processes, paths under a root), with sudo's own words told apart from the command's.

Standard library only, at Python 3.10: besides the controller, the node-side code that runs from the burn-in's
runtime on a node (``provision node-check`` as Slurm's HealthCheckProgram) uses it, with no controller package
there (see :data:`provision.hosts.runtime.NODE_MODULES`). The SSH session is in :mod:`provision.hosts.remote`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

#: What sudo says when it refuses (no rule for the user, a password it was not given or that was wrong).
SUDO_REFUSALS = re.compile(r"^sudo: |is not in the sudoers file|may not run sudo|incorrect password|"
                           r"a password is required|a terminal is required", re.IGNORECASE | re.MULTILINE)


def become_argv(argv: list[str], *, with_password: bool) -> list[str]:
    """``argv`` through sudo: ``-n`` never waits for a password; ``-S -p ''`` reads it from stdin, silently."""
    return ["sudo", "-S", "-p", "", "--", *argv] if with_password else ["sudo", "-n", "--", *argv]


def refused_by_sudo(stderr: str) -> str | None:
    """sudo's own refusal line, if sudo refused (the command itself never ran): its last one, which says the most
    (a wrong password ends with "sudo: 1 incorrect password attempt" after "sudo: no password was provided")."""
    matches = list(SUDO_REFUSALS.finditer(stderr))
    if not matches:
        return None
    match = matches[-1]
    line = stderr[stderr.rfind("\n", 0, match.start()) + 1:].split("\n", 1)[0].strip()
    return line or match.group(0)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    refused_root: str = ""  # sudo's refusal, or why the command could not run as root
    #: The connection failed under the command (no exit status came back): ours, never the node's verdict.
    lost: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def problem(self) -> str:
        """One line saying why the command's output cannot be trusted; ``needs root: <what sudo said>`` when
        the privilege was refused, so exactly the checks that needed it say why."""
        if self.refused_root:
            return f"needs root: {self.refused_root}"
        command = shlex.join(self.argv)
        if self.lost:
            return f"the connection to the host dropped during {command} (ours, not the host's)"
        if self.timed_out:
            return f"{command} timed out after {self.seconds:.0f} s"
        detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return f"{command} exited {self.rc}" + (f": {detail[-1]}" if detail else "")


class ReadFailed(Exception):
    """A file or folder could not be read (the connection dropped, the read was refused, a timeout): never the
    same as a file that is not there, which ``read_text`` answers with ``None``. ``lost``: the connection went
    under the read (ours, not the host's)."""

    def __init__(self, message: str, *, lost: bool = False) -> None:
        super().__init__(message)
        self.lost = lost


class HostSession(Protocol):
    host: str

    def run(self, argv: Sequence[str], timeout_s: float, *, become: bool = False) -> CommandResult: ...

    def read_text(self, path: str) -> str | None:
        """The file's text; ``None`` when it does not exist; :class:`ReadFailed` when it could not be read."""
        ...

    def resolve_links(self, directory: str) -> dict[str, str]:
        """Each entry of the folder and where its link leads; empty when the folder does not exist;
        :class:`ReadFailed` when it could not be read."""
        ...

    def close(self) -> None: ...


class LocalSession:
    """Commands run as child processes of the controller; paths are read under ``root``."""

    def __init__(self, host: str, root: Path = Path("/"), environment: Mapping[str, str] | None = None) -> None:
        self.host = host
        self.root = root
        self.environment = {**os.environ, **(environment or {})}

    def _path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def run(self, argv: Sequence[str], timeout_s: float, *, become: bool = False) -> CommandResult:
        if become and os.geteuid() != 0:  # the controller's own user: sudo, never waiting for a password
            result = self._run(become_argv(list(argv), with_password=False), timeout_s)
            refusal = refused_by_sudo(result.stderr) if not result.ok else None
            return dataclasses.replace(result, argv=tuple(argv), refused_root=refusal or "")
        return self._run(argv, timeout_s)

    def _run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        started = time.monotonic()
        try:
            process = subprocess.Popen(list(argv), env=self.environment, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)
        except OSError as error:
            return CommandResult(tuple(argv), 127, "", str(error), time.monotonic() - started)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(process)
            stdout, stderr = process.communicate()
            return CommandResult(tuple(argv), -9, stdout, stderr, time.monotonic() - started, timed_out=True)
        return CommandResult(tuple(argv), process.returncode, stdout, stderr, time.monotonic() - started)

    def read_text(self, path: str) -> str | None:
        try:
            return self._path(path).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise ReadFailed(f"could not read {path}: {type(error).__name__}: {error}") from error

    def resolve_links(self, directory: str) -> dict[str, str]:
        base = self._path(directory)
        if not base.is_dir():
            return {}
        root = os.path.realpath(self.root)
        resolved = {}
        try:
            for name in sorted(os.listdir(base)):
                target = os.path.realpath(base / name)
                resolved[name] = "/" + os.path.relpath(target, root)
        except OSError as error:
            raise ReadFailed(f"could not list {directory}: {type(error).__name__}: {error}") from error
        return resolved

    def close(self) -> None:
        return None


def kill_group(process: subprocess.Popen[str]) -> None:
    """A timed-out probe leaves nothing behind: its whole process group goes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
