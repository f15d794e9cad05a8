"""Logs followed as they grow: appended lines read once, an unfinished line kept for the next pass, and each of
logrotate's ways of turning a file over (create, copytruncate, compress) told apart (issue 56, item 3)."""

from __future__ import annotations

import os
from pathlib import Path

from provision.watch.follow import follow


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)


def test_appended_lines_are_read_once_and_an_unfinished_line_waits(tmp_path: Path) -> None:
    log = tmp_path / "event.log"
    _append(log, "one\ntwo\nthr")
    first = follow(log, None)
    assert first.lines == ["one", "two"]
    assert first.cursor is not None and first.cursor.offset == len("one\ntwo\n")
    assert not first.rotation and not first.lost and not first.missing
    assert follow(log, first.cursor).lines == []  # nothing finished since
    _append(log, "ee\nfour\n")
    second = follow(log, first.cursor)
    assert second.lines == ["three", "four"]
    assert follow(log, second.cursor).lines == []


def test_a_missing_file_is_said_to_be_missing_and_keeps_the_cursor(tmp_path: Path) -> None:
    log = tmp_path / "event.log"
    _append(log, "one\n")
    cursor = follow(log, None).cursor
    log.unlink()
    gone = follow(log, cursor)
    assert gone.missing and gone.lines == [] and gone.cursor == cursor
    assert "missing" in gone.notes[0]


def test_a_renamed_file_is_finished_before_the_new_one_is_read(tmp_path: Path) -> None:
    """logrotate's ``create``: the old file renamed to ``event.log.1`` (its last line still unterminated when it
    was rotated), a new ``event.log`` started; the old file's rest comes first, nothing twice, nothing lost."""
    log = tmp_path / "event.log"
    _append(log, "one\ntwo\n")
    cursor = follow(log, None).cursor
    _append(log, "three\nfour")
    log.rename(tmp_path / "event.log.1")
    _append(log, "five\n")
    chunk = follow(log, cursor)
    assert chunk.lines == ["three", "four", "five"]
    assert chunk.rotation == "renamed to event.log.1" and not chunk.lost
    assert chunk.cursor is not None and chunk.cursor.inode == os.stat(log).st_ino
    assert chunk.cursor.offset == len("five\n")
    assert follow(log, chunk.cursor).lines == []


def test_a_rotated_rest_that_is_gone_is_said_to_be_lost(tmp_path: Path) -> None:
    """The old file already compressed (``event.log.1.gz``) and deleted: its rest cannot be read, and the pass says
    so instead of carrying on as if nothing had been missed; the new file may well have the deleted one's inode
    (filesystems reuse them at once), and is told apart by its first bytes."""
    log = tmp_path / "event.log"
    _append(log, "one\n")
    cursor = follow(log, None).cursor
    _append(log, "two\n")
    (tmp_path / "event.log.1.gz").write_bytes(b"\x1f\x8b compressed")
    log.unlink()
    _append(log, "three\n")
    chunk = follow(log, cursor)
    assert chunk.lines == ["three"]
    assert chunk.lost and chunk.rotation in ("renamed away", "replaced")  # "replaced": the inode was reused
    assert "not read" in chunk.notes[0]


def test_a_copytruncate_reads_the_copys_rest_then_the_file_from_its_start(tmp_path: Path) -> None:
    """logrotate's ``copytruncate``: the file copied to ``event.log.1`` (found by its first bytes: a new inode),
    then truncated in place and written to again. What the copy holds past the cursor is read first; what was
    written between the copy and the truncation is gone, and the pass says lines may be lost."""
    log = tmp_path / "event.log"
    _append(log, "one\ntwo\n")
    cursor = follow(log, None).cursor
    _append(log, "three\n")
    (tmp_path / "event.log.1").write_bytes(log.read_bytes())
    log.write_text("four\n", encoding="utf-8")  # truncated in place, then written to again: the same inode
    chunk = follow(log, cursor)
    assert chunk.lines == ["three", "four"]
    assert chunk.rotation == "copied to event.log.1 and truncated" and chunk.lost


def test_a_truncation_without_a_copy_reads_the_file_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "event.log"
    _append(log, "one\ntwo\nthree\n")
    cursor = follow(log, None).cursor
    log.write_text("four\n", encoding="utf-8")
    chunk = follow(log, cursor)
    assert chunk.lines == ["four"]
    assert chunk.rotation == "truncated in place" and chunk.lost


def test_a_pass_reads_at_most_its_limit_and_the_next_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "event.log"
    _append(log, "".join(f"line {index:03d}\n" for index in range(100)))  # 9 bytes a line
    cursor, lines, passes = None, [], 0
    while passes < 20:
        chunk = follow(log, cursor, limit_bytes=100)
        lines += chunk.lines
        cursor = chunk.cursor
        passes += 1
        if not chunk.behind:
            break
    assert lines == [f"line {index:03d}" for index in range(100)]
    assert passes == 10  # 11 whole lines a pass


def test_a_line_longer_than_a_pass_does_not_stall_the_follower(tmp_path: Path) -> None:
    log = tmp_path / "event.log"
    _append(log, "x" * 250 + "\nnext\n")
    first = follow(log, None, limit_bytes=100)
    assert first.lines == ["x" * 100] and first.behind
    rest = follow(log, first.cursor, limit_bytes=100)
    assert rest.cursor is not None and rest.cursor.offset > first.cursor.offset  # type: ignore[union-attr]
