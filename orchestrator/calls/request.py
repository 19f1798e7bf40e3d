"""The request a node call sends: its sampling values, its chat body, and the schema
instruction prompt-only mode adds."""

from __future__ import annotations

import json
from typing import Any

from ..graph.spec import Sampling

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


def request_body(
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    n: int,
    schema: dict[str, Any] | None,
) -> dict[str, Any]:
    """The chat-completion body of one request; `schema` is enforced by the server when given.

    Also what a replay of a traced call re-sends (bench/vllm_saturation.py).
    """
    body: dict[str, Any] = {"model": model, "messages": messages, "n": n}
    for name in ("temperature", "max_tokens", "top_p", "seed"):
        if params.get(name) is not None:
            body[name] = params[name]
    if params.get("logprobs"):
        body["logprobs"] = True
        body["top_logprobs"] = params["logprobs"]
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": True},
        }
    return body


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
