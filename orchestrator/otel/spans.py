"""A run's decision trace as OpenTelemetry spans, in plain records (no OpenTelemetry import):
one trace per example, a span per node run and per `foreach` item, a span per LLM call
with a child per attempt, attributes after the GenAI semantic conventions (the version is
`SEMCONV_VERSION`) and the run's own under `orchestrator.*`.

Ids are derived, not drawn: a trace's from the folder's first run id and the example, a
span's from those plus node, item, occurrence, call and attempt. Exporting a run twice
sends the same ids (a backend that de-duplicates keeps one copy), and a resumed run's spans
join the traces its first part began.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..store import WHOLE, Attempt, NodeRun

# The GenAI semantic conventions these attribute names follow (gen_ai.provider.name, which
# replaced gen_ai.system, and the JSON message parts are this release's).
SEMCONV_VERSION = "1.37.0"
SCOPE = "orchestrator"  # the instrumentation scope every span is sent under

AttributeValue = str | bool | int | float | Sequence[str]


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A timestamped note on a span: the prompt sent, a reply received."""

    name: str
    time: float
    attributes: dict[str, AttributeValue]


@dataclass(slots=True)
class SpanData:
    """One span as the exporter sends it: ids, parent, times (epoch seconds) and what it
    says; `error` set marks it failed."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: float
    end: float
    attributes: dict[str, AttributeValue]
    events: list[SpanEvent] = field(default_factory=list)
    error: str | None = None
    client: bool = False  # a request to a server (SpanKind.CLIENT), else INTERNAL


def derived_id(bits: int, *parts: object) -> int:
    """A nonzero id of `bits` bits that depends only on `parts` (OpenTelemetry forbids 0)."""
    text = "\x1f".join(str(part) for part in parts).encode()
    digest = hashlib.blake2b(text, digest_size=bits // 8).digest()
    return int.from_bytes(digest, "big") or 1


def trace_id(root: str, example: str) -> int:
    """The trace of one example of the run whose first part is `root`."""
    return derived_id(128, root, example)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def input_messages(messages: list[dict[str, Any]]) -> str:
    """The prompt as the conventions' `gen_ai.input.messages` (role and text parts)."""
    return _json(
        [
            {
                "role": m.get("role", "user"),
                "parts": [{"type": "text", "content": m.get("content")}],
            }
            for m in messages
        ]
    )


def output_messages(raw: str | None, finish_reason: str | None) -> str:
    """A reply as the conventions' `gen_ai.output.messages`."""
    return _json(
        [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": raw}],
                "finish_reason": finish_reason or "",
            }
        ]
    )


@lru_cache(maxsize=256)  # a run has a few servers, and every call and attempt names one
def _server(url: str | None) -> dict[str, AttributeValue]:
    """`server.address` and `server.port` of a server URL (read, never changed)."""
    if not url:
        return {}
    parts = urlsplit(url)
    found: dict[str, AttributeValue] = {}
    if parts.hostname:
        found["server.address"] = parts.hostname
    if parts.port:
        found["server.port"] = parts.port
    return found


@dataclass(slots=True)
class _Example:
    start: float
    end: float
    failed: bool = False


@dataclass
class RunFacts:
    """What every span of a run shares: the folder's first run id (the ids' root), the
    graph, what each node is and what serves each model."""

    root: str
    graph_name: str | None = None
    graph_hash: str | None = None
    kinds: Mapping[str, str] = field(default_factory=dict)  # node -> kind, from the snapshot
    identities: Mapping[str, str] = field(default_factory=dict)  # "URL model" -> identity
    provider: str = "openai"


class SpanBuilder:
    """Turns node runs, read in the trace's order, into spans; remembers what later node
    runs and the examples' own spans need (occurrences, foreach items' times, each
    example's extent), so node runs may come in batches (the live exporter's)."""

    def __init__(self, facts: RunFacts, *, content: bool = True) -> None:
        self.facts = facts
        self.content = content
        self._seen: dict[tuple[str, str, int], int] = {}  # occurrences of a node run so far
        self._items_start: dict[tuple[str, str], float] = {}  # a foreach node's first item
        self.examples: dict[str, _Example] = {}

    def spans(self, run: NodeRun) -> list[SpanData]:
        """The spans of one node run: its own (a node, or a foreach item under its node),
        and for an LLM call the call's and each attempt's."""
        facts = self.facts
        where = (run.example_id, run.node, run.item)
        occurrence = self._seen.get(where, 0)
        trace = trace_id(facts.root, run.example_id)
        # A node's item spans hang under the node run their WHOLE record is about to close
        # (it is written after its items).
        node_occurrence = self._seen.get((run.example_id, run.node, WHOLE), 0)
        self._seen[where] = occurrence + 1
        node_id = derived_id(64, facts.root, run.example_id, run.node, WHOLE, node_occurrence)
        if run.item == WHOLE:
            own_id, parent = node_id, self.example_span_id(run.example_id)
            start = min(run.started, self._items_start.pop((run.example_id, run.node), run.started))
            name = f"node {run.node}"
        else:
            own_id = derived_id(64, facts.root, run.example_id, run.node, run.item, occurrence)
            parent = node_id
            key = (run.example_id, run.node)
            self._items_start[key] = min(self._items_start.get(key, run.started), run.started)
            start = run.started
            name = f"node {run.node}[{run.item}]"
        end = max(run.finished, start)
        self._note_example(run, start, end)
        llm = run.messages is not None
        kind = facts.kinds.get(run.node) or ("llm" if llm else "compute")
        attributes: dict[str, AttributeValue] = {
            "orchestrator.example_id": run.example_id,
            "orchestrator.node": run.node,
            "orchestrator.kind": kind,
            "orchestrator.status": run.status,
            "openinference.span.kind": "CHAIN",
        }
        if run.item != WHOLE:
            attributes["orchestrator.item"] = run.item
        attributes.update(self._run_attributes(run))
        if run.abstain is not None:
            attributes["orchestrator.abstained"] = run.status == "abstained"
            attributes["orchestrator.abstain.field"] = run.abstain["field"]
            attributes["orchestrator.abstain.threshold"] = run.abstain["threshold"]
            attributes["orchestrator.abstain.confidence"] = run.abstain["confidence"]
            attributes["orchestrator.abstain.source"] = run.abstain["source"]
        if llm:
            attributes["orchestrator.cache_hit"] = run.cached
        if self.content and run.value is not None:
            attributes["orchestrator.output"] = _json(run.value)
        own = SpanData(name, trace, own_id, parent, start, end, attributes, error=run.error)
        if run.status == "failed" and own.error is None:
            own.error = "failed"
        found = [own]
        if llm:
            found.extend(self._call(run, trace, own_id, occurrence, start, end))
        return found

    def _run_attributes(self, run: NodeRun) -> dict[str, AttributeValue]:
        found: dict[str, AttributeValue] = {}
        for name, value in (
            ("orchestrator.run_id", run.run_id),
            ("orchestrator.run_key", run.run_key),
            ("orchestrator.graph.hash", run.graph_hash or self.facts.graph_hash),
            ("orchestrator.graph.name", self.facts.graph_name),
        ):
            if value:
                found[name] = value
        return found

    def _call(
        self, run: NodeRun, trace: int, parent: int, occurrence: int, start: float, end: float
    ) -> Iterator[SpanData]:
        """The LLM call of a node run (`chat MODEL`) and one span per attempt under it."""
        facts = self.facts
        call_id = derived_id(64, facts.root, run.example_id, run.node, run.item, occurrence, "call")
        params = (run.request or {}).get("params") or {}
        model = run.model or "unknown"
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": facts.provider,
            "gen_ai.request.model": model,
            "gen_ai.output.type": "json",
            "gen_ai.usage.input_tokens": run.prompt_tokens,
            "gen_ai.usage.output_tokens": run.completion_tokens,
            "orchestrator.node": run.node,
            "orchestrator.cache_hit": run.cached,
            "openinference.span.kind": "LLM",
            "llm.model_name": model,
            "llm.token_count.prompt": run.prompt_tokens,
            "llm.token_count.completion": run.completion_tokens,
        }
        identity = facts.identities.get(f"{run.endpoint} {run.model}")
        if identity:
            attributes["gen_ai.response.model"] = identity
        for param, name in (
            ("max_tokens", "gen_ai.request.max_tokens"),
            ("temperature", "gen_ai.request.temperature"),
            ("top_p", "gen_ai.request.top_p"),
            ("seed", "gen_ai.request.seed"),
        ):
            if params.get(param) is not None:
                attributes[name] = params[param]
        if (params.get("n") or 1) != 1:
            attributes["gen_ai.request.choice.count"] = params["n"]
        reasons = [a.finish_reason for a in run.attempts if a.kind == "ok" and a.finish_reason]
        if reasons:
            attributes["gen_ai.response.finish_reasons"] = reasons
        attributes.update(_server(run.endpoint))
        attributes.update(self._run_attributes(run))
        call = SpanData(
            f"chat {model}", trace, call_id, parent, start, end, attributes, client=True
        )
        if run.status == "failed":
            call.error = run.error or "failed"
        if self.content and run.messages:
            call.events.append(
                SpanEvent(
                    "gen_ai.input.messages",
                    start,
                    {"gen_ai.input.messages": input_messages(run.messages)},
                )
            )
            call.attributes["input.value"] = _json(run.messages)
            if run.raw:
                call.attributes["output.value"] = (
                    run.raw[0] if len(run.raw) == 1 else _json(run.raw)
                )
        yield call
        yield from self._attempts(run, trace, call_id, start, end)

    def _attempts(
        self, run: NodeRun, trace: int, parent: int, start: float, end: float
    ) -> Iterator[SpanData]:
        """One span per attempt, laid end to end from the call's start (the trace keeps
        each attempt's latency, not its start)."""
        at = start
        last_error: dict[int | None, str] = {}  # per sample: the reply a re-ask answers
        for attempt in run.attempts:
            finish = min(at + attempt.latency, end) if end >= at else at
            attributes: dict[str, AttributeValue] = {
                "orchestrator.attempt": attempt.number,
                "orchestrator.attempt.kind": attempt.kind,
                "orchestrator.cache_hit": attempt.cached,
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": run.model or "unknown",
                "gen_ai.usage.input_tokens": attempt.prompt_tokens,
                "gen_ai.usage.output_tokens": attempt.completion_tokens,
            }
            if attempt.sample is not None:
                attributes["orchestrator.sample"] = attempt.sample
            if attempt.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = [attempt.finish_reason]
            attributes.update(_server(attempt.replica))
            reasked = last_error.pop(attempt.sample, None)
            if reasked is not None:
                attributes["orchestrator.reask_error"] = reasked
            span = SpanData(
                f"attempt {attempt.number}",
                trace,
                derived_id(64, trace, parent, attempt.number),
                parent,
                at,
                finish,
                attributes,
                client=attempt.kind not in ("cache",),
            )
            self._attempt_outcome(span, attempt, last_error)
            if self.content and attempt.raw is not None:
                span.events.append(
                    SpanEvent(
                        "gen_ai.output.messages",
                        finish,
                        {
                            "gen_ai.output.messages": output_messages(
                                attempt.raw, attempt.finish_reason
                            )
                        },
                    )
                )
            yield span
            at = finish

    @staticmethod
    def _attempt_outcome(
        span: SpanData, attempt: Attempt, last_error: dict[int | None, str]
    ) -> None:
        """Marks a failed attempt (`error.type` its kind) and keeps an invalid or truncated
        reply's error for the re-ask that follows it."""
        if attempt.kind in ("ok", "cache"):
            return
        span.error = attempt.error or attempt.kind
        span.attributes["error.type"] = attempt.kind
        if attempt.kind in ("invalid", "truncated"):
            span.attributes["orchestrator.validation_error"] = span.error
            last_error[attempt.sample] = span.error

    def example_span_id(self, example: str) -> int:
        return derived_id(64, self.facts.root, example)

    def _note_example(self, run: NodeRun, start: float, end: float) -> None:
        seen = self.examples.get(run.example_id)
        if seen is None:
            seen = self.examples[run.example_id] = _Example(start, end)
        seen.start, seen.end = min(seen.start, start), max(seen.end, end)
        seen.failed = seen.failed or run.status == "failed"

    def example_span(self, example: str) -> SpanData:
        """The root span of an example's trace, over every node run of it seen so far."""
        seen = self.examples[example]
        attributes: dict[str, AttributeValue] = {
            "orchestrator.example_id": example,
            "orchestrator.run_id": self.facts.root,
            "openinference.span.kind": "CHAIN",
        }
        if self.facts.graph_name:
            attributes["orchestrator.graph.name"] = self.facts.graph_name
        if self.facts.graph_hash:
            attributes["orchestrator.graph.hash"] = self.facts.graph_hash
        return SpanData(
            f"example {example}",
            trace_id(self.facts.root, example),
            self.example_span_id(example),
            None,
            seen.start,
            seen.end,
            attributes,
            error="a node failed" if seen.failed else None,
        )
