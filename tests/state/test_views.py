"""The narrow views readers take of the store: the store provides every method each view names, with the same
parameters, so a reader typed against a view runs against the store (mypy checks the types; this, the names)."""

from __future__ import annotations

import inspect

import pytest

from provision.state.store import StateStore
from provision.state.views import NodeHistory, ReadStore

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("view", [NodeHistory, ReadStore])
def test_the_store_provides_every_method_of_each_view(view: type) -> None:
    named = {name for name, member in inspect.getmembers(view, inspect.isfunction) if not name.startswith("_")}
    assert named, f"{view.__name__} names no method"
    for name in named:
        wanted = list(inspect.signature(getattr(view, name)).parameters)
        provided = list(inspect.signature(getattr(StateStore, name)).parameters)
        assert provided[:len(wanted)] == wanted, (name, wanted, provided)


def test_a_view_is_narrower_than_the_store() -> None:
    store = {name for name, _ in inspect.getmembers(StateStore, inspect.isfunction) if not name.startswith("_")}
    read = {name for name, _ in inspect.getmembers(ReadStore, inspect.isfunction) if not name.startswith("_")}
    assert read < store and "transition" not in read, "a reader's view holds no move"
