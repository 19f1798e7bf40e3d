"""The contract every provider keeps (the providers/ half of the conformance suite; the
run stores' half is test_run_store.py): a typed ChatRequest in, a ChatResponse with one
choice per sample out, capability gaps as the library's own errors, one-line descriptions.
A new provider joins the parametrization and passes it unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from fakeserver import FakeServer, schema_responder

from orchestrator.errors import OrchestratorError
from orchestrator.providers.base import ChatRequest, ChatResponse, Provider, Tokenizer
from orchestrator.providers.batch import BatchTransport
from orchestrator.providers.fake import FAKE_BASE_URL, FakeTransport
from orchestrator.providers.openai_compat import chat_body
from orchestrator.providers.registry import make_provider

SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}}


def _batch_reply(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "choices": [
            {"index": i, "message": {"content": '{"score": 1}'}, "finish_reason": "stop"}
            for i in range(int(body.get("n") or 1))
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }


@pytest.mark.parametrize("name", ["openai", "fake", "batch"])
async def test_every_provider_keeps_the_contract(name: str) -> None:
    """A ChatRequest in, a ChatResponse with one choice per sample out; a tokenizer gap or
    refusal is the library's error; exceptions are named in one line."""
    asked: list[dict[str, Any]] = []

    def lookup(custom_id: str) -> dict[str, Any] | None:
        return _batch_reply(asked[-1]) if asked else None

    with FakeServer(schema_responder) as server:
        provider: Provider
        if name == "openai":
            provider, url = make_provider("openai"), server.base_url
        elif name == "fake":
            provider, url = FakeTransport(), FAKE_BASE_URL
        else:
            provider, url = BatchTransport(lookup), "batch://run-batch/v1"
        request = ChatRequest("fake-model", [{"role": "user", "content": "x"}], 2, schema=SCHEMA)
        asked.append(chat_body(request))
        connection = provider.connect(url, "EMPTY", connections=4, timeout=10.0)
        try:
            reply = await connection.chat(request)
            assert isinstance(reply, ChatResponse) and len(reply.choices) == 2
            assert all(isinstance(c.content, str) for c in reply.choices)
            assert isinstance(connection, Tokenizer)
            try:
                counted = await connection.tokenize("fake-model", "two words")
            except OrchestratorError:
                pass  # the library's own error (batch rounds have no server to ask)
            else:
                assert counted["count"] == 2
            assert isinstance(await provider.list_models(url, "EMPTY"), list)
            assert provider.describe(ValueError("bad")).count("\n") == 0
        finally:
            await connection.close()
