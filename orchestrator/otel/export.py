"""Sending spans over OTLP/HTTP (protobuf), the one place that imports OpenTelemetry: the
endpoint and headers resolved (the caller's, else OTEL_EXPORTER_OTLP_* from the
environment), `SpanData` turned into the SDK's spans with the ids and times the trace
gave them, and a finished run folder exported whole (`export_run`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import yaml

from ..errors import ConfigurationError, ExportError, RunFolderError
from ..shipped import __version__, pip_install
from ..store import RunReader, TraceReader
from .spans import SCOPE, SEMCONV_VERSION, RunFacts, SpanBuilder, SpanData

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

ENV = "env"  # `--otlp env`: the endpoint the OTEL_EXPORTER_OTLP_* variables name
BATCH = 512  # spans per request (the SDK's batch processor's default)
TIMEOUT = 10.0  # seconds a request may take, retries included (the SDK's default)


def require_otel() -> None:
    """ConfigurationError naming the extra when the OpenTelemetry SDK or exporter is missing."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            f"--otlp needs the OpenTelemetry exporter: {pip_install('otel')}"
        ) from None


def resolve_endpoint(endpoint: str | None) -> str:
    """The traces endpoint: the URL given, or (given `env` or nothing) the one
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names, else OTEL_EXPORTER_OTLP_ENDPOINT's
    /v1/traces; ConfigurationError naming the option when there is none."""
    if endpoint and endpoint != ENV:
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"--otlp takes the full OTLP/HTTP traces URL (e.g. "
                f"http://127.0.0.1:4318/v1/traces) or `env`, not {endpoint!r}"
            )
        return endpoint
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if base:
        return base.rstrip("/") + "/v1/traces"
    raise ConfigurationError(
        "--otlp env: neither OTEL_EXPORTER_OTLP_TRACES_ENDPOINT nor OTEL_EXPORTER_OTLP_ENDPOINT "
        "is set; give the traces URL, e.g. --otlp http://127.0.0.1:4318/v1/traces"
    )


def parse_headers(given: Iterable[str]) -> dict[str, str]:
    """Request headers: OTEL_EXPORTER_OTLP_HEADERS, then OTEL_EXPORTER_OTLP_TRACES_HEADERS,
    then each `k=v` given (a later one wins); ConfigurationError naming --otlp-header for
    one without `=`. They are only sent, never written anywhere."""
    found: dict[str, str] = {}
    for variable in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        for pair in os.environ.get(variable, "").split(","):
            key, sep, value = pair.partition("=")
            if sep and key.strip():
                # Percent-encoded, as the OpenTelemetry spec has it.
                found[key.strip().lower()] = unquote(value.strip())
    for pair in given:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            # Not echoed: what was typed may be the key itself.
            raise ConfigurationError("--otlp-header takes key=value; one was given without `=`")
        found[key.strip().lower()] = value.strip()
    return found


def span_exporter(endpoint: str, headers: dict[str, str], timeout: float = TIMEOUT) -> SpanExporter:
    """The SDK's OTLP/HTTP protobuf exporter to `endpoint` (a full traces URL)."""
    require_otel()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=timeout)


class Converter:
    """`SpanData` into the SDK's `ReadableSpan`, under one resource and scope: the ids and
    times are the trace's own, which the SDK's tracer cannot be told, so the spans are
    built finished rather than started and ended."""

    def __init__(self) -> None:
        require_otel()
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.resource = Resource({"service.name": "orchestrator", "service.version": __version__})
        self.scope = InstrumentationScope(
            SCOPE, __version__, f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
        )

    def __call__(self, span: SpanData) -> ReadableSpan:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        flags = TraceFlags(TraceFlags.SAMPLED)
        parent = (
            None
            if span.parent_id is None
            else SpanContext(span.trace_id, span.parent_id, is_remote=False, trace_flags=flags)
        )
        return ReadableSpan(
            span.name,
            context=SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=flags),
            parent=parent,
            resource=self.resource,
            attributes=dict(span.attributes),
            events=[
                Event(e.name, attributes=dict(e.attributes), timestamp=_nanos(e.time))
                for e in span.events
            ],
            kind=SpanKind.CLIENT if span.client else SpanKind.INTERNAL,
            status=(
                Status(StatusCode.ERROR, span.error)
                if span.error is not None
                else Status(StatusCode.UNSET)
            ),
            start_time=_nanos(span.start),
            end_time=_nanos(span.end),
            instrumentation_scope=self.scope,
        )


def _nanos(seconds: float) -> int:
    return round(seconds * 1e9)


def run_facts(reader: RunReader, trace: TraceReader) -> RunFacts:
    """What every span of the folder's run shares, from its manifest, trace and snapshot;
    RunFolderError when no run id is recorded (nothing to derive the ids from)."""
    manifest = reader.manifest
    root = manifest.parts[0].run_id if manifest.parts else manifest.run_id
    if not root:
        runs = trace.runs()
        root = runs[0].run_id if runs else ""
    if not root:
        raise RunFolderError(f"{reader.path}: no run id recorded, so its spans have no ids")
    identities = {key: entry.identity for key, entry in manifest.servers.items() if entry.identity}
    return RunFacts(
        root=root,
        graph_name=manifest.graph.name,
        graph_hash=manifest.graph.hash,
        kinds=node_kinds(reader.snapshot_graph),
        identities=identities,
    )


def node_kinds(snapshot: Path | None) -> dict[str, str]:
    """Each node's kind as the run's snapshot of its graph says (empty when it has none or
    it cannot be read: the spans then tell an LLM node from the rest by its prompt)."""
    if snapshot is None:
        return {}
    try:
        spec = yaml.safe_load(snapshot.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    nodes = spec.get("nodes") if isinstance(spec, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {
        str(name): str(node.get("kind", "llm"))
        for name, node in nodes.items()
        if isinstance(node, dict)
    }


def folder_spans(folder: Path, *, content: bool = True) -> Iterator[SpanData]:
    """Every span of a run folder: each node run's as the trace holds them, then each
    example's root span (over all of its node runs, every part of a resumed run)."""
    reader = RunReader(folder)
    if not reader.has_trace:
        raise RunFolderError(f"{folder}: no traces.sqlite, so there is nothing to export")
    with TraceReader.open(reader.traces_path) as trace:
        builder = SpanBuilder(run_facts(reader, trace), content=content)
        for run in trace.node_runs():
            yield from builder.spans(run)
    for example in builder.examples:
        yield builder.example_span(example)


@dataclass(frozen=True)
class Exported:
    """What `export_run` sent: spans, traces (examples) and where."""

    spans: int
    traces: int
    endpoint: str


def export_run(
    folder: str | Path,
    endpoint: str | None = None,
    headers: Sequence[str] = (),
    *,
    content: bool = True,
    timeout: float = TIMEOUT,
) -> Exported:
    """Send a run folder's decision trace to an OTLP/HTTP endpoint (`env` or None: the
    OTEL_EXPORTER_OTLP_* variables'), `BATCH` spans a request; `content=False` leaves out
    prompts, replies and outputs. ExportError when the backend refuses or does not answer."""
    url = resolve_endpoint(endpoint)
    exporter = span_exporter(url, parse_headers(headers), timeout)
    convert = Converter()
    from opentelemetry.sdk.trace.export import SpanExportResult

    sent = 0
    traces: set[int] = set()
    batch: list[Any] = []
    try:
        for span in folder_spans(Path(folder), content=content):
            traces.add(span.trace_id)
            batch.append(convert(span))
            if len(batch) == BATCH:
                sent += _send(exporter, batch, url, sent, SpanExportResult.SUCCESS)
                batch = []
        if batch:
            sent += _send(exporter, batch, url, sent, SpanExportResult.SUCCESS)
    finally:
        exporter.shutdown()
    log.debug("exported %d spans of %d examples to %s", sent, len(traces), url)
    return Exported(sent, len(traces), url)


def _send(exporter: SpanExporter, batch: list[Any], url: str, sent: int, ok: Any) -> int:
    if exporter.export(batch) != ok:
        raise ExportError(
            f"the OTLP endpoint {url} did not take the spans (after {sent} sent); is the "
            "backend up, and does it want a key (--otlp-header)? Exporting again is safe: "
            "the ids are the same"
        )
    return len(batch)
