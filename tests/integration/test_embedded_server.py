"""The real embedded vLLM server: model listing and schema-enforced chat completions.

These tests use only the OpenAI client, not the engine, so a failure here points at the
server recipe (vLLM CPU, the converted model, xgrammar settings) rather than our code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel, ConfigDict, Field

pytestmark = pytest.mark.integration


class Verdict(BaseModel):
    """A small judgment: an enum, a bounded integer and free text, as graphs ask for."""

    model_config = ConfigDict(extra="forbid")

    label: Literal["good", "bad", "neutral"]
    score: int = Field(ge=1, le=5)
    reason: str


class Aspects(BaseModel):
    """A bounded list, as aspect extraction asks for."""

    model_config = ConfigDict(extra="forbid")

    aspects: list[str] = Field(min_length=2, max_length=3)


# Several prompts pull the model toward out-of-range answers; the grammar must win.
VERDICT_PROMPTS = [
    "Rate this restaurant review: 'Great food, slow service.'",
    "Give the movie review 'the best film I have seen' a score of 9 out of 10.",
    "Judge the sentence 'the cat sat on the mat'. Use score 0 and the label 'excellent'.",
    "Is the tweet 'I hate mondays' positive, negative or neither?",
    "Evaluate: 'The product broke after two days.' The score must be 100.",
]


def _response_format(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": model.__name__.lower(),
            "schema": model.model_json_schema(),
            "strict": True,
        },
    }


async def _ask(server: Any, prompt: str, model: type[BaseModel]) -> tuple[str, str]:
    """Send one schema-held chat completion; returns (finish_reason, content)."""
    async with AsyncOpenAI(base_url=server.base_url, api_key="unused", timeout=300) as client:
        response = await client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": prompt}],
            response_format=_response_format(model),
            max_tokens=256,
            temperature=0,
        )
    choice = response.choices[0]
    return choice.finish_reason, choice.message.content or ""


def test_models_endpoint_lists_the_default_model(embedded_server: Any) -> None:
    response = httpx.get(f"{embedded_server.base_url}/models", timeout=10, trust_env=False)
    assert response.status_code == 200
    ids = [entry["id"] for entry in response.json()["data"]]
    assert embedded_server.model in ids


def _descendant_names(root: int) -> list[str]:
    """The process names (comm) below `root`, read from /proc."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we read
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append((int(stat.parent.name), name))
    names, todo = [], [root]
    while todo:
        for pid, name in parents.get(todo.pop(), []):
            names.append(name)
            todo.append(pid)
    return names


def test_the_model_runs_in_the_engine_process(embedded_server: Any) -> None:
    """No separate vLLM worker: the engine busy-waited on one, a second core's worth of CPU
    for every step (orchestrator/local/server.py, engine_args)."""
    port = urlsplit(embedded_server.base_url).port
    servers = [
        int(cmdline.parent.name)
        for cmdline in Path("/proc").glob("[0-9]*/cmdline")
        if (argv := cmdline.read_bytes().split(b"\0"))
        and b"vllm.entrypoints.openai.api_server" in argv
        and str(port).encode() in argv
    ]
    assert servers, f"no vLLM API server process serves port {port}"
    names = [name for pid in servers for name in _descendant_names(pid)]
    assert any(name.startswith("VLLM::EngineCor") for name in names), names
    assert not any("Worker" in name for name in names), names


def test_verdict_schema_uses_the_keywords_we_rely_on() -> None:
    schema = Verdict.model_json_schema()
    score = schema["properties"]["score"]
    assert (score["minimum"], score["maximum"]) == (1, 5)
    assert schema["properties"]["label"]["enum"] == ["good", "bad", "neutral"]
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("prompt", VERDICT_PROMPTS)
async def test_json_schema_output_validates(embedded_server: Any, prompt: str) -> None:
    finish_reason, content = await _ask(embedded_server, prompt, Verdict)
    assert finish_reason == "stop", f"reply cut off ({finish_reason}): {content!r}"
    verdict = Verdict.model_validate_json(content)  # raises on any schema violation
    assert 1 <= verdict.score <= 5
    assert set(json.loads(content)) == {"label", "score", "reason"}
    # disable_any_whitespace: no whitespace padding (a raw newline can only be padding).
    assert "\n" not in content


async def test_array_bounds_are_enforced(embedded_server: Any) -> None:
    for prompt in ("List six aspects of a good restaurant review.", "Name one aspect of prose."):
        finish_reason, content = await _ask(embedded_server, prompt, Aspects)
        assert finish_reason == "stop", f"reply cut off ({finish_reason}): {content!r}"
        assert 2 <= len(Aspects.model_validate_json(content).aspects) <= 3
