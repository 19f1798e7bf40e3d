"""A node call: n samples of one prompt, each validated with the output's pydantic model,
re-asked with the validation error fed back (or with more max_tokens when cut off) until
valid or out of budget; every try is kept as an `Attempt`, each reply with its sample. The
call succeeds when at least `min_samples` (default: all) samples end valid."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import LLMCallError
from ..graph import Sampling, json_schema
from ..providers import Choice
from ..servers import Endpoint, ServerGone, StructuredMode
from ..store import Attempt, Counts
from .request import request_params, with_schema_instruction
from .sender import Sender

DEFAULT_RETRIES = 2
MAX_TOKENS_GROWTH = 4  # a truncated reply is re-asked with up to 4x the node's max_tokens

Keep = Callable[[int, Choice], None]  # told of each sample's valid reply (by sample index)


@dataclass(frozen=True, slots=True)
class Cost:
    """What the request that brought one reply took: its seconds and tokens. A reply that
    shares its request with other samples carries the tokens only on the first sample, so
    a call's attempts add up to the call's tokens."""

    latency: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class CallResult:
    """The validated samples of one node call."""

    values: list[dict[str, Any]]
    raw: list[str]
    attempts: list[Attempt]
    cached: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0


@dataclass(slots=True)
class Ask:
    """One node call as it is sent: the conversation (schema instruction included in
    prompt-only mode), sampling values, schema, samples, the valid ones needed, re-asks."""

    model: type[BaseModel]
    messages: list[dict[str, Any]]
    params: dict[str, Any]
    schema: dict[str, Any]
    n: int
    retries: int
    least: int  # min_samples: valid samples the call needs
    strict: bool = False  # the reply must be the JSON object alone (harden.schema_only)


def extract_json(text: str) -> str:
    """For prompt-only mode: the JSON object inside a reply that may carry prose/fences."""
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fenced:
        return fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text


def json_alone(text: str) -> str | None:
    """The reply when it is one JSON object and nothing else (a fence around the whole reply
    allowed), else None: no object is looked for inside prose, where a judged text's fake
    verdict, quoted by the judge, could be the one found."""
    stripped = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(\{.*\})\s*```", stripped, re.S)
    if fenced:
        stripped = fenced.group(1)
    return stripped if stripped.startswith("{") and stripped.endswith("}") else None


NOT_ALONE = (
    "the reply must be the JSON object alone, with no text before or after it "
    "(the node reads its verdict from the object only: harden.schema_only)"
)


def validate(
    model: type[BaseModel], choice: Choice, mode: StructuredMode, strict: bool = False
) -> dict | str:
    """The validated value, or the error text that goes back to the model. `strict`: in
    prompt-only mode the reply must be the object alone (`json_alone`)."""
    if choice.finish_reason == "length":
        return "the reply was cut off at max_tokens (finish_reason=length)"
    if mode == "server":
        text = choice.content
    elif strict:
        alone = json_alone(choice.content)
        if alone is None:
            return NOT_ALONE
        text = alone
    else:
        text = extract_json(choice.content)
    try:
        value = model.model_validate_json(text).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
            for e in exc.errors()[:8]
        )
        return f"invalid JSON output — {problems}"
    if choice.logprobs is not None:
        value["_logprobs"] = choice.logprobs
    return value


class StructuredCaller:
    """Validated samples for rendered prompts; LLMCallError when the budget runs out."""

    def __init__(self, sender: Sender, stats: Counts) -> None:
        self.sender = sender
        self.stats = stats

    @staticmethod
    def prepare(
        ep: Endpoint,
        messages: list[dict[str, Any]],
        model: type[BaseModel],
        sampling: Sampling,
        strict: bool = False,
    ) -> Ask:
        schema = json_schema(model)
        if ep.structured == "prompt":
            messages = with_schema_instruction(messages, schema)
        retries = DEFAULT_RETRIES if sampling.retries is None else int(sampling.retries)
        n = int(sampling.n or 1)
        least = n if sampling.min_samples is None else min(int(sampling.min_samples), n)
        return Ask(model, messages, request_params(sampling), schema, n, retries, least, strict)

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
        """n validated samples for one rendered prompt. Without a cache every call is asked
        afresh, so `first_sample` (which only names the replies in the cache) changes
        nothing here. `strict`: a reply is read only when it is the JSON object alone."""
        ask = self.prepare(ep, messages, model, sampling, strict)
        result = CallResult([{}] * ask.n, [""] * ask.n, [], cached=False)
        values: list[dict[str, Any] | None] = [None] * ask.n
        await self.complete(ep, ask, list(range(ask.n)), values, result, None)
        return finish(result, values)

    async def complete(
        self,
        ep: Endpoint,
        ask: Ask,
        pending: list[int],
        values: list[dict[str, Any] | None],
        result: CallResult,
        keep: Keep | None,
    ) -> None:
        """Ask for the `pending` samples in one request and settle each into `values` and
        `result.raw`; `keep` hears of each valid reply as it is settled. A sample that stays
        invalid is left None, unless that leaves fewer than `ask.least` valid: then this
        raises LLMCallError."""
        started = time.perf_counter()
        try:
            choices, tokens, latency = await self.sender.chat(
                ep, ask.messages, ask.params, len(pending), ask.schema, result.attempts
            )
        except (LLMCallError, ServerGone):
            raise
        except Exception as exc:
            tries = sum(a.kind == "transport" for a in result.attempts)
            raise LLMCallError(
                f"request failed after {tries} tr{'y' if tries == 1 else 'ies'}: "
                f"{self.sender.hooks_for(ep).describe(exc)}",
                result.attempts,
            ) from exc
        result.prompt_tokens += tokens[0]
        result.completion_tokens += tokens[1]
        # Samples that came back invalid are repaired one by one, concurrently.
        costs = [Cost(latency, *tokens)] + [Cost(latency)] * (len(choices) - 1)
        repairs = [
            self._settle(ep, ask, choice, cost, result, i, keep)
            for i, choice, cost in zip(pending, choices, costs, strict=True)
        ]
        settled: list[Any]
        if len(repairs) == 1:  # the usual case; a task per call costs more than the rest
            try:
                settled = [await repairs[0]]
            except LLMCallError as exc:
                settled = [exc]
        else:
            settled = await asyncio.gather(*repairs, return_exceptions=True)
        errors: list[LLMCallError] = []
        for i, outcome in zip(pending, settled, strict=True):
            if isinstance(outcome, LLMCallError):
                errors.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome  # a server gone for good, or a bug: not one sample's failure
            else:
                values[i], result.raw[i] = outcome
        result.latency = time.perf_counter() - started
        if errors:
            valid = ask.n - sum(v is None for v in values)
            if valid < ask.least and ask.least == ask.n:
                raise errors[0]  # every sample was needed: the first failure says it all
            if valid < ask.least:
                raise LLMCallError(
                    f"{valid} of {ask.n} samples valid, fewer than min_samples {ask.least}; "
                    f"a failed sample: {errors[0]}",
                    result.attempts,
                )

    async def _settle(
        self,
        ep: Endpoint,
        ask: Ask,
        choice: Choice,
        cost: Cost,
        result: CallResult,
        index: int,
        keep: Keep | None,
    ) -> tuple[dict[str, Any], str]:
        """Validate one sample; re-ask with the error fed back until valid or out of budget."""
        base_max = ask.params["max_tokens"]
        conversation = list(ask.messages)
        asked = dict(ask.params, temperature=ask.params.get("temperature"))
        for round_ in range(ask.retries + 1):
            parsed = validate(ask.model, choice, ep.structured, ask.strict)
            if isinstance(parsed, dict):
                result.attempts.append(
                    Attempt(
                        number=len(result.attempts) + 1,
                        kind="ok",
                        raw=choice.content,
                        finish_reason=choice.finish_reason,
                        latency=cost.latency,
                        prompt_tokens=cost.prompt_tokens,
                        completion_tokens=cost.completion_tokens,
                        sample=index,
                        replica=choice.replica,
                    )
                )
                if keep is not None:
                    keep(index, choice)
                return parsed, choice.content
            kind: Literal["truncated", "invalid"] = (
                "truncated" if choice.finish_reason == "length" else "invalid"
            )
            result.attempts.append(
                Attempt(
                    number=len(result.attempts) + 1,
                    kind=kind,
                    error=parsed,
                    raw=choice.content,
                    finish_reason=choice.finish_reason,
                    latency=cost.latency,
                    prompt_tokens=cost.prompt_tokens,
                    completion_tokens=cost.completion_tokens,
                    sample=index,
                    replica=choice.replica,
                )
            )
            if round_ == ask.retries:
                break
            self.stats.retries += 1
            if kind == "truncated":
                # Feeding back a cut-off reply helps nothing; give the answer more room.
                asked["max_tokens"] = min(asked["max_tokens"] * 2, base_max * MAX_TOKENS_GROWTH)
                reask = conversation
            else:
                reask = [
                    *conversation,
                    {"role": "assistant", "content": choice.content},
                    {
                        "role": "user",
                        "content": (
                            "That reply was rejected: " + parsed + "\nReply again with only the "
                            "corrected JSON object."
                        ),
                    },
                ]
            try:
                choices, tokens, latency = await self.sender.chat(
                    ep, reask, asked, 1, ask.schema, result.attempts
                )
            except ServerGone:
                raise
            except Exception as exc:
                message = f"re-ask failed: {self.sender.hooks_for(ep).describe(exc)}"
                raise LLMCallError(message, result.attempts) from exc
            result.prompt_tokens += tokens[0]
            result.completion_tokens += tokens[1]
            choice, cost = choices[0], Cost(latency, *tokens)
        last = result.attempts[-1]
        raise LLMCallError(
            f"no valid reply after {ask.retries + 1} attempts; last error: {last.error}",
            result.attempts,
        )


def finish(result: CallResult, values: list[dict[str, Any] | None]) -> CallResult:
    """The call's valid samples in order, each with its raw reply (failed ones left out)."""
    if None in values:
        result.raw = [r for r, v in zip(result.raw, values, strict=True) if v is not None]
    result.values = [v for v in values if v is not None]
    return result
