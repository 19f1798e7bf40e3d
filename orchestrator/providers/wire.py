"""The OpenAI chat-completion wire format of a request, apart from the client that sends it:
batch files and the fake provider write the same body without importing the SDK (which
costs half a second of every command's start)."""

from __future__ import annotations

from typing import Any

from .base import ChatRequest


def chat_body(request: ChatRequest) -> dict[str, Any]:
    """The OpenAI chat-completion body of a request; its schema goes in `response_format`
    when the server is to enforce it. What a batch file line carries too, and what a replay
    of a traced call re-sends (bench/vllm_saturation.py)."""
    body: dict[str, Any] = {"model": request.model, "messages": request.messages, "n": request.n}
    # The key order is the one the wire has always had (tests/calls/test_wire.py, batch ids).
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.seed is not None:
        body["seed"] = request.seed
    if request.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = request.logprobs
    schema = request.enforced_schema
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": True},
        }
    return body
