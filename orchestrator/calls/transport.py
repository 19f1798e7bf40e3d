"""Where the transport seam lived before `orchestrator.providers`: its names, kept for code
that imports them from here. New code imports from `orchestrator.providers`."""

from __future__ import annotations

from ..providers.base import Connection, Provider, ServedModel, Transport
from ..providers.openai_compat import OpenAITransport, make_http_client, retry_after_seconds

__all__ = [
    "Connection",
    "OpenAITransport",
    "Provider",
    "ServedModel",
    "Transport",
    "make_http_client",
    "retry_after_seconds",
]
