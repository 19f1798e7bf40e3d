"""LLM calls in layers: StructuredCaller (validate, re-ask) → CachedCaller → Sender with a
RetryPolicy → each endpoint's provider (orchestrator.providers: OpenAI-compatible, batch or
the in-process fake), over a ServerRegistry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .client import LLMClient
    from .compute_runtime import Runtime
    from .request import request_params
    from .retry import RetryPolicy

lazy(__name__)

__all__ = [
    "LLMClient",
    "RetryPolicy",
    "Runtime",
    "request_params",
]
