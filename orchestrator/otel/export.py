"""Sending spans over OTLP/HTTP (protobuf), the one place that imports OpenTelemetry: the
endpoint and headers resolved (the caller's, else OTEL_EXPORTER_OTLP_* from the
environment), `SpanData` encoded as an export request with the ids and times the trace
gave them (`Encoder`), POSTed (`Sender`), and a finished run folder exported whole
(`export_run`). The live exporter (live.py) sends through the same two."""

from __future__ import annotations

import gzip
import logging
import os
import ssl
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from ..errors import ConfigurationError, ExportError, RunFolderError
from ..shipped import __version__, pip_install
from ..store import RunReader, TraceReader
from .spans import SCOPE, SEMCONV_VERSION, AttributeValue, RunFacts, SpanBuilder, SpanData

log = logging.getLogger(__name__)

ENV = "env"  # `--otlp env`: the endpoint the OTEL_EXPORTER_OTLP_* variables name
BATCH = 512  # spans per request (the SDK's batch processor's default)
TIMEOUT = 10.0  # seconds a request may take, retries included (the SDK's default)
RETRY_PAUSE = 0.5  # seconds before the first retry of a request, doubled after each


def require_otel() -> None:
    """ConfigurationError naming the extra when OpenTelemetry's protobuf classes are missing."""
    try:
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2  # noqa: F401
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


class Encoder:
    """`SpanData` straight into the protobuf body of an OTLP export request, one resource and
    scope: the ids and times are the trace's own. Built with opentelemetry-proto's classes
    alone, field by field in place, because the SDK's way (its `ReadableSpan`s, then its
    generic encoder) cost three times as much CPU a span, and the live sender must keep
    up with the run on the same cores."""

    def __init__(self) -> None:
        require_otel()
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self._request = ExportTraceServiceRequest
        # The resource and scope every request starts from, encoded once.
        head = ExportTraceServiceRequest()
        resource_spans = head.resource_spans.add()
        _put(
            resource_spans.resource.attributes,
            {"service.name": "orchestrator", "service.version": __version__},
        )
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = SCOPE
        scope_spans.scope.version = __version__
        scope_spans.schema_url = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
        self._head = head.SerializeToString()

    def __call__(self, spans: Iterable[SpanData]) -> bytes:
        """One request's body carrying `spans`."""
        request = self._request.FromString(self._head)
        add = request.resource_spans[0].scope_spans[0].spans.add
        for span in spans:
            out = add(
                trace_id=span.trace_id.to_bytes(16, "big"),
                span_id=span.span_id.to_bytes(8, "big"),
                name=span.name,
                kind=CLIENT if span.client else INTERNAL,
                start_time_unix_nano=round(span.start * 1e9),
                end_time_unix_nano=round(span.end * 1e9),
                flags=HAS_IS_REMOTE,  # what the SDK says of a local parent: not remote
            )
            if span.parent_id is not None:
                out.parent_span_id = span.parent_id.to_bytes(8, "big")
            _put(out.attributes, span.attributes)
            for event in span.events:
                added = out.events.add(name=event.name, time_unix_nano=round(event.time * 1e9))
                _put(added.attributes, event.attributes)
            if span.error is not None:
                out.status.code = STATUS_ERROR
                out.status.message = span.error
        return request.SerializeToString()


# OTLP's enum values (trace.proto), written as numbers so that no module-level import of
# opentelemetry is needed.
INTERNAL, CLIENT = 1, 3  # Span.SpanKind
STATUS_ERROR = 2  # Status.StatusCode
HAS_IS_REMOTE = 0x100  # SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK


def _put(into: Any, attributes: Mapping[str, AttributeValue | None]) -> None:
    """Attributes added to a repeated KeyValue field, each value its own AnyValue kind."""
    add = into.add
    for key, value in attributes.items():
        _set(add(key=key).value, value)


def _set(into: Any, value: AttributeValue | None) -> None:
    # str first (most are), bool before int (a bool is an int).
    if isinstance(value, str):
        into.string_value = value
    elif value is True or value is False:
        into.bool_value = value
    elif isinstance(value, int):
        into.int_value = value
    elif isinstance(value, float):
        into.double_value = value
    elif value is None:
        into.SetInParent()  # e.g. a token count the trace lacks: the key, an empty value
    else:
        add = into.array_value.values.add
        for item in value:
            _set(add(), item)


def _otel_env(name: str) -> str:
    """OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name> (as the SDK reads
    them): the CA file of a backend with a private certificate, and `gzip` compression."""
    for variable in (f"OTEL_EXPORTER_OTLP_TRACES_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = os.environ.get(variable, "").strip()
        if value:
            return value
    return ""


class Sender:
    """Request bodies POSTed to an OTLP/HTTP traces endpoint over one kept-alive connection;
    a 429, a 5xx or a lost connection tried again, with growing pauses, while the timeout
    (per request, retries included) allows. The headers are only sent."""

    def __init__(self, endpoint: str, headers: Mapping[str, str], timeout: float = TIMEOUT):
        parts = urlsplit(endpoint)
        self.endpoint = endpoint
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._connection: HTTPConnection
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=_otel_env("CERTIFICATE") or None)
            self._connection = HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout, context=context
            )
        else:
            self._connection = HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        self._headers = {"Content-Type": "application/x-protobuf", **headers}
        self.gzip = _otel_env("COMPRESSION").lower() == "gzip"
        if self.gzip:
            self._headers["Content-Encoding"] = "gzip"
        self.timeout = timeout
        self.problem = ""  # why the last request that failed did

    def __call__(self, body: bytes) -> bool:
        """Whether the endpoint took `body` within the timeout."""
        deadline = time.monotonic() + self.timeout
        pause = RETRY_PAUSE
        if self.gzip:
            body = gzip.compress(body, compresslevel=6)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                log.debug("the OTLP endpoint %s timed out: %s", self.endpoint, self.problem)
                return False
            reused = self._connection.sock is not None
            try:
                self._connection.timeout = left
                if reused:
                    self._connection.sock.settimeout(left)
                self._connection.request("POST", self.path, body, self._headers)
                response = self._connection.getresponse()
                response.read()
                if 200 <= response.status < 300:
                    return True
                self.problem = f"HTTP {response.status} {response.reason}"
                again = response.status == 429 or response.status >= 500
            except (OSError, HTTPException) as exc:
                self._connection.close()
                self.problem = str(exc) or type(exc).__name__
                if reused:
                    continue  # the kept-alive connection had been closed: at once, on a new one
                again = True
            if not again or time.monotonic() + pause >= deadline:
                log.debug(
                    "the OTLP endpoint %s did not take a request: %s", self.endpoint, self.problem
                )
                return False
            time.sleep(pause)
            pause *= 2

    def close(self) -> None:
        self._connection.close()


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
    send = Sender(url, parse_headers(headers), timeout)
    encode = Encoder()
    sent = 0
    traces: set[int] = set()
    batch: list[SpanData] = []
    try:
        for span in folder_spans(Path(folder), content=content):
            traces.add(span.trace_id)
            batch.append(span)
            if len(batch) == BATCH:
                sent += _send(send, encode(batch), len(batch), sent)
                batch = []
        if batch:
            sent += _send(send, encode(batch), len(batch), sent)
    finally:
        send.close()
    log.debug("exported %d spans of %d examples to %s", sent, len(traces), url)
    return Exported(sent, len(traces), url)


def _send(send: Sender, body: bytes, count: int, sent: int) -> int:
    if not send(body):
        raise ExportError(
            f"the OTLP endpoint {send.endpoint} did not take the spans after {sent} sent "
            f"({send.problem}); is the backend up, and does it want a key (--otlp-header)? "
            "Exporting again is safe: the ids are the same"
        )
    return count
