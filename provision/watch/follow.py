"""Logs followed as they grow (issue 56, item 3): each pass reads only what was appended since the last one.

A UFM ``event.log`` or a syslog server's file of the hosts' IB lines grows for weeks; reading it whole every
60 s costs more every pass, so the watch keeps a cursor per file (its device, inode and the bytes consumed) in the
store and reads on from there. What logrotate does to a file is told apart by what the cursor and the file
disagree on:

- the same inode and the same first bytes, no shorter than the cursor: appended to; read on;
- the same inode, shorter than the cursor: truncated in place (``copytruncate``): read from the start, and say so:
  whatever was appended between our last read and the truncation is gone (the copy is the old name's, and we do
  not know how much of it we had);
- another inode: renamed away (``create``): the rest of the old file is read first, found by its inode among the
  siblings whose names start with the log's (``event.log.1``, ``event.log-20261128``), then the new file from its
  start; a rest that cannot be found (already compressed) is said to be lost, never silently skipped;
- the same inode with other first bytes: a new file that was given a deleted one's inode (filesystems reuse them
  at once), so the old one was rotated away and is gone;
- no file: nothing read, and the pass says the source is missing (silence is not health).

Only whole lines are consumed: a line the writer has not finished stays for the next pass. Each read is bounded
(``limit_bytes``): a watch that fell behind catches up over several passes instead of stalling one.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: The most bytes one pass reads from one file (a pass must stay short; the rest is read by the next ones).
DEFAULT_LIMIT_BYTES = 32 * 1024 * 1024
#: How many of a file's first bytes tell it from another file given the same inode.
HEAD_BYTES = 256


@dataclass(frozen=True)
class Cursor:
    """Where the next read of a file starts: the file by its device and inode (a rename keeps them), and the
    bytes of it consumed, always at the end of a line."""

    device: int
    inode: int
    offset: int
    head: str = ""  # sha256 of the file's first min(offset, HEAD_BYTES) bytes: the file, should the inode be reused

    def same_file(self, here: tuple[int, int], handle: BinaryIO) -> bool:
        if (self.device, self.inode) != here:
            return False
        return _head(handle, min(self.offset, HEAD_BYTES)) == self.head


@dataclass
class Chunk:
    """What one pass read from one file: whole lines, the cursor to keep, and what happened to the file."""

    lines: list[str]
    cursor: Cursor | None  # None: the file is missing and was never seen
    missing: bool = False
    rotation: str = ""  # empty, or how the file turned over since the last pass
    lost: bool = False  # lines may be gone for good (truncated in place, or a rotated rest not found)
    behind: bool = False  # more is there than one pass reads: the next pass goes on
    notes: list[str] = field(default_factory=list)


def follow(path: Path, cursor: Cursor | None, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> Chunk:
    """The lines appended to ``path`` since ``cursor`` (every line, the first time), and the cursor after them."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return Chunk([], cursor, missing=True, notes=[f"{path}: missing"])
    with handle:
        status = os.fstat(handle.fileno())
        here = (status.st_dev, status.st_ino)
        if cursor is None:
            return _read_from(handle, here, 0, limit_bytes)
        if cursor.same_file(here, handle) and cursor.offset <= status.st_size:
            return _read_from(handle, here, cursor.offset, limit_bytes)
        truncated = (cursor.device, cursor.inode) == here  # the same inode, shorter or rewritten: copytruncate
        rest = _rest_of_rotated(path, cursor, limit_bytes, truncated=truncated,
                                shorter=status.st_size < cursor.offset)
        fresh = _read_from(handle, here, 0, max(limit_bytes - sum(len(line) + 1 for line in rest.lines), 0))
    fresh.lines[:0] = rest.lines
    fresh.rotation = rest.rotation
    fresh.lost = rest.lost
    fresh.behind = fresh.behind or rest.behind
    fresh.notes[:0] = rest.notes
    return fresh


def _read_from(handle: BinaryIO, here: tuple[int, int], start: int, limit_bytes: int) -> Chunk:
    """Whole lines from ``start``, at most ``limit_bytes`` of them (a single line longer than the limit is taken
    whole as far as the limit reaches, so one huge line cannot stall the follower)."""
    handle.seek(start)
    data = handle.read(limit_bytes + 1) if limit_bytes > 0 else b""
    behind = len(data) > limit_bytes
    data = data[:limit_bytes]
    end = data.rfind(b"\n")
    if end < 0:
        if behind:  # one line longer than a whole pass's read: taken as it is
            end = len(data) - 1
        else:
            return Chunk([], _cursor(handle, here, start))
    consumed = data[:end + 1]
    lines = consumed.decode("utf-8", errors="replace").splitlines()
    return Chunk(lines, _cursor(handle, here, start + len(consumed)), behind=behind)


def _head(handle: BinaryIO, size: int) -> str:
    handle.seek(0)
    return hashlib.sha256(handle.read(size)).hexdigest()


def _cursor(handle: BinaryIO, here: tuple[int, int], offset: int) -> Cursor:
    return Cursor(*here, offset, _head(handle, min(offset, HEAD_BYTES)))


def _rest_of_rotated(path: Path, cursor: Cursor, limit_bytes: int, *, truncated: bool, shorter: bool) -> Chunk:
    """The part of the old file we had not read, found beside the log: renamed (``create``: the same inode and
    first bytes) or copied before a truncation (``copytruncate``: the same first bytes, another inode)."""
    for sibling in sorted(path.parent.glob(f"{path.name}?*")):
        try:
            status = sibling.stat()
            if status.st_size < cursor.offset or (not truncated and status.st_ino != cursor.inode):
                continue
            with sibling.open("rb") as handle:
                if _head(handle, min(cursor.offset, HEAD_BYTES)) != cursor.head:
                    continue
                handle.seek(cursor.offset)
                data = handle.read(limit_bytes + 1)
        except OSError:
            continue
        behind = len(data) > limit_bytes
        # the old file is finished: a last line without its newline is a whole line
        lines = data[:limit_bytes].decode("utf-8", errors="replace").splitlines()
        how = f"copied to {sibling.name} and truncated" if truncated else f"renamed to {sibling.name}"
        notes = [f"{path}: {how}; the {len(data[:limit_bytes])} byte(s) of it not yet read are read first"]
        if truncated:
            notes.append(f"{path}: lines written between the copy and the truncation are lost (copytruncate)")
        if behind:
            notes.append(f"{sibling}: more than one pass's read was left in it; the rest is not read")
        return Chunk(lines, cursor, rotation=how, lost=behind or truncated, notes=notes)
    # the same inode with other first bytes and no copy beside it: truncated and written past the cursor since, or
    # a new file given the deleted one's inode; either way the old content is gone
    how = ("truncated in place" if shorter else "replaced") if truncated else "renamed away"
    return Chunk([], cursor, rotation=how, lost=True,
                 notes=[f"{path}: {how}, and the old content is not beside it (compressed or removed): what it "
                        "held after the last pass is not read"])
