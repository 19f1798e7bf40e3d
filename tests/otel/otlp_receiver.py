"""A plain OTLP/HTTP traces receiver on a real loopback socket, for the exporter's tests:
each POST's protobuf body decoded with opentelemetry-proto, its spans and headers kept."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value_of(any_value: Any) -> Any:
    """An OTLP AnyValue as Python (the kinds the exporter sends)."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@dataclass
class Span:
    """One received span, its ids as ints and its attributes and events as dicts."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    kind: int
    start: int
    end: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: int
    scope: str
    resource: dict[str, Any]


@dataclass
class Receiver:
    url: str
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    status: int = 200  # what it answers
    first: list[int] = field(default_factory=list)  # answered, one each, before `status`
    # Close each connection after its answer without saying so (as a server whose idle
    # keep-alive connections time out between requests), rather than with Connection: close.
    drop_silently: bool = False

    def take(self) -> list[Span]:
        """The spans received so far, forgotten here."""
        found, self.spans = self.spans, []
        return found


def decode(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest.FromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    Span(
                        name=span.name,
                        trace_id=int.from_bytes(span.trace_id, "big"),
                        span_id=int.from_bytes(span.span_id, "big"),
                        parent_id=int.from_bytes(span.parent_span_id, "big") or None,
                        kind=span.kind,
                        start=span.start_time_unix_nano,
                        end=span.end_time_unix_nano,
                        attributes={a.key: value_of(a.value) for a in span.attributes},
                        events=[
                            (e.name, {a.key: value_of(a.value) for a in e.attributes})
                            for e in span.events
                        ],
                        status=span.status.code,
                        scope=scope_spans.scope.name,
                        resource=resource,
                    )
                )
    return found


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver serving on a free loopback port until the block ends."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                status = receiver.first.pop(0) if receiver.first else receiver.status
                receiver.bodies.append(body)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                if status == 200 and self.path == "/v1/traces":
                    # As a collector does: a gzipped body is said so in its header.
                    if self.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    receiver.spans.extend(decode(body))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(status if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            if not receiver.drop_silently:
                self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}/v1/traces")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
