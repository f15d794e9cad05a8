"""Thousands of mutated specs: the loader returns a spec or a located SpecError, nothing else.

A spec that loads must also be safe for later phases, so every loaded mutant is
checked for the invariants those phases rely on.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.spec import SpecError, load_spec
from tests.conftest import example_text

pytestmark = pytest.mark.fast  # pure: part of make test-fast

BASE = yaml.safe_load(example_text())
LOCATED = re.compile(r"^.+:\d+:\d+: ")

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**40), max_value=2**40), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(["gpu[9-1]", "x[1-99999999]", "NDR", "1:1", "0:1", "mlx5_0", "H100"]),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                       max_leaves=6)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


ALL_PATHS = [path for path in _paths(BASE) if path]


def _mutate(data: Any, path: tuple, action: str, value: Any) -> Any:
    data = copy.deepcopy(data)
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "replace":
        parent[last] = value
    elif action == "delete":
        del parent[last]
    elif action == "rename" and isinstance(parent, dict):
        parent[str(last) + "x"] = parent.pop(last)
    elif action == "wrap":
        parent[last] = [parent[last]]
    return data


FUZZ_EXAMPLES = int(os.environ.get("PROVISION_FUZZ_EXAMPLES", "600"))  # make test-fast 100, make fuzz 20,000


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["replace", "delete", "rename", "wrap"]),
                          _values), min_size=1, max_size=3))
def test_mutated_specs_never_crash(tmp_path_factory, mutations) -> None:
    data = BASE
    for path, action, value in mutations:
        try:
            data = _mutate(data, path, action, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    target: Path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    target.write_text(yaml.safe_dump(data, allow_unicode=True))
    try:
        loaded = load_spec(target)
    except SpecError as error:
        assert error.issues
        for issue in error.issues:
            assert LOCATED.match(str(issue)), str(issue)
        return
    # Loaded: the invariants later phases rely on.
    names = loaded.node_names
    assert len(names) == len(set(names))
    assert all(node.hardware in loaded.spec.hardware for node in loaded.nodes)
    for profile in loaded.spec.hardware.values():
        assert len(set(profile.rails.values())) == len(profile.rails)
        assert all(0 <= gpu < profile.gpu.count for gpu in profile.rails.values())


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes_are_rejected_cleanly(tmp_path_factory, blob: bytes) -> None:
    target: Path = tmp_path_factory.mktemp("bytes") / "spec.yaml"
    target.write_bytes(blob)
    try:
        load_spec(target)
    except SpecError as error:
        assert all(LOCATED.match(str(issue)) for issue in error.issues)
    else:  # pragma: no cover - random bytes are never a complete cluster spec
        raise AssertionError("random bytes loaded as a spec")
