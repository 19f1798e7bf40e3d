"""The run plan: built once from the API's settings, frozen, pickled whole to workers, and
turned into a run's cache and client by the one `build_runtime` (issue 25); since issue 36
it is the settings record itself, with what the caller left open decided."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
from pathlib import Path

import pytest
from helpers import judge_graph

import orchestrator as orc
from orchestrator.engine.process import build_runtime
from orchestrator.session.planning import RunPlan, RunSettings, make_plan

GRAPH = orc.graph_from_dict(judge_graph(), {"judge.jinja": "Rate {{ text }}"})


def full_plan(cache: Path | bool = False) -> RunPlan:
    settings = RunSettings(
        base_url=["http://a:8000/v1", "http://b:8000/v1"],
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
        allow_servers=["http://c:8000/v1"],
        retry=orc.RetryPolicy(retries=1),
    )
    return make_plan(settings, GRAPH)


def test_each_setting_is_in_the_plan_as_given_lists_as_tuples() -> None:
    plan = full_plan(Path("c.sqlite"))
    assert plan.base_url == ("http://a:8000/v1", "http://b:8000/v1")
    assert (plan.model, plan.server_id) == ("judge-8b", "weights-1")
    assert plan.allow_servers == ("http://c:8000/v1",)
    assert (plan.timeout, plan.server_wait) == (9.0, 3.0)
    assert (plan.concurrency, plan.affinity, plan.structured) == (12, False, "prompt")
    assert plan.retry == orc.RetryPolicy(retries=1)
    assert (plan.use_cache, plan.cache_file, plan.refresh) == (True, Path("c.sqlite"), True)
    assert (plan.workers, plan.executor, plan.sharded) == (3, "local", True)
    assert (plan.params, plan.limit, plan.overwrite) == ({"scale": 5}, 7, True)


def test_what_the_caller_left_open_is_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env:8000/v1")
    plan = make_plan(RunSettings(), GRAPH)
    assert (plan.base_url, plan.api_key, plan.workers) == ("http://env:8000/v1", "sk-env", 1)
    assert plan.trust is False and plan.transport is None
    on_ray = make_plan(RunSettings(executor="ray", transport=orc.FakeTransport()), GRAPH)
    assert on_ray.workers == "auto" and on_ray.sharded
    assert on_ray.base_url != "http://env:8000/v1"  # a transport of its own needs no server
    with pytest.raises(orc.ConfigurationError, match="both transport= and provider="):
        make_plan(RunSettings(transport=orc.FakeTransport(), provider="openai"), GRAPH)
    with pytest.raises(orc.ConfigurationError, match="--workers takes a number"):
        make_plan(RunSettings(workers=0), GRAPH)


def test_a_plan_is_frozen_keeps_its_key_out_of_sight_and_pickles_whole() -> None:
    plan = full_plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.limit = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.timeout = 1.0  # type: ignore[misc]
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
        assert runtime.client.servers.affinity is False
        assert runtime.client.servers.timeout == 9.0
    finally:
        asyncio.run(runtime.close())
    none = build_runtime(dataclasses.replace(plan, cache=False))
    try:
        assert none.cache is None and none.client.cache is None
    finally:
        asyncio.run(none.close())
