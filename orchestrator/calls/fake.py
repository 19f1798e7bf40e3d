"""Where the fake transport lived before `orchestrator.providers.fake`: its names, kept for
code that imports them from here."""

from __future__ import annotations

from ..errors import FakeTransientError
from ..providers.fake import (
    FAKE_BASE_URL,
    FAKE_MODEL,
    FakeAnswer,
    FakeConnection,
    FakeRequest,
    FakeTransport,
    schema_answer,
    schema_instance,
)

__all__ = [
    "FAKE_BASE_URL",
    "FAKE_MODEL",
    "FakeAnswer",
    "FakeConnection",
    "FakeRequest",
    "FakeTransientError",
    "FakeTransport",
    "schema_answer",
    "schema_instance",
]
