"""Providers: how a run's requests reach what answers them. `base` holds the typed request
and reply and the protocols; `openai_compat` (OpenAI-compatible servers, vLLM), `batch`
(batch files) and `fake` (in-process, for tests) implement them; `registry` names the
built-in ones. See docs/providers.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .base import (
        ChatRequest,
        ChatResponse,
        Choice,
        Connection,
        LoadGauge,
        Provider,
        ServedModel,
        StructuredMode,
        Tokenizer,
        Transport,
        no_metrics,
        provider_identity,
        sending,
        served_identity,
    )
    from .batch import BATCH_BASE_URL, BatchTransport, Deferred, deferrals_unreported
    from .batchfile import BatchOutputLine, BatchRequestLine, ChatReply
    from .fake import FAKE_BASE_URL, FakeAnswer, FakeTransport
    from .registry import DEFAULT_PROVIDER, make_provider, unknown_provider
    from .reply import check_reply_size, parse_reply
    from .wire import chat_body

lazy(__name__)

__all__ = [
    "BATCH_BASE_URL",
    "DEFAULT_PROVIDER",
    "FAKE_BASE_URL",
    "BatchOutputLine",
    "BatchRequestLine",
    "BatchTransport",
    "ChatReply",
    "ChatRequest",
    "ChatResponse",
    "Choice",
    "Connection",
    "Deferred",
    "FakeAnswer",
    "FakeTransport",
    "LoadGauge",
    "Provider",
    "ServedModel",
    "StructuredMode",
    "Tokenizer",
    "Transport",
    "chat_body",
    "check_reply_size",
    "deferrals_unreported",
    "make_provider",
    "no_metrics",
    "parse_reply",
    "provider_identity",
    "sending",
    "served_identity",
    "unknown_provider",
]
