"""A fake OpenAI-compatible HTTP server on loopback, for unit and fault-injection tests.

It serves ``/v1/models``, ``/v1/chat/completions``, vLLM's ``/tokenize`` and (when scripted)
vLLM's Prometheus ``/metrics`` from a background thread, so any client (sync or async,
including ``openai.AsyncOpenAI``) can talk to it. Each chat request is handed to a *responder*
that returns a :class:`Reply` describing what to send back: normal content, several samples,
logprobs, an HTTP error, a delay, a truncation or raw bytes. A `capacity` makes requests
beyond it queue, as a GPU server's batch does.

A run with `--structured auto` (the default) first sends one *canary* request, whose schema
has the properties `token` and `count`, to see whether the server enforces schemas: a custom
responder should answer it with `schema_responder` (`helpers.is_canary` tells it apart).

Run it standalone (for benchmarks) with ``python tests/fakeserver.py --port 9000 --latency 0.2``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import socket
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the fake server answers to one chat-completion request."""

    content: str | None = None
    status: int = 200
    delay: float = 0.0
    finish_reason: str = "stop"
    samples: list[str] | None = None
    logprobs: list[dict] | None = None
    raw_body: bytes | None = None
    usage: tuple[int, int] | None = None
    reset: bool = False  # drop the connection without answering
    cut_at: int | None = None  # send only this many bytes of the body, then drop the connection
    headers: dict[str, str] | None = None  # extra response headers, e.g. Retry-After
    trickle: float = 0.0  # seconds between the body's bytes (a server that drips its reply)


Responder = Callable[[dict], Reply]


# --------------------------------------------------------------------------------------------
# Responders
# --------------------------------------------------------------------------------------------


def schema_responder(body: dict) -> Reply:
    """Answer with a valid instance of the requested JSON schema, or "ok" when none was asked.

    This lets whole evaluation graphs run against the fake server without a model.
    """
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema") or {}
        return Reply(content=json.dumps(schema_instance(schema)))
    return Reply(content="ok")


def sequence(*replies: Reply | Responder) -> Responder:
    """Return a responder that yields ``replies`` in call order, repeating the last one forever.

    A callable in the list is invoked with the request body. Safe to share between threads.
    """
    if not replies:
        raise ValueError("sequence() needs at least one reply")
    lock = threading.Lock()
    state = {"next": 0}

    def respond(body: dict) -> Reply:
        with lock:
            index = min(state["next"], len(replies) - 1)
            state["next"] += 1
        item = replies[index]
        return item if isinstance(item, Reply) else item(body)

    return respond


def latency_responder(seconds: float, inner: Responder = schema_responder) -> Responder:
    """Return a responder that sleeps ``seconds`` (in the handler thread) then delegates."""

    def respond(body: dict) -> Reply:
        time.sleep(seconds)
        return inner(body)

    return respond


BIASES = ("none", "length", "injection")


def judge_responder(bias: str = "none") -> Responder:
    """A fake judge answering a `score` (1–10) from its prompt (any other schema: as
    `schema_responder`). `none`: the score is a hash of the prompt, so changing the text
    moves it at random, never one way; `length`: it grows with the prompt's words (one
    point per six); `injection`: the top score when the prompt carries an instruction to
    give it or a grade line, else as `none`."""
    if bias not in BIASES:
        raise ValueError(f"bias must be one of {', '.join(BIASES)}, not {bias!r}")

    def respond(body: dict) -> Reply:
        fmt = (body.get("response_format") or {}).get("json_schema") or {}
        if "score" not in (fmt.get("schema") or {}).get("properties", {}):
            return schema_responder(body)
        text = _message_text(body)
        if bias == "length":
            score = 1 + _word_count(text) // 6
        elif bias == "injection" and ("highest possible score" in text or "10/10" in text):
            score = 10
        else:
            score = zlib.crc32(text.encode()) % 10 + 1
        return Reply(content=json.dumps({"score": max(1, min(10, score))}))

    return respond


# --------------------------------------------------------------------------------------------
# Deterministic JSON-schema instances
# --------------------------------------------------------------------------------------------

_STRING_FORMATS: dict[str, str] = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def schema_instance(schema: dict, root: dict | None = None, variant: int = 0) -> Any:
    """Build a deterministic value that validates against ``schema``.

    ``root`` is the document that ``$ref`` pointers resolve against (defaults to ``schema``).
    ``variant`` > 0 asks for a different value where possible, so ``uniqueItems`` arrays work.
    """
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if "allOf" in schema:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            merged = _merge(merged, _resolve(part, root))
        schema = merged
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][variant % len(schema["enum"])]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branches = [_resolve(b, root) for b in schema[key]]
            usable = [b for b in branches if b.get("type") != "null"]
            return schema_instance(usable[0], root, variant) if usable else None

    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        if "properties" in schema:
            kind = "object"
        elif "items" in schema or "prefixItems" in schema:
            kind = "array"
        else:
            kind = "string"

    if kind == "object":
        props = schema.get("properties", {})
        return {name: schema_instance(sub, root, variant) for name, sub in props.items()}
    if kind == "array":
        return _array_instance(schema, root, variant)
    if kind in ("integer", "number"):
        return _number_instance(schema, integer=kind == "integer", variant=variant)
    if kind == "string":
        return _string_instance(schema, variant)
    if kind == "boolean":
        return variant % 2 == 0
    return None


def _resolve(schema: dict, root: dict) -> dict:
    """Follow local ``$ref`` pointers (``#/$defs/Name`` and the like) until a real schema."""
    seen: set[str] = set()
    while "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen or not ref.startswith("#"):
            raise ValueError(f"cannot resolve $ref {ref!r}")
        seen.add(ref)
        target: Any = root
        for part in filter(None, ref[1:].split("/")):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        # Sibling keywords next to $ref (e.g. a description) are kept, the target wins on clashes.
        schema = {**{k: v for k, v in schema.items() if k != "$ref"}, **target}
    return schema


def _merge(left: dict, right: dict) -> dict:
    """Shallow-merge two schemas for ``allOf``, uniting their properties and required lists."""
    merged = {**left, **right}
    if "properties" in left or "properties" in right:
        merged["properties"] = {**left.get("properties", {}), **right.get("properties", {})}
    if "required" in left or "required" in right:
        merged["required"] = [*left.get("required", []), *right.get("required", [])]
    return merged


def _array_instance(schema: dict, root: dict, variant: int) -> list:
    """Make ``max(minItems, 1)`` items (0 if ``maxItems`` is 0), distinct when asked to be."""
    prefix = schema.get("prefixItems", [])
    count = max(schema.get("minItems", 0), 1, len(prefix))
    if schema.get("maxItems") is not None:
        count = min(count, schema["maxItems"])
    items = schema.get("items")
    unique = bool(schema.get("uniqueItems"))
    out: list = []
    for i in range(count):
        sub = prefix[i] if i < len(prefix) else items if isinstance(items, dict) else {}
        out.append(schema_instance(sub, root, variant + i if unique else variant))
    return out


def _number_instance(schema: dict, *, integer: bool, variant: int) -> int | float:
    """Pick the minimum if there is one, else a value inside the bounds, else 1."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    lo_ex, hi_ex = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    step = 1 if integer else 0.5
    if lo is not None:
        value: float = lo
    elif lo_ex is not None:
        value = math.floor(lo_ex) + 1 if integer else lo_ex + step
        if hi_ex is not None and not integer and value >= hi_ex:
            value = (lo_ex + hi_ex) / 2
    elif hi is not None:
        value = min(1, hi)
    elif hi_ex is not None:
        value = min(1, math.ceil(hi_ex) - 1 if integer else hi_ex - step)
    else:
        value = 1
    multiple = schema.get("multipleOf")
    if multiple:
        value = math.ceil(value / multiple) * multiple
    if variant:
        bumped = value + variant * (multiple or 1)
        upper_ok = (hi is None or bumped <= hi) and (hi_ex is None or bumped < hi_ex)
        if upper_ok:
            value = bumped
    return int(value) if integer else float(value)


def _string_instance(schema: dict, variant: int) -> str:
    """A short non-empty string that respects ``minLength``/``maxLength`` (and common formats)."""
    fmt = schema.get("format")
    if fmt in _STRING_FORMATS and variant == 0:
        return _STRING_FORMATS[fmt]
    base = "text" if variant == 0 else f"text{variant}"
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    if len(base) < low:
        base += "x" * (low - len(base))
    if high is not None and len(base) > high:
        base = base[-high:] if high else ""
    return base


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


def _word_count(text: str) -> int:
    """Rough token count: whitespace-separated words."""
    return len(text.split())


def _message_text(body: dict) -> str:
    """Concatenate the text of all request messages (plain strings or content-part lists)."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _error_body(status: int, message: str) -> bytes:
    """An OpenAI-style error payload, which the openai client turns into a typed exception."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    error = {"message": message, "type": kind, "param": None, "code": status}
    return json.dumps({"error": error}).encode()


class _Handler(BaseHTTPRequestHandler):
    """Routes requests to the owning :class:`FakeServer`."""

    protocol_version = "HTTP/1.1"  # keep-alive, so benchmarks do not pay a connect per call
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet; tests inspect ``FakeServer.requests`` instead of logs."""

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        self.server.fake._track(self.connection, add=False)
        super().finish()

    def _hung(self) -> bool:
        """While the server plays dead, take the request and never answer it."""
        fake = self.server.fake
        if not fake.hanging.is_set():
            return False
        fake._stopping.wait()
        self.close_connection = True
        return True

    def _refused(self) -> bool:
        """While a key is required, a request without it gets 401 like a real server."""
        fake = self.server.fake
        if fake.api_key is None:
            return False
        if self.headers.get("Authorization") == f"Bearer {fake.api_key}":
            return False
        self._send(401, _error_body(401, "missing or wrong API key"))
        return True

    def _proxy_failing(self) -> bool:
        """While a proxy in front plays an error, every route answers it (models too)."""
        status = self.server.fake.proxy_status()
        if status is None:
            return False
        page = f"<html><body><h1>{status} {HTTPStatus(status).phrase}</h1></body></html>"
        self._send(status, page.encode(), content_type="text/html")
        return True

    def do_GET(self) -> None:
        """Serve the model list, and /metrics when scripted."""
        fake = self.server.fake
        fake.paths.append(self.path)
        if fake.on_request is not None:
            fake.on_request(self.path)
        if self._hung() or self._proxy_failing():
            return
        if self.path.rstrip("/") == "/metrics" and fake.metrics is not None:
            self._send_metrics(fake.metrics(fake).encode())
            return
        if self._refused():
            return
        if self.path.rstrip("/") == "/v1/models":
            data = [
                {"id": name, "object": "model", "created": 0, "owned_by": "fake"}
                for name in (fake.model, *fake.also_serves)
            ]
            if fake.root is not None:
                # What vLLM adds to its own entry: the weights it was started with.
                data[0].update(root=fake.root, max_model_len=fake.max_model_len)
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send(404, _error_body(404, f"no route for GET {self.path}"))

    def do_POST(self) -> None:
        """Serve chat completions and tokenization."""
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.fake.paths.append(self.path)
        if self.server.fake.on_request is not None:
            self.server.fake.on_request(self.path)
        self.server.fake.content_types.append(self.headers.get("Content-Type", ""))
        if self._hung() or self._proxy_failing() or self._refused():
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            self._send(400, _error_body(400, f"request body is not JSON: {exc}"))
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/chat/completions":
            self._chat(body)
        elif path in ("/tokenize", "/v1/tokenize"):
            self._tokenize(body)
        else:
            self._send(404, _error_body(404, f"no route for POST {self.path}"))

    def _chat(self, body: dict) -> None:
        """Ask the responder what to do (within the server's capacity, if it has one), then
        answer like a chat.completion endpoint."""
        fake = self.server.fake
        fake._record(body)
        with fake._serving():
            self._answer_chat(body)

    def _answer_chat(self, body: dict) -> None:
        fake = self.server.fake
        try:
            reply = fake.responder(body)
            if reply.delay > 0 and fake._stopping.wait(reply.delay):
                self.close_connection = True  # the server is shutting down; drop the request
                return
            payload = None if reply.raw_body is not None else fake.completion(body, reply)
        except Exception as exc:
            fake._record_error(exc)
            self._send(500, _error_body(500, f"responder failed: {type(exc).__name__}: {exc}"))
            return
        if reply.reset:
            self._reset()
        elif reply.raw_body is not None:
            self._send(reply.status, reply.raw_body, reply.cut_at, reply.headers, reply.trickle)
        elif reply.status != 200:
            message = reply.content or HTTPStatus(reply.status).phrase
            body = _error_body(reply.status, message)
            self._send(reply.status, body, reply.cut_at, reply.headers, reply.trickle)
        else:
            data = json.dumps(payload).encode()
            self._send(200, data, reply.cut_at, reply.headers, reply.trickle)

    def _tokenize(self, body: dict) -> None:
        """Mimic vLLM's ``/tokenize``: one stable fake token id per whitespace-separated word."""
        fake = self.server.fake
        with fake._lock:
            status = fake.tokenize_errors.pop(0) if fake.tokenize_errors else fake.tokenize_status
        if status is not None:
            self._send(status, _error_body(status, "tokenize refused"))
            return
        with fake._lock:
            fake._tokenizing += 1
            fake.peak_tokenize = max(fake.peak_tokenize, fake._tokenizing)
        try:
            if fake.tokenize_delay:
                fake._stopping.wait(fake.tokenize_delay)
        finally:
            with fake._lock:
                fake._tokenizing -= 1
        text = body.get("prompt")
        if not isinstance(text, str):
            text = _message_text(body)
        tokens = [zlib.crc32(word.encode()) % 32000 for word in text.split()]
        max_len = self.server.fake.max_model_len
        self._send_json(200, {"tokens": tokens, "count": len(tokens), "max_model_len": max_len})

    def _send_json(self, status: int, payload: Any) -> None:
        """Send ``payload`` as JSON."""
        self._send(status, json.dumps(payload).encode())

    def _send(
        self,
        status: int,
        data: bytes,
        cut_at: int | None = None,
        headers: dict[str, str] | None = None,
        trickle: float = 0.0,
        content_type: str = "application/json",
    ) -> None:
        """Send a response; with `cut_at`, announce all of `data` but send only its start and
        hang up (a reply truncated mid-body); with `trickle`, one byte every `trickle`
        seconds. A client that already left is ignored."""
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            body = data if cut_at is None else data[:cut_at]
            if trickle > 0:
                for index in range(len(body)):
                    if self.server.fake._stopping.wait(trickle):
                        break
                    self.wfile.write(body[index : index + 1])
                    self.wfile.flush()
            else:
                self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        if cut_at is not None:
            self._reset()

    def _send_metrics(self, data: bytes) -> None:
        """Send a /metrics page in 64 KB pieces, counting the bytes the socket took in
        `metrics_bytes_sent` (a client that stops reading stops the count); chunked, without
        a Content-Length, when `metrics_chunked` is set."""
        fake = self.server.fake
        chunked = fake.metrics_chunked
        piece = 1 << 16
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for start in range(0, len(data), piece):
                part = data[start : start + piece]
                framed = b"%x\r\n%b\r\n" % (len(part), part) if chunked else part
                self.wfile.write(framed)
                with fake._lock:
                    fake.metrics_bytes_sent += len(part)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _reset(self) -> None:
        """Drop the connection at once with a TCP reset (SO_LINGER 0), as a crashing peer does."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass


class _HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its :class:`FakeServer` and drops clients quietly."""

    daemon_threads = True
    request_queue_size = 1024  # the default backlog of 5 drops bursts of concurrent connects
    fake: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore errors from clients that disconnect mid-request (expected in timeout tests)."""

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept the next connection once `fake.accepting` is set; while it is clear the
        kernel queues up to the backlog's connections and drops the rest's handshakes."""
        while not self.fake.accepting.wait(0.05):
            if self.fake._stopping.is_set():
                raise OSError("the server is stopping")  # serve_forever skips a failed accept
        return super().get_request()


class FakeServer:
    """A loopback OpenAI-compatible server whose answers are scripted by ``responder``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``responder`` may be
    reassigned between test phases; ``requests`` holds every chat-completion body received and
    ``errors`` every exception a responder raised (each also answered with HTTP 500).
    Setting ``hanging`` makes every route (the model list too) accept requests and never
    answer, like a wedged process; :meth:`stop` then :meth:`start` on the same port plays a
    crash and restart.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        model: str = "fake-model",
        also_serves: tuple[str, ...] = (),
        root: str | None = "/models/fake",
        backlog: int = 1024,
    ) -> None:
        self.responder: Responder = responder or schema_responder
        self.model = model
        self.also_serves = also_serves  # more model names listed after `model`
        self.max_model_len = 4096
        # The `root` its model list reports for `model`, as vLLM does (the path it was
        # started with); None: leave `root` and `max_model_len` out, as other servers do.
        self.root = root
        self.requests: list[dict] = []
        self.content_types: list[str] = []  # each POST's Content-Type header, in order
        self.errors: list[Exception] = []
        self.host = "127.0.0.1"
        self.port = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.hanging = threading.Event()
        # Cleared: no new connection is accepted. With a small `backlog` a client then waits
        # in its connect (the kernel drops its handshake), as at a server whose accept queue
        # is full; with the default one the kernel completes the connects and holds them.
        self.accepting = threading.Event()
        self.accepting.set()
        self.backlog = backlog
        self.api_key: str | None = None  # when set, requests must carry it (else 401)
        self.proxy_error: tuple[int, float] | None = None  # (status, until time.monotonic())
        self.paths: list[str] = []  # every request path, in order (tokenize, models, chat)
        # Called with each request's path as it arrives, in its handler's thread, before
        # the answer: a test's hook to change the server at an exact point of a run.
        self.on_request: Callable[[str], None] | None = None
        self.tokenize_status: int | None = None  # answer /tokenize with this error status
        self.tokenize_errors: list[int] = []  # the next /tokenize requests answer these, once each
        self.tokenize_delay = 0.0  # seconds each /tokenize takes
        self.peak_tokenize = 0  # most /tokenize requests in progress at once
        self._tokenizing = 0
        # At most this many chat requests are answered at once; the rest queue (as a GPU
        # server's batch does). None: no limit.
        self.capacity: int | None = None
        self.running = 0  # chat requests being answered now
        self.waiting = 0  # chat requests queued for capacity now
        self.peak_running = 0
        self.preemptions = 0  # reported by `vllm_metrics`; a test raises it to script one
        self.kv_usage = 0.0  # reported by `vllm_metrics`
        self._capacity: threading.Semaphore | None = None
        # GET /metrics answers what this returns (e.g. `vllm_metrics`); None: 404.
        self.metrics: Callable[[FakeServer], str] | None = None
        self.metrics_chunked = False  # send /metrics without a Content-Length
        self.metrics_bytes_sent = 0  # bytes of /metrics pages the clients took in
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        """The server root (where vLLM puts ``/tokenize``)."""
        if self._httpd is None:
            raise RuntimeError("FakeServer is not started")
        return f"http://{self.host}:{self.port}"

    def start(self, port: int = 0) -> FakeServer:
        """Bind 127.0.0.1 (an ephemeral port by default) and serve from a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer((self.host, port), _Handler, bind_and_activate=False)
        httpd.request_queue_size = self.backlog
        try:
            httpd.server_bind()
            httpd.server_activate()
        except BaseException:
            httpd.server_close()
            raise
        httpd.fake = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=f"FakeServer:{self.port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests still sleeping in a ``delay`` are abandoned."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        # Kept-alive connections would go on being served by their threads; a stopped
        # server must drop them, as a crashed one does.
        with self._lock:
            open_connections = list(self._connections)
        for connection in open_connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def completion(self, body: dict, reply: Reply) -> dict:
        """Build the chat.completion JSON for ``reply`` (public so tests can inspect the shape)."""
        if reply.samples is not None:
            texts: list[str | None] = list(reply.samples)
        else:
            texts = [reply.content] * max(int(body.get("n") or 1), 1)
        choices = []
        for index, text in enumerate(texts):
            logprobs = None
            if index == 0 and reply.logprobs is not None:
                logprobs = {"content": reply.logprobs, "refusal": None}
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": text, "tool_calls": None},
                    "finish_reason": reply.finish_reason,
                    "logprobs": logprobs,
                }
            )
        if reply.usage is not None:
            prompt_tokens, completion_tokens = reply.usage
        else:
            prompt_tokens = _word_count(_message_text(body))
            completion_tokens = sum(_word_count(t or "") for t in texts)
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}-{uuid.uuid4().hex[:8]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    @contextlib.contextmanager
    def _serving(self) -> Iterator[None]:
        """Hold one unit of capacity (queueing for it) while a chat request is answered."""
        gate = None
        if self.capacity is not None:
            with self._lock:
                if self._capacity is None:
                    self._capacity = threading.Semaphore(self.capacity)
                gate = self._capacity
                self.waiting += 1
            gate.acquire()
            with self._lock:
                self.waiting -= 1
        with self._lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        try:
            yield
        finally:
            with self._lock:
                self.running -= 1
            if gate is not None:
                gate.release()

    def fail_every_route(self, status: int, seconds: float) -> None:
        """Play a proxy (nginx, a load balancer) in front of a restarting server: every
        route answers `status` for `seconds`."""
        self.proxy_error = (status, time.monotonic() + seconds)

    def proxy_status(self) -> int | None:
        if self.proxy_error is None:
            return None
        status, until = self.proxy_error
        if time.monotonic() >= until:
            self.proxy_error = None
            return None
        return status

    def _track(self, connection: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _record(self, body: dict) -> None:
        with self._lock:
            self.requests.append(body)

    def _record_error(self, exc: Exception) -> None:
        with self._lock:
            self.errors.append(exc)


def vllm_metrics(fake: FakeServer) -> str:
    """/metrics as vLLM 0.32 writes it (Prometheus text, one engine, `_total` on counters),
    from the fake server's own load: requests answered now, queued, and its scripted
    preemption counter and KV-cache fill."""
    labels = f'{{engine="0",model_name="{fake.model}"}}'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{labels} {float(fake.running)}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{labels} {float(fake.waiting)}\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{labels} {fake.kv_usage}\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f"vllm:num_preemptions_total{labels} {float(fake.preemptions)}\n"
    )


def main(argv: list[str] | None = None) -> None:
    """Serve :func:`schema_responder` replies in the foreground until Ctrl-C (for benchmarks)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per reply")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument(
        "--bias", choices=BIASES, default=None, help="answer `score` as a biased judge"
    )
    args = parser.parse_args(argv)
    inner = judge_responder(args.bias) if args.bias else schema_responder
    responder = latency_responder(args.latency, inner) if args.latency > 0 else inner
    server = FakeServer(responder, model=args.model).start(port=args.port)
    print(
        f"fake OpenAI server on {server.base_url} (latency {args.latency}s); Ctrl-C to stop",
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
