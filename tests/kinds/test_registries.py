"""The registries a graph compiles with are a built-in one plus the user's: registering adds
to the user's and never changes or hides what ships."""

from __future__ import annotations

import pytest

import orchestrator as orc
from orchestrator.compute import registry
from orchestrator.kinds import BUILTIN_KINDS, USER_KINDS, KindRegistry, kinds


def test_register_kind_adds_to_the_users_registry_over_the_builtins() -> None:
    builtins = BUILTIN_KINDS.kinds()
    assert list(builtins) == ["llm", "compute", "cascade"]
    mine = KindRegistry(BUILTIN_KINDS)
    llm = builtins["llm"]
    with pytest.raises(ValueError, match="already registered"):
        mine.add(llm)
    assert list(mine.kinds()) == ["llm", "compute", "cascade"]
    compute = builtins["compute"]
    mine.add(compute, replace=True)  # the user's own, over the built-in of that name
    assert mine.kinds()["compute"] is compute and BUILTIN_KINDS.kinds() == builtins
    mine.remove("compute")
    mine.remove("llm")  # not its own: the built-in stays
    assert list(mine.kinds()) == ["llm", "compute", "cascade"]
    # the process's user registry is one such registry: the built-ins stay as they are
    assert USER_KINDS.kinds() == kinds()
    assert BUILTIN_KINDS.kinds() == builtins


def test_a_users_function_goes_to_the_users_registry() -> None:
    @orc.register("double_it_for_the_registry_test")
    def double(x: int) -> int:
        return 2 * x

    try:
        found = registry.registered("double_it_for_the_registry_test")
        assert found is not None and found.fn is double
        assert registry.resolve("double_it_for_the_registry_test") is found
        assert "double_it_for_the_registry_test" not in registry.names()
        # what ships is not the user's: a worker finds it without being sent it
        registry.resolve("mean")
        assert registry.registered("mean") is None
        assert "mean" in registry.names()
    finally:
        registry._REGISTRY.pop("double_it_for_the_registry_test", None)
