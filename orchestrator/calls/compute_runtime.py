"""What a compute function may ask of the run it is part of: declare a `runtime` parameter
and the engine passes this. It reaches the run's servers the way LLM nodes do — with the
endpoint's key, under its in-flight limit and deadline, waiting out an outage — instead of
a function opening HTTP clients of its own."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..servers import Endpoint
from ..store import Attempt
from .client import LLMClient


@dataclass
class Runtime:
    """The run's client and endpoints, and facts about the run (`info`: base_url, model).

    Each compute call gets its own copy (`for_call`), whose `attempts` collect the failed
    tries of its requests for that node's trace record.
    """

    client: LLMClient
    endpoints: dict[str, Endpoint]  # LLM node name -> its endpoint
    info: dict[str, Any]
    attempts: list[Attempt] = field(default_factory=list)

    def for_call(self) -> Runtime:
        return replace(self, attempts=[])

    def endpoint(self, base_url: str | None = None, model: str | None = None) -> Endpoint:
        """The endpoint serving `model` at `base_url` (either may be left out; `base_url`
        may be an endpoint's name, `run.base_url`, or any one of its replicas); the run's
        first LLM node's endpoint when nothing is asked. LookupError when none matches."""
        wanted = None if base_url is None else base_url.rstrip("/")
        found = [
            ep
            for ep in self.endpoints.values()
            if (wanted is None or wanted in {ep.base_url, *(u.rstrip("/") for u in ep.urls)})
            and (model is None or ep.model == model)
        ]
        if not found:
            wanted = " ".join(
                f"{k}={v}" for k, v in (("base_url", base_url), ("model", model)) if v
            )
            raise LookupError(f"no endpoint of this run matches {wanted or 'anything'}")
        return found[0]

    async def tokenize(self, text: str, endpoint: Endpoint) -> dict[str, Any]:
        """The endpoint's tokens of `text` (vLLM's /tokenize): {"tokens", "count", …}."""
        return await self.client.tokenize(endpoint, text, self.attempts)

    async def detokenize(self, tokens: list[int], endpoint: Endpoint) -> dict[str, Any]:
        """The endpoint's text of token ids (vLLM's /detokenize): {"prompt": text}."""
        return await self.client.detokenize(endpoint, tokens, self.attempts)
