"""Cut a text to a token budget before ExPerT's aspect extraction, with the served model's
tokenizer when the server has one and by words otherwise (the result says which)."""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..errors import ProviderCapabilityError, TokenizerUnavailable
from .registry import register

Endpoint = Any  # the calls layer's endpoint, which this layer only hands back


class Runtime(Protocol):
    """What truncating asks of the run (the calls layer's `Runtime`, which the engine
    passes a function that declares a `runtime` parameter): an endpoint and its tokenizer."""

    def endpoint(self, base_url: str | None = None, model: str | None = None) -> Endpoint:
        """The endpoint serving `model` at `base_url`."""

    async def tokenize(self, text: str, endpoint: Endpoint) -> dict[str, Any]:
        """The endpoint's tokens of `text`."""

    async def detokenize(self, tokens: list[int], endpoint: Endpoint) -> dict[str, Any]:
        """The endpoint's text of token ids."""


_WORD = re.compile(r"\S+")


def _cut_words(text: str, keep: int) -> str:
    """The text up to the end of its `keep`-th word, original spacing and newlines kept."""
    if keep <= 0:
        return ""
    end = None
    for count, match in enumerate(_WORD.finditer(text), start=1):
        end = match.end()
        if count == keep:
            break
    return text if end is None else text[:end]


def _by_words(text: str, max_tokens: int, note: str | None = None) -> dict[str, Any]:
    words = len(_WORD.findall(text))
    kept = _cut_words(text, max_tokens) if words > max_tokens else text
    result: dict[str, Any] = {
        "text": kept,
        "truncated": words > max_tokens,
        "tokens_before": words,
        "tokens_after": min(words, max_tokens),
        "method": "words",
    }
    if note:
        result["note"] = note
    return result


Tokenize = Callable[[str], Awaitable[dict[str, Any]]]
Detokenize = Callable[[list[int]], Awaitable[dict[str, Any] | None]]


async def truncate_with(
    text: str, max_tokens: int, tokenize: Tokenize, detokenize: Detokenize
) -> dict[str, Any]:
    """Cut `text` to `max_tokens` of the served model's tokenizer.

    The cut text comes from detokenizing the first tokens; a server without /detokenize
    (`detokenize` gives None) gets a word cut scaled by the token/word ratio, re-counted.
    """
    data = await tokenize(text)
    tokens = data.get("tokens") or []
    count = int(data.get("count", len(tokens)))
    if count <= max_tokens:
        return {
            "text": text,
            "truncated": False,
            "tokens_before": count,
            "tokens_after": count,
            "method": "tokenize",
        }
    back = await detokenize(tokens[:max_tokens])
    if back is not None and isinstance(back.get("prompt"), str):
        return {
            "text": back["prompt"],
            "truncated": True,
            "tokens_before": count,
            "tokens_after": max_tokens,
            "method": "tokenize",
        }
    # No /detokenize: keep the share of words that matches the token budget, then re-count.
    words = len(_WORD.findall(text))
    keep = max(1, math.floor(words * max_tokens / count))
    cut = _cut_words(text, keep)
    recount = await tokenize(cut)
    return {
        "text": cut,
        "truncated": True,
        "tokens_before": count,
        "tokens_after": int(recount.get("count", 0)),
        "method": "tokenize+words",
    }


async def truncate_with_server(
    text: str, max_tokens: int, base_url: str, model: str | None, http: Any
) -> dict[str, Any]:
    """`truncate_with` over a plain `httpx.AsyncClient`, for calls made outside a run."""
    root = base_url.rstrip("/").removesuffix("/v1")
    extra = {"model": model} if model else {}

    async def tokenize(part: str) -> dict[str, Any]:
        reply = await http.post(
            f"{root}/tokenize", json={"prompt": part, "add_special_tokens": False, **extra}
        )
        reply.raise_for_status()
        return dict(reply.json())

    async def detokenize(tokens: list[int]) -> dict[str, Any] | None:
        reply = await http.post(f"{root}/detokenize", json={"tokens": tokens, **extra})
        return dict(reply.json()) if reply.status_code == 200 else None

    return await truncate_with(text, max_tokens, tokenize, detokenize)


def _run_tokenizer(runtime: Runtime, endpoint: Endpoint) -> tuple[Tokenize, Detokenize]:
    """Tokenize and detokenize through the run's client: key, limit, deadline, outages."""

    async def tokenize(part: str) -> dict[str, Any]:
        return await runtime.tokenize(part, endpoint)

    async def detokenize(tokens: list[int]) -> dict[str, Any] | None:
        try:
            return await runtime.detokenize(tokens, endpoint)
        except ProviderCapabilityError:
            return None

    return tokenize, detokenize


@register("truncate_to_tokens")
async def truncate_to_tokens(
    text: str | None,
    max_tokens: int = 512,
    base_url: str | None = None,
    model: str | None = None,
    timeout: float = 10.0,
    runtime: Runtime | None = None,
) -> dict[str, Any]:
    """Cut a text to a token budget before aspect extraction (ExPerT's reference: 512).

    Inside a run it uses the run's server (the endpoint serving `model` at `base_url`, else
    the run's own) with that endpoint's key, limits and outage handling; a server with no
    /tokenize (404), or a provider with no tokenizer, falls back to whitespace-separated
    words, and the result says which method was used and whether anything was cut. Any
    other server error fails the node.
    """
    text = text or ""
    max_tokens = int(max_tokens)
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if runtime is not None:
        endpoint = runtime.endpoint(base_url, model)
        try:
            return await truncate_with(text, max_tokens, *_run_tokenizer(runtime, endpoint))
        except ProviderCapabilityError as exc:
            return _by_words(text, max_tokens, _no_tokenizer(endpoint.base_url, exc))
    if not base_url:
        return _by_words(text, max_tokens, "no server URL")
    import httpx

    # Called directly from Python, outside a run: a short-lived client of its own, with no
    # key. A server that cannot be reached or has no /tokenize gets word counts; one that
    # refuses (401, 403) or fails (5xx) raises, since a word count would pass for tokens.
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            return await truncate_with_server(text, max_tokens, base_url, model, http)
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code != 404:
            raise
        return _by_words(text, max_tokens, _no_tokenizer(base_url))
    except (httpx.HTTPError, ValueError, TypeError) as exc:
        return _by_words(text, max_tokens, f"/tokenize unavailable ({type(exc).__name__})")


def _no_tokenizer(base_url: str, gap: ProviderCapabilityError | None = None) -> str:
    """The note of a word count: the server (a 404 from /tokenize) or its provider has no
    tokenizer."""
    root = base_url.rstrip("/").removesuffix("/v1")
    if gap is None or isinstance(gap, TokenizerUnavailable):
        return f"{root} has no /tokenize (HTTP 404): counted words, not tokens"
    return f"{gap}: counted words, not tokens"
