"""The provider seam: what the calls layer asks of a server (a typed `ChatRequest`), what it
gets back (a `ChatResponse`), and the protocols a provider implements.

A provider encodes the request in its own wire format (`openai_compat.chat_body` for an
OpenAI-compatible server, the same body for a batch file) and reads its answer back into a
`ChatResponse`; nothing above it sees a wire body or an SDK's exception. What not every
server can do is a capability a connection may have: `Tokenizer` (vLLM's /tokenize and
/detokenize) and `LoadGauge` (vLLM's /metrics, which auto concurrency reads).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

StructuredMode = Literal["server", "prompt"]

# What to call once the request of the try in progress leaves for its server. The calls
# layer sets it around each try (`sending`); a provider that can tell calls `mark_sent`.
_ON_SENT: ContextVar[Callable[[], None] | None] = ContextVar("orchestrator_on_sent", default=None)


def mark_sent() -> None:
    """Say that the current try's request is on its way to the server (its bytes handed to
    the connection): a try cancelled after this was a request sent, one cancelled before
    it was not. Called by providers; a no-op outside a try."""
    hook = _ON_SENT.get()
    if hook is not None:
        hook()


@contextmanager
def sending(hook: Callable[[], None]) -> Iterator[None]:
    """`hook` is what `mark_sent` calls while this try's request is in the provider's hands."""
    token = _ON_SENT.set(hook)
    try:
        yield
    finally:
        _ON_SENT.reset(token)


@dataclass(slots=True)
class ChatRequest:
    """One chat completion as the calls layer asks for it, before any wire format.

    `schema` is the JSON schema the reply must validate against; with `structured` "server"
    the provider asks the server to enforce it, with "prompt" the messages already carry it
    and the server is not told. `logprobs` is how many top alternatives to return per token
    (None: no logprobs). Built for every request, so it stays a plain slotted record (not
    frozen: a frozen dataclass's __init__ costs a setattr call per field).
    """

    model: str
    messages: list[dict[str, Any]]
    n: int = 1
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    seed: int | None = None
    logprobs: int | None = None
    schema: dict[str, Any] | None = None
    structured: StructuredMode = "server"

    @property
    def enforced_schema(self) -> dict[str, Any] | None:
        """The schema the server is asked to enforce: None in prompt-only mode."""
        return self.schema if self.structured == "server" else None


@dataclass(slots=True)
class Choice:
    """One sample of a reply, as validated, cached and traced (`replica`: the server URL
    that sent it; None for a reply from the cache)."""

    content: str
    finish_reason: str | None
    logprobs: list[dict[str, Any]] | None
    replica: str | None = None


@dataclass(slots=True)
class ChatResponse:
    """One reply's samples in index order, its token usage and the server's fingerprint."""

    choices: list[Choice]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    fingerprint: str | None = None


@dataclass(frozen=True)
class ServedModel:
    """One entry of a server's model list: the name requests carry and, from vLLM, what
    serves it: `root`, the --model it was started with (a path or hub name, not a digest of
    the weights), and its `max_model_len`. Other servers leave both None."""

    id: str
    root: str | None = None
    max_model_len: int | None = None


def served_identity(root: str, max_model_len: int | None = None) -> str:
    """A server known by what vLLM says serves the model: the path or name it was started
    with, and the context length it was given."""
    return root if max_model_len is None else f"{root} (max_model_len {max_model_len})"


def identity_at(url: str, served: Sequence[ServedModel], model: str) -> str:
    """What serves `model` at `url`: the `root` its model list reports, else (a server that
    does not say) its address. The rule every built-in provider follows."""
    for entry in served:
        if entry.id == model and entry.root:
            return served_identity(entry.root, entry.max_model_len)
    return url


class Connection(Protocol):
    """One connection pool to one server, used with one API key."""

    def chat(self, request: ChatRequest) -> Awaitable[ChatResponse]:
        """Send one chat request in the provider's wire format; the reply's samples and
        usage. It calls `mark_sent` once the request is on its way, if it can tell: a try
        that ends counts as a request either way, a cancelled one only when marked sent."""
        ...

    async def probe(self) -> bool:
        """Liveness: does the server answer (list its models) within a few seconds?"""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class Tokenizer(Protocol):
    """A connection whose server tokenizes with the served model's tokenizer (vLLM's
    /tokenize and /detokenize beside /v1). `TokenizerUnavailable` when this server has
    none; a connection without these methods lacks the capability altogether."""

    def tokenize(self, model: str, text: str) -> Awaitable[dict[str, Any]]:
        """{"tokens": [...], "count": n, ...} of `text` without special tokens."""
        ...

    def detokenize(self, model: str, tokens: list[int]) -> Awaitable[dict[str, Any]]:
        """{"prompt": text} of token ids."""
        ...


@runtime_checkable
class LoadGauge(Protocol):
    """A connection whose server reports its load (vLLM's Prometheus /metrics), from which
    auto concurrency tunes the in-flight limit."""

    async def metrics(self) -> str | None:
        """The Prometheus text at the server root's /metrics; None when the server has none
        or does not answer within a few seconds."""
        ...


class Provider(Protocol):
    """Opens connections and knows its own exceptions: which are transient, which may mean
    the server is down, what Retry-After they carry, and how to name them in one line.

    It may also define `identity(url, served, model) -> str`, what serves `model` at `url`
    given its model list; `identity_at` (vLLM's `root`, else the address) is used without.
    """

    def connect(
        self, base_url: str, api_key: str, *, connections: int, timeout: float
    ) -> Connection: ...

    async def list_models(self, base_url: str, api_key: str) -> list[ServedModel]: ...

    def is_transient(self, exc: BaseException) -> bool: ...

    def may_be_outage(self, exc: BaseException) -> bool: ...

    def retry_after(self, exc: BaseException) -> float | None: ...

    def describe(self, exc: BaseException) -> str: ...


def provider_identity(
    provider: Provider, url: str, served: Sequence[ServedModel], model: str
) -> str:
    """What serves `model` at `url`, as the provider reports it (`identity_at` for one that
    does not define `identity`)."""
    own = getattr(provider, "identity", None)
    return str(own(url, served, model)) if own is not None else identity_at(url, served, model)


async def no_metrics() -> str | None:
    """The load of a server whose connection is no `LoadGauge`: unknown."""
    return None


# The name the seam has had in the public API (`orc.Transport`, `transport=`) since before
# providers: the same protocol.
Transport = Provider
