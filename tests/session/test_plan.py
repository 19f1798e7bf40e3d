"""The run plan: built once from the API's settings, frozen, pickled whole to workers, and
turned into a run's cache and client by the one `build_runtime` (issue 25)."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
from pathlib import Path

import pytest

import orchestrator as orc
from orchestrator.engine.runtime import build_runtime
from orchestrator.session.plan import RunPlan, make_plan


def full_plan(cache: Path | None = None) -> RunPlan:
    return make_plan(
        base_url=("http://a:8000/v1", "http://b:8000/v1"),
        model="judge-8b",
        server_id="weights-1",
        api_key="sk-secret",
        concurrency=12,
        affinity=False,
        limit=7,
        cache=cache,
        refresh=True,
        overwrite=True,
        structured="prompt",
        params={"scale": 5},
        timeout=9.0,
        server_wait=3.0,
        workers=3,
        executor="local",
        allow_servers=("http://c:8000/v1",),
        trust_servers=False,
        retry=orc.RetryPolicy(retries=1),
    )


def test_each_setting_lands_in_the_part_that_reads_it() -> None:
    plan = full_plan(Path("c.sqlite"))
    assert plan.servers.base_url == ("http://a:8000/v1", "http://b:8000/v1")
    assert (plan.servers.model, plan.servers.server_id) == ("judge-8b", "weights-1")
    assert plan.servers.allow_servers == ("http://c:8000/v1",)
    assert (plan.calls.timeout, plan.calls.server_wait) == (9.0, 3.0)
    assert (plan.calls.concurrency, plan.calls.affinity, plan.calls.structured) == (
        12,
        False,
        "prompt",
    )
    assert plan.calls.retry == orc.RetryPolicy(retries=1)
    assert plan.cache == dataclasses.replace(plan.cache, use=True, path=Path("c.sqlite"))
    assert plan.cache.refresh is True
    assert (plan.scale.workers, plan.scale.executor, plan.scale.sharded) == (3, "local", True)
    assert (plan.params, plan.limit, plan.overwrite) == ({"scale": 5}, 7, True)


def test_a_plan_is_frozen_keeps_its_key_out_of_sight_and_pickles_whole() -> None:
    plan = full_plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.limit = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.calls.timeout = 1.0  # type: ignore[misc]
    assert "sk-secret" not in repr(plan)
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_build_runtime_opens_the_planned_cache_and_a_client_with_the_planned_policy(
    tmp_path: Path,
) -> None:
    plan = full_plan(tmp_path / "cache.sqlite")
    runtime = build_runtime(plan)
    try:
        assert runtime.cache is not None and runtime.cache.path == tmp_path / "cache.sqlite"
        assert runtime.client.cache is runtime.cache and runtime.client.stats is runtime.stats
        assert runtime.client.retry == orc.RetryPolicy(retries=1)
    finally:
        asyncio.run(runtime.close())
    none = build_runtime(
        dataclasses.replace(plan, cache=dataclasses.replace(plan.cache, use=False))
    )
    try:
        assert none.cache is None and none.client.cache is None
    finally:
        asyncio.run(none.close())
