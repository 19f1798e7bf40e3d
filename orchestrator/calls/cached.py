"""The response cache as a decorator around node calls: samples found (and still valid)
are not asked again; each valid reply is stored as soon as it is settled; and a call
identical to one still in flight waits for it and takes its replies (single-flight), so
two examples sharing a text send one request."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from ..graph import Sampling
from ..providers import Choice
from ..servers import Endpoint
from ..store import Attempt, Counts, ResponseCache, cache_key
from .structured import Ask, CallResult, StructuredCaller, finish, validate


class CachedCaller:
    """`inner`'s calls, served from `cache` where it can (`refresh`: only written to)."""

    def __init__(
        self, inner: StructuredCaller, cache: ResponseCache, stats: Counts, refresh: bool
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.stats = stats
        self.refresh = refresh
        # Calls in flight by their samples' keys; a later identical call waits on them.
        self._inflight: dict[tuple[str, ...], _Flight] = {}
        # With `refresh`, old replies are not read, but this run's own are (single-flight).
        self._fresh: set[str] = set()

    async def call(
        self,
        ep: Endpoint,
        messages: list[dict[str, Any]],
        model: type[BaseModel],
        sampling: Sampling,
        *,
        first_sample: int = 0,
        strict: bool = False,
    ) -> CallResult:
        """n validated samples for one rendered prompt, each from the cache when it has it.
        Sample i is cached under index `first_sample` + i: a retest's repeat starts past
        the run's own samples, so the cache does not answer it with them. A stored reply
        is validated again under this call's rule (`strict`: the JSON object alone), so
        one a lenient call accepted is asked afresh by a strict one."""
        ask = self.inner.prepare(ep, messages, model, sampling, strict)
        n = ask.n
        keys = [
            cache_key(
                ep.model, ask.messages, ask.params, ask.schema, first_sample + i, server=ep.identity
            )
            for i in range(n)
        ]
        flight = tuple(keys)
        shared = False
        while (leader := self._inflight.get(flight)) is not None:
            # The same question is being asked: its replies land in the cache (or, if it
            # failed, this call asks on its own).
            await leader.done.wait()
            shared = shared or leader.asked
        own = self._inflight[flight] = _Flight()
        try:
            return await self._call(ep, model, ask, keys, own, shared=shared)
        finally:
            del self._inflight[flight]
            own.done.set()

    async def _call(
        self,
        ep: Endpoint,
        model: type[BaseModel],
        ask: Ask,
        keys: list[str],
        flight: _Flight,
        *,
        shared: bool,
    ) -> CallResult:
        """The samples found in the cache, the rest asked; `shared`: this call waited for an
        identical one that asked the server, so what it finds is that call's reply."""
        n = ask.n
        result = CallResult([{}] * n, [""] * n, [], cached=True)
        values: list[dict[str, Any] | None] = [None] * n
        for i, key in enumerate(keys):
            if not self.refresh or key in self._fresh:
                hit = self.cache.get(key)
                if hit is None:
                    continue
                parsed = validate(model, Choice(**hit["choice"]), ep.structured, ask.strict)
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
                    if shared:
                        self.stats.shared += 1
                    else:
                        self.stats.cache_hits += 1
        pending = [i for i in range(n) if values[i] is None]
        if pending:
            result.cached = False
            flight.asked = True
            cache = self.cache

            fresh = self._fresh if self.refresh else None

            def keep(index: int, choice: Choice) -> None:
                cache.put(keys[index], {"choice": _as_dict(choice)})
                if fresh is not None:
                    fresh.add(keys[index])

            await self.inner.complete(ep, ask, pending, values, result, keep)
        return finish(result, values)


class _Flight:
    """A call in flight: set `done` when it ends; `asked` once it sent a request, so those
    waiting on it know its replies are shares, not hits of an earlier run's."""

    __slots__ = ("asked", "done")

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.asked = False


def _as_dict(choice: Choice) -> dict[str, Any]:
    return {
        "content": choice.content,
        "finish_reason": choice.finish_reason,
        "logprobs": choice.logprobs,
    }
