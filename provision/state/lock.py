"""The cluster lock: one mutating command per state directory, ever.

Two ``provision apply`` runs against the same cluster would interleave playbooks
and state writes. ``flock`` is released by the kernel when the holder dies (even
``kill -9``), so a crashed run never leaves a stale lock; the JSON written into
the lock file only serves to name the holder in the error message.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from provision.errors import Refusal


class LockHeld(Refusal, RuntimeError):
    """Another mutating command holds the cluster lock."""


class ClusterLock:
    def __init__(self, state_dir: Path, command: str, *, wait_s: float = 0.0) -> None:
        self.path = state_dir / "cluster.lock"
        self.command = command
        self.wait_s = wait_s
        self._fd: int | None = None

    def __enter__(self) -> ClusterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.release()

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _describe(self.path)
                    os.close(fd)
                    waited = f" after waiting {self.wait_s:g} s" if self.wait_s else ""
                    raise LockHeld(f"{holder} holds the cluster lock{waited}; "
                                   "wait for it to finish or pass --wait-lock SECONDS") from None
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        os.ftruncate(fd, 0)
        record = {"pid": os.getpid(), "command": self.command, "started": datetime.now(UTC).isoformat()}
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _describe(path: Path) -> str:
    try:
        record = json.loads(path.read_text() or "{}")
        return f"another `provision {record['command']}` (pid {record['pid']}, started {record['started']})"
    except (OSError, ValueError, KeyError):
        return "another provision command"
