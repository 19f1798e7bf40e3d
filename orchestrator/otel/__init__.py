"""A run's decision trace in an OpenTelemetry backend (Phoenix, Langfuse, Jaeger, any OTLP
collector): spans after the GenAI semantic conventions, sent over OTLP/HTTP after the run
(`export_run`) or while it goes (`OtlpObserver`). OpenTelemetry itself is imported only
when spans are sent (the `otel` extra); building them needs nothing beyond the core."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .export import Exported, export_run, parse_headers, require_otel, resolve_endpoint
    from .live import OtlpObserver
    from .spans import SEMCONV_VERSION, RunFacts, SpanBuilder, SpanData, derived_id, trace_id

lazy(__name__)

__all__ = [
    "SEMCONV_VERSION",
    "Exported",
    "OtlpObserver",
    "RunFacts",
    "SpanBuilder",
    "SpanData",
    "derived_id",
    "export_run",
    "parse_headers",
    "require_otel",
    "resolve_endpoint",
    "trace_id",
]
