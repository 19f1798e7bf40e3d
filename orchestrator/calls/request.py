"""The request a node call sends: its sampling values, the schema instruction prompt-only
mode adds, and (for replays) its OpenAI chat body."""

from __future__ import annotations

import json
from typing import Any

from ..graph import Sampling
from ..providers import ChatRequest, StructuredMode, chat_body

DEFAULT_MAX_TOKENS = 512


def request_params(sampling: Sampling) -> dict[str, Any]:
    """The sampling values a node call sends (and records in the trace and cache key)."""
    return {
        "temperature": sampling.temperature,
        "max_tokens": sampling.max_tokens or DEFAULT_MAX_TOKENS,
        "top_p": sampling.top_p,
        "seed": sampling.seed,
        "logprobs": sampling.logprobs,
    }


def chat_request(
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    n: int,
    schema: dict[str, Any] | None,
    structured: StructuredMode = "server",
) -> ChatRequest:
    """The typed request of one call: `params` as `request_params` gives them, `schema`
    the reply's (enforced by the server when `structured` is "server")."""
    get = params.get
    return ChatRequest(
        model,
        messages,
        n,
        get("temperature"),
        get("max_tokens"),
        get("top_p"),
        get("seed"),
        get("logprobs"),
        schema,
        structured,
    )


def request_body(
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    n: int,
    schema: dict[str, Any] | None,
) -> dict[str, Any]:
    """The OpenAI chat body of one request (`schema` enforced by the server when given), as
    the default provider sends it; what a replay of a traced call re-sends
    (bench/vllm_saturation.py)."""
    return chat_body(chat_request(model, messages, params, n, schema))


def with_schema_instruction(
    messages: list[dict[str, Any]], schema: dict[str, Any]
) -> list[dict[str, Any]]:
    """Prompt-only mode: the schema instruction appended to the last user turn (many chat
    templates accept a system message only at the start)."""
    last = messages[-1]
    text = last["content"] + "\n\n" + schema_instruction(schema)
    return [*messages[:-1], {**last, "content": text}]


def schema_instruction(schema: dict[str, Any]) -> str:
    """What prompt-only mode adds to the conversation, since the server will not enforce it."""
    return (
        "Answer with a single JSON object and nothing else. It must validate against this "
        "JSON Schema:\n" + json.dumps(schema, ensure_ascii=False)
    )
