"""Hostlist expressions must expand exactly as Slurm's scontrol does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.hostlist import HostlistError, compress, expand

pytestmark = pytest.mark.fast  # pure: part of make test-fast

# Expectations written from Slurm's documented behaviour of
# `scontrol show hostnames` / `scontrol show hostlist`.
SLURM_CASES = [
    ("gpu[001-004,009],spare01", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu009", "spare01"]),
    ("gpu[001-511]", [f"gpu{n:03d}" for n in range(1, 512)]),
    ("node[9-11]", ["node9", "node10", "node11"]),
    ("node[09-11]", ["node09", "node10", "node11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
    ("a,b,c", ["a", "b", "c"]),
    ("host5", ["host5"]),
    ("x[3,1,2]", ["x3", "x1", "x2"]),  # written order is kept, as scontrol does
    (" gpu1 , gpu2 ", ["gpu1", "gpu2"]),
]


@pytest.mark.parametrize(("expression", "expected"), SLURM_CASES)
def test_expand_matches_slurm(expression: str, expected: list[str]) -> None:
    assert expand(expression) == expected


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["gpu003", "gpu001", "gpu002", "gpu009", "spare01"], "gpu[001-003,009],spare01"),
        (["node9", "node10", "node11"], "node[9-11]"),
        (["n099", "n100"], "n[099-100]"),
        (["a", "b", "a"], "a,b"),
        (["rack1-gpu01", "rack1-gpu02", "rack2-gpu01"], "rack1-gpu[01-02],rack2-gpu01"),
        (["gpu7"], "gpu7"),
    ],
)
def test_compress_matches_slurm(names: list[str], expected: str) -> None:
    assert compress(names) == expected


@pytest.mark.parametrize(
    ("expression", "message", "column"),
    [
        ("gpu[9-1]", "runs backwards", 5),
        ("gpu[001-99999999]", "more than the limit", 5),
        ("gpu[1-3", "never closed", 4),
        ("gpu]1", "without '['", 4),
        ("gpu[[1]]", "nested", 5),
        ("gpu[a-b]", "bad range", 5),
        ("gpu[1-2],,x", "empty host name", 10),
        ("", "empty hostlist", 1),
        ("g pu", "not allowed", 2),
        ("gpu[1-2]x/y", "not allowed", 10),
    ],
)
def test_bad_expressions_are_located(expression: str, message: str, column: int) -> None:
    with pytest.raises(HostlistError) as caught:
        expand(expression)
    assert message in caught.value.message
    assert caught.value.column == column


def test_product_over_the_limit_is_refused() -> None:
    with pytest.raises(HostlistError, match="more than the limit"):
        expand("r[1-1000]n[1-1000]")


_host = st.builds(
    lambda prefix, number, width: prefix + (f"{number:0{width}d}" if number is not None else ""),
    st.sampled_from(["gpu", "node", "r1-n", "spare", "x"]),
    st.one_of(st.none(), st.integers(min_value=0, max_value=1200)),
    st.integers(min_value=1, max_value=4),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_host, min_size=1, max_size=60))
def test_compress_then_expand_round_trips(names: list[str]) -> None:
    compressed = compress(names)
    expanded = expand(compressed)
    assert sorted(expanded) == sorted(set(names))
    assert len(expanded) == len(set(expanded))
    assert compress(expanded) == compressed  # idempotent: a compressed list is canonical


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=40, unique=True),
       st.integers(min_value=1, max_value=3))
def test_ranges_collapse(numbers: list[int], width: int) -> None:
    names = [f"gpu{n:0{width}d}" for n in numbers]
    compressed = compress(names)
    assert compressed.count("gpu") == 1  # one prefix, everything inside one bracket
    assert sorted(expand(compressed)) == sorted(names)
