"""A run setting is declared once (issue 36, item 1): `RunSettings` lists it, and the
command line, `orc.run`'s keyword arguments, the plan, the manifest's `parameters`, the run
key and the client's arguments are derived from that listing. These tests hold the
listings that remain (the TypedDict `Unpack` needs, the command's options) to the record,
and check that a setting added to the record reaches the manifest and the run key with no
other edit, without changing the key of a run made before it."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import pytest
import typer
from helpers import judge_graph

import orchestrator as orc
from orchestrator.calls.client import LLMClient
from orchestrator.cli import app
from orchestrator.engine.plan import RunPlan
from orchestrator.engine.settings import (
    FIELDS,
    SETTINGS,
    UNSET,
    Resample,
    RunArgs,
    RunSettings,
    about,
    default_of,
)

# The `run` command's options that are no setting: what it reads and writes, and how.
CLI_ONLY = {"graph", "--data", "-d", "--out", "--no-cache", "--port", "--prompts"}


def _run_command() -> Any:
    group = typer.main.get_command(app)
    return group.commands["run"]  # type: ignore[attr-defined, no-any-return]


def _options(command: Any) -> dict[str, Any]:
    """Each option of `command` by every name it answers to (`--x` and `--no-x`)."""
    found: dict[str, Any] = {}
    for param in command.params:
        names = [*param.opts, *param.secondary_opts] if param.opts[0].startswith("-") else []
        for name in names or [param.name or ""]:
            found[name] = param
    return found


def test_the_typed_dict_and_the_record_list_the_same_settings_with_the_same_types() -> None:
    assert get_type_hints(RunArgs) == get_type_hints(RunSettings)
    assert list(RunArgs.__annotations__) == list(SETTINGS)
    assert RunArgs.__required_keys__ == frozenset()  # every setting has a default


def test_the_api_the_plan_and_the_cli_expose_the_same_settings() -> None:
    api = inspect.signature(orc.run).parameters
    for name in SETTINGS:
        assert api[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert api[name].default == default_of(name), name
    assert [f.name for f in dataclasses.fields(RunPlan)] == list(SETTINGS)
    command = _run_command()
    options = _options(command)
    negations = {name for param in command.params for name in param.secondary_opts}
    flags = {meta.flag.split("/")[0] for meta in SETTINGS.values() if meta.flag}
    # Every option of `run` is a setting's, or one of the few that are the command's own.
    assert set(options) - negations == flags | CLI_ONLY, (
        "an option of `run` that is no setting's, or a setting's flag `run` lacks"
    )
    for name, meta in SETTINGS.items():
        if meta.flag is None or meta.by_hand:
            continue
        param = options[meta.flag.split("/")[0]]
        assert param.name == name, name  # `given_settings` reads it under the setting's name
        assert getattr(param, "help", None) == meta.help, name
        expected = default_of(name) if meta.cli_default is UNSET else meta.cli_default
        assert param.default == expected, name
        if "/" in meta.flag:
            assert param.secondary_opts == [meta.flag.split("/")[1]], name


def test_the_client_takes_every_setting_its_record_says_it_applies() -> None:
    client = inspect.signature(LLMClient).parameters
    for name, value in RunSettings().client_options().items():
        assert name in client, f"LLMClient takes no {name}"
        assert client[name].default == value, f"LLMClient's default {name} is not the setting's"


def test_the_manifest_records_the_marked_settings_as_runs_before_recorded_them() -> None:
    section = RunPlan(base_url="http://a/v1", api_key="k", workers=1).manifest_section()
    # The shape a run wrote before the record existed (same keys, same order, same values).
    assert section == {
        "concurrency": "default",
        "affinity": True,
        "limit": None,
        "params": {},
        "cache": False,
        "refresh": False,
        "structured": "auto",
        "timeout": 120.0,
        "server_wait": 600.0,
        "workers": 1,
        "executor": "local",
    }
    assert list(section) == [n for n, m in SETTINGS.items() if m.manifest and not m.only_if_set]
    retest = RunSettings(resample=Resample(repeat=2), transport=orc.FakeTransport())
    assert retest.manifest_section()["resample"] == {
        "repeat": 2,
        "nodes": "every llm node",
        "temperature": None,
    }
    assert retest.manifest_section()["transport"] == "FakeTransport"


def test_the_run_key_takes_a_setting_of_its_own_only_away_from_its_default() -> None:
    # A run made with no such setting keeps its key: defaults add no part.
    assert RunSettings().key_parts() == {}
    # A retest's part, as runs before the record wrote it (their keys must still match).
    parts = RunSettings(resample=Resample(repeat=1)).key_parts()
    assert parts == {"resample": '{"nodes":"every llm node","repeat":1,"temperature":null}'}
    # Settings that only say how a run goes never reach the key.
    calm = RunSettings(timeout=1.0, server_wait=2.0, affinity=False, concurrency=3, workers=2)
    assert calm.key_parts() == {}
    for name, meta in SETTINGS.items():
        assert meta.keyed_by is None or meta.run_key, f"{name}: keyed_by without run_key"


@dataclass(frozen=True, kw_only=True)
class WithSeed(RunSettings):
    """The record with one setting more, as a contributor would add it."""

    seed: int | None = field(
        default=None,
        metadata=about(help="Sampling seed.", flag="--seed", run_key=True, manifest=True),
    )


def test_a_setting_added_to_the_record_reaches_the_manifest_and_the_key() -> None:
    assert WithSeed().key_parts() == {}  # old runs' keys hold
    assert WithSeed(seed=7).key_parts() == {"seed": "7"}
    assert WithSeed(seed=7).manifest_section()["seed"] == 7
    assert "seed" not in RunSettings().manifest_section()


def test_an_unknown_setting_is_refused_as_python_refuses_a_keyword() -> None:
    graph = orc.graph_from_dict(judge_graph(), {"judge.jinja": "Rate {{ text }}"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'concurency'"):
        orc.run(graph, [], concurency=3)  # type: ignore[call-arg]


def test_every_field_of_the_record_carries_its_setting() -> None:
    hints: dict[str, Any] = get_type_hints(RunSettings)
    assert set(FIELDS) == set(hints)
    for name, meta in SETTINGS.items():
        assert meta.help.strip(), f"{name} has no help"
        assert not meta.by_hand or meta.flag, f"{name}: by_hand needs the flag it is set by"
