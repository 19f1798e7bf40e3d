"""The response cache as a decorator around node calls: samples found (and still valid)
are not asked again; each valid reply is stored as soon as it is settled."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..cache import ResponseCache, cache_key
from ..spec import Sampling
from ..stats import RunStats
from ..trace import Attempt
from .registry import Endpoint
from .sender import Choice
from .structured import CallResult, StructuredCaller, finish, validate


class CachedCaller:
    """`inner`'s calls, served from `cache` where it can (`refresh`: only written to)."""

    def __init__(
        self, inner: StructuredCaller, cache: ResponseCache, stats: RunStats, refresh: bool
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.stats = stats
        self.refresh = refresh

    async def call(
        self,
        ep: Endpoint,
        messages: list[dict[str, Any]],
        model: type[BaseModel],
        sampling: Sampling,
    ) -> CallResult:
        """n validated samples for one rendered prompt, each from the cache when it has it."""
        ask = self.inner.prepare(ep, messages, model, sampling)
        n = ask.n
        keys = [cache_key(ep.model, ask.messages, ask.params, ask.schema, i) for i in range(n)]
        result = CallResult([{}] * n, [""] * n, [], cached=True)
        values: list[dict[str, Any] | None] = [None] * n
        if not self.refresh:
            for i, key in enumerate(keys):
                hit = self.cache.get(key)
                if hit is not None:
                    parsed = validate(model, Choice(**hit["choice"]), ep.structured)
                    if isinstance(parsed, dict):
                        values[i] = parsed
                        result.raw[i] = hit["choice"]["content"]
                        result.attempts.append(
                            Attempt(
                                number=len(result.attempts) + 1,
                                kind="cache",
                                raw=hit["choice"]["content"],
                                cached=True,
                                sample=i,
                            )
                        )
                        self.stats.cache_hits += 1
        pending = [i for i in range(n) if values[i] is None]
        if pending:
            result.cached = False
            cache = self.cache

            def keep(index: int, choice: Choice) -> None:
                cache.put(keys[index], {"choice": _as_dict(choice)})

            await self.inner.complete(ep, ask, pending, values, result, keep)
        return finish(result, values)


def _as_dict(choice: Choice) -> dict[str, Any]:
    return {
        "content": choice.content,
        "finish_reason": choice.finish_reason,
        "logprobs": choice.logprobs,
    }
