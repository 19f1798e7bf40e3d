"""The batch-file provider, the transport of a batch round: no server, only the replies
imported so far. A request is encoded as the OpenAI body a batch file line carries; one
whose reply was imported is answered with it; any other is written down for the next batch
file and *deferred*: its example stops where it stands, neither finished nor failed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import BatchUnsupported
from .base import ChatRequest, ChatResponse, ServedModel
from .batchfile import BatchRequestLine, custom_id
from .reply import parse_reply
from .wire import chat_body

# What a batch round's endpoints are called (no one listens; nothing is sent).
BATCH_BASE_URL = "batch://run-batch/v1"

Lookup = Callable[[str], dict[str, Any] | None]  # custom_id -> the imported reply body


class Deferred(BaseException):  # a signal, as CancelledError is, not an error
    """A request that waits for the next batch file.

    A BaseException, as asyncio's CancelledError is, so that no layer takes it for a failed
    call: the retry policy does not retry it, an `on_error: record` node does not turn it
    into a value, the engine writes no result line and the trace no failed node. The
    example simply does not finish in this round.
    """

    def __init__(self, request: BatchRequestLine) -> None:
        self.request = request
        super().__init__(f"request {request.custom_id} waits for a batch reply")


class BatchConnection:
    """The batch transport's connection: answers from the imported replies or defers."""

    def __init__(self, transport: BatchTransport) -> None:
        self.transport = transport

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return self.transport.answer(chat_body(request))

    # A Tokenizer that refuses: a node that needs one fails in a batch round, as it should,
    # rather than count words as a provider without the capability would.
    async def tokenize(self, model: str, text: str) -> dict[str, Any]:
        raise _needs_a_server("tokenize")

    async def detokenize(self, model: str, tokens: list[int]) -> dict[str, Any]:
        raise _needs_a_server("detokenize")

    async def probe(self) -> bool:
        return True

    async def metrics(self) -> str | None:
        return None  # no server: nothing to tune a limit from

    async def close(self) -> None:
        return None


def _needs_a_server(route: str) -> BatchUnsupported:
    return BatchUnsupported(
        f"{route} needs a live server; a batch round has none "
        "(run this graph with `orchestrator run`)"
    )


class BatchTransport:
    """A `Transport` over imported batch replies (`lookup`); `deferred` collects the
    requests that had none, by custom_id, each once however many examples ask it."""

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        self.deferred: dict[str, BatchRequestLine] = {}
        self.answered = 0

    def answer(self, body: dict[str, Any]) -> ChatResponse:
        key = custom_id(body)
        reply = self.lookup(key)
        if reply is None:
            request = self.deferred.get(key) or BatchRequestLine(custom_id=key, body=body)
            self.deferred[key] = request
            raise Deferred(request)
        self.answered += 1
        return parse_reply(reply)  # read as a live reply body is

    # -- Transport ------------------------------------------------------------------------

    def connect(
        self, base_url: str, api_key: str, *, connections: int, timeout: float
    ) -> BatchConnection:
        return BatchConnection(self)

    async def list_models(self, base_url: str, api_key: str) -> list[ServedModel]:
        # No server to ask: every node's model is taken as named (--model, or the node's
        # own `model:`); an empty list is how a server says it does not restrict them. What
        # serves them is the batch job's (`BatchJob.identity`), given as the run's server id.
        return []

    def is_transient(self, exc: BaseException) -> bool:
        return False

    def may_be_outage(self, exc: BaseException) -> bool:
        return False

    def retry_after(self, exc: BaseException) -> float | None:
        return None

    def describe(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}"


@contextmanager
def deferrals_unreported() -> Iterator[None]:
    """While a round runs, asyncio does not report the tasks that ended Deferred.

    A deferred example's task ends with the Deferred (or a group of them, when parallel
    branches were deferred); nobody awaits a finished example's task, so asyncio would log
    each as "Task exception was never retrieved". Anything else is reported as before.
    """
    loop = asyncio.get_running_loop()
    before = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, Deferred):
            return
        if isinstance(exc, BaseExceptionGroup) and exc.split(Deferred)[1] is None:
            return
        if before is not None:
            before(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        loop.set_exception_handler(before)
