"""What was understood of an evidence file an operator hands a command: a file nothing of which could be read is
refused (never read as "nothing wrong"), a partly read one says how much was not understood, and a log's last
line without its end of line was cut. (tests/test_evidence_inputs.py walks every command's evidence options.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.evidence import EvidenceError, read_text, reading, refused

pytestmark = pytest.mark.fast


def test_a_file_nothing_of_which_was_read_is_refused_with_how_it_begins() -> None:
    assert "the file is empty" in str(refused("a.log", "UFM's event.log", "\n \n"))
    with pytest.raises(EvidenceError, match=r"a.log: nothing in it could be read as UFM's event.log \(2 line"):
        reading("a.log", "UFM's event.log", "hello\nworld\n", understood=0)


def test_a_partly_read_file_says_how_much_was_not_understood() -> None:
    got = reading("a.log", "syslog", "one\ntwo\nthree\n", understood=2, samples=["three"])
    assert got.partial and got.line() == "a.log: 1 of 3 line(s) not understood as syslog, e.g. 'three'"
    assert got.as_dict()["not_understood"] == 1
    whole = reading("a.log", "syslog", "one\ntwo\n", understood=2)
    assert not whole.partial


def test_a_logs_last_line_without_its_end_was_cut() -> None:
    got = reading("event.log", "UFM's event.log", "one\ntwo\nthr", understood=3, log=True)
    assert got.not_understood == 1 and "(cut: no end of line)" in got.samples[0]


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match=r"absent\.log"):
        read_text(tmp_path / "absent.log")
    (tmp_path / "binary.log").write_bytes(bytes(range(256)))
    assert "\ufffd" in read_text(tmp_path / "binary.log"), "bytes that are not text are kept as replacements"
