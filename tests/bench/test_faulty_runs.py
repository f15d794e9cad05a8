"""The faulty-example bench judges a run against the catalogue: what it expects of the example is what the demo
shows (tests/sinks/test_metrics.py's EXAMPLE_QUARANTINED, the nodes and checks `make demo` quarantines)."""

from __future__ import annotations

import pytest

from bench.faulty_runs import expected
from bench.simulated import example
from tests.sinks.test_metrics import EXAMPLE_QUARANTINED

pytestmark = pytest.mark.fast


def test_the_bench_expects_of_the_example_what_the_demo_quarantines() -> None:
    assert expected(example()) == EXAMPLE_QUARANTINED
