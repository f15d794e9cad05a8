"""Large models are built with the cyclic collector paused, and it runs again afterwards, also after an error."""

from __future__ import annotations

import gc

import pytest

from topology.bulk import bulk, collector_paused
from topology.errors import LineError


def test_the_collector_is_paused_inside_and_resumed_after() -> None:
    assert gc.isenabled()

    @bulk
    def build() -> bool:
        return gc.isenabled()

    assert build() is False and gc.isenabled()
    with pytest.raises(LineError, match="line 7: no such port"), collector_paused():
        raise LineError("no such port", 7)
    assert gc.isenabled(), "an error inside does not leave the collector off"


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_line_error_keeps_its_parts() -> None:
    error = LineError("expected a GUID", 12)
    assert (error.line, error.message, str(error)) == (12, "expected a GUID", "line 12: expected a GUID")
