"""Typed records of a run, as written to and read back from its store.

A result line's outputs depend on the graph, so `ResultLine` keeps them as extra fields (the
file stays flat: `{"id": …, "status": "ok", "score": 7}`); the manifest and summary are
typed where every run has the field and open where a graph adds its own. `NodeRun` and
`Attempt` are the trace's rows: the writer stores them and the reader gives them back;
`Tally` sums a run's attempts up as samples and requests, for `trace` and the report.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NewType, get_args

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SkipValidation,
    TypeAdapter,
    ValidationError,
    computed_field,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass

# pydantic validates a TypedDict only from here before Python 3.12 (and depends on it).
from typing_extensions import TypedDict

from ..events import RunEvent
from .runkey import RunKey

# "abstained": a node with `abstain:` was less sure than its threshold (not a failure).
Status = Literal["ok", "failed", "abstained"]
NodeStatus = Literal["ok", "skipped", "failed", "abstained"]
AttemptKind = Literal["ok", "invalid", "truncated", "transport", "cache"]
ATTEMPT_KINDS: tuple[str, ...] = get_args(AttemptKind)
WHOLE = -1  # `item` value of a node's own record (foreach items are 0, 1, …)


class Attempt(BaseModel):
    """One try at an LLM call: a transport failure, an invalid reply, or the accepted one."""

    model_config = ConfigDict(extra="forbid")

    number: int
    kind: AttemptKind
    error: str | None = None
    raw: str | None = None
    finish_reason: str | None = None
    latency: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    # Which of the call's n samples this reply is for; None for a failed request (and for
    # every attempt of a trace written before samples were recorded).
    sample: int | None = None
    # The server URL (one replica of the node's servers) the request went to; None for a
    # cached reply and for traces written before replicas were recorded.
    replica: str | None = None


class AbstainCheck(TypedDict):
    """What a node's `abstain:` key judged in one run of it: the field, the threshold and
    the confidence (the node abstained when the confidence was below the threshold)."""

    field: str
    threshold: float
    confidence: float
    source: str  # "logprobs" or "samples"


def plural(count: int, word: str) -> str:
    """`1 node`, `3 nodes`: a count and its noun, as a reader expects it."""
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class Tally:
    """What a node run's attempts add up to: samples and how they ended, requests sent."""

    samples: int = 0
    failed_samples: int = 0
    cached_samples: int = 0
    requests: int = 0
    reasks: int = 0
    failed_requests: int = 0
    unsorted: int = 0  # replies of an old trace, which did not say which sample they were

    @classmethod
    def of(cls, attempts: list[Attempt]) -> Tally | None:
        """The tally of these attempts; None when there are none."""
        if not attempts:
            return None
        replies: dict[int, int] = {}  # sample -> replies the server sent for it
        settled: set[int] = set()
        cached: set[int] = set()
        failed_requests = unsorted = 0
        for att in attempts:
            if att.kind == "transport":
                failed_requests += 1
            elif att.sample is None:
                unsorted += 1
            elif att.kind == "cache":
                cached.add(att.sample)
                settled.add(att.sample)
            else:
                replies[att.sample] = replies.get(att.sample, 0) + 1
                if att.kind == "ok":
                    settled.add(att.sample)
        if unsorted:
            return cls(unsorted=len(attempts))
        samples = replies.keys() | cached
        # The first request carries every sample it asks for; each further reply is a re-ask.
        reasks = sum(replies.values()) - len(replies)
        return cls(
            samples=len(samples),
            failed_samples=len(samples - settled),
            cached_samples=len(cached),
            requests=failed_requests + (1 if replies else 0) + reasks,
            reasks=reasks,
            failed_requests=failed_requests,
        )

    def __str__(self) -> str:
        if self.unsorted:
            return plural(self.unsorted, "attempt")  # an old trace: shown as it always was
        if not self.samples:
            return plural(self.failed_requests, "failed request")
        notes = [f"{self.failed_samples} failed"] if self.failed_samples else []
        if self.cached_samples:
            notes.append(f"{self.cached_samples} from cache")
        text = plural(self.samples, "sample") + (f" ({', '.join(notes)})" if notes else "")
        if not self.requests:
            return text + ", no request"
        notes = [plural(self.reasks, "re-ask")] if self.reasks else []
        if self.failed_requests:
            notes.append(f"{self.failed_requests} failed")
        return f"{text}, {plural(self.requests, 'request')}" + (
            f" ({', '.join(notes)})" if notes else ""
        )


# `schema` is the stored column's name and what the engine passes; pydantic only warns that
# it hides BaseModel's deprecated `schema()` classmethod, which nothing here uses.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=".*shadows an attribute in parent", category=UserWarning
    )

    class NodeRun(BaseModel):
        """One node execution (or one foreach item of it) for one example, with its attempts.

        Built by keyword and filled in by attribute as the node runs (assignment is not
        validated: `record()` is on the hot path, measured at ~2 µs a construction); the
        last four fields are set when read back.
        """

        model_config = ConfigDict(extra="forbid")

        example_id: str
        node: str
        item: int = WHOLE
        status: NodeStatus = "ok"
        value: Any = None
        error: str | None = None
        # The JSON payloads are not validated: a copy would cost per record, and `schema`
        # must stay the node's own memoised dict (the trace keys its cache on its identity).
        messages: SkipValidation[list[dict[str, Any]] | None] = None
        raw: SkipValidation[list[str] | None] = None
        model: str | None = None
        endpoint: str | None = None
        cached: bool = False
        prompt_tokens: int = 0
        completion_tokens: int = 0
        latency: float = 0.0
        started: float = Field(default_factory=time.time)
        finished: float = 0.0
        attempts: list[Attempt] = Field(default_factory=list)
        # What was sent besides messages (params, mode), and the JSON schema of the reply.
        request: SkipValidation[dict[str, Any] | None] = None
        schema: SkipValidation[dict[str, Any] | None] = None  # type: ignore[assignment]
        # A node with `abstain:`: how sure it was and of what, answered or not.
        abstain: AbstainCheck | None = None
        # Written by the store, not the node: which row and run this is.
        id: int | None = None
        run_id: str | None = None
        graph_hash: str | None = None
        run_key: str | None = None

        def tally(self) -> Tally | None:
            """Samples and requests behind this run's attempts (None for no attempts)."""
            return Tally.of(self.attempts)


class TraceRun(BaseModel):
    """One run's row in the trace: a folder resumed three times holds three."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    started: float | None = None
    graph: str | None = None
    graph_hash: str | None = None
    model: str | None = None
    base_url: str | None = None
    server: str | None = None
    structured: str | None = None
    settings: dict[str, Any] | None = None
    run_key: str | None = None


class InputLine(BaseModel):
    """inputs.jsonl: an example's inputs as the run read them (data None when unstorable)."""

    model_config = ConfigDict(extra="allow")

    id: str
    number: int = 0
    data: dict[str, Any] | None = None
    error: str | None = None


# A result line as results.jsonl holds it (`ResultLine.encode`, newline included): what a
# worker hands the run's store, encoded once where the line was made.
EncodedLine = NewType("EncodedLine", bytes)


@dataclass(frozen=True)
class GraphSnapshot:
    """What a run folder keeps of its graph (`CompiledGraph.snapshot`): the file as the
    run read it and every template it can render, by name."""

    source: bytes
    templates: dict[str, str]


class ResultLine(BaseModel):
    """One example's line: its id, ok or failed, its outputs, or why it failed.

    The engine builds these on its hot path with `ok` / `failed` (`model_construct`: the
    values are its own, never parsed input); the store encodes them once (`encode`). Timed
    (timeit, best of 5 × 200k) for a two-output line, `ok` + `encode`: 4.0 µs, against
    0.3 µs for the dict and orjson call it replaces; an example costs the engine some
    hundreds of µs against an instant server, so under 1% (bench/engine_overhead.py).
    """

    model_config = ConfigDict(extra="allow")

    id: str
    status: Status
    error: str | None = None
    row: int | None = None  # the source row of a failed example

    @classmethod
    def ok(cls, id: str, outputs: dict[str, Any]) -> ResultLine:
        """The line of an example that finished, with the graph's outputs."""
        return cls.model_construct(id=id, status="ok", **outputs)

    @classmethod
    def failed(cls, id: str, row: int, error: str) -> ResultLine:
        """The line of an example that failed at source row `row`, and why."""
        return cls.model_construct(id=id, status="failed", row=row, error=error)

    @classmethod
    def abstained(cls, id: str, reason: str) -> ResultLine:
        """The line of an example a node abstained on (`abstain:`), and why."""
        return cls.model_construct(id=id, status="abstained", error=reason)

    @property
    def outputs(self) -> dict[str, Any]:
        """The graph's outputs for this example (empty when it failed or abstained)."""
        return dict(self.model_extra or {})

    def as_dict(self) -> dict[str, Any]:
        """The line as results.jsonl holds it: id, status, row and error when set, then the
        outputs (flat, in the graph's order)."""
        line: dict[str, Any] = {"id": self.id, "status": self.status}
        if self.row is not None:
            line["row"] = self.row
        if self.error is not None:
            line["error"] = self.error
        if self.__pydantic_extra__:
            line.update(self.__pydantic_extra__)
        return line

    def encode(self) -> EncodedLine:
        """The line's bytes in results.jsonl (newline included); values JSON cannot hold are
        written as their text, as they always were."""
        return EncodedLine(orjson.dumps(self.as_dict(), default=str) + b"\n")

    def flat(self) -> dict[str, Any]:
        """id, status, error and every output, nested dicts flattened with dotted names."""
        flat: dict[str, Any] = {"id": self.id, "status": self.status, "error": self.error}
        flat.update(flatten(self.outputs))
        return flat


def first_problem(exc: ValidationError) -> str:
    """The first thing wrong with a record read back, as `field.path: message`: what an
    error naming a damaged line or file says."""
    first = exc.errors()[0]
    return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; lists stay whole (one cell each)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def unstorable(value: Any) -> str | None:
    """Why `value` cannot be written as JSON into a result line or summary.json (a mapping
    keyed by numbers, an integer past 64 bits, nesting past orjson's limit), naming where
    in the value; None when it can. Values JSON has no type for are written as their text
    (`default=str`), so they are storable."""
    try:
        orjson.dumps(value, default=str)
    except TypeError as exc:  # orjson.JSONEncodeError is one
        return _unstorable_part(value) or str(exc)
    return None


def _unstorable_part(value: Any) -> str | None:
    """The first part of `value` orjson refuses, walked without recursion (the value may
    nest past Python's own limit)."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        where = f" at {path}" if path else ""
        if isinstance(item, dict):
            for key, inner in reversed(item.items()):
                if not isinstance(key, str):
                    return (
                        f"key {key!r} ({type(key).__name__}){where} is not text, and a JSON "
                        "object's keys must be: make it text (`| string`)"
                    )
                stack.append((f"{path}.{key}" if path else key, inner))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", inner) for i, inner in reversed(list(enumerate(item))))
        else:
            try:
                orjson.dumps(item, default=str)
            except TypeError as exc:
                return f"{exc}{where}"
    return None


@pydantic_dataclass(slots=True)
class Counts:
    """What a run did: examples by outcome, requests, cache hits, shares, retries, tokens.

    The one counter type: the client and engine bump it live (a plain slotted dataclass, so
    `stats.requests += 1` costs what an attribute write costs: pydantic validates nothing
    on assignment here), the progress bar and worker reports read it, and the manifest and
    summary store it (`started` is the live clock, never stored; `tokens` is derived).
    """

    examples_ok: int = 0
    examples_failed: int = 0
    examples_resumed: int = 0
    # Examples a node abstained on (`abstain:`): finished, but not answered.
    examples_abstained: int = 0
    requests: int = 0
    cache_hits: int = 0
    # Samples another identical call still in flight answered (single-flight): no request
    # of their own, but not the cache's doing either, so not counted as cache hits.
    shared: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    examples: int = 0  # result lines at the end of the run (set from the store, not live)
    # The live clock of `tokens_per_second`: not stored, not part of what counts compare.
    started: Annotated[float, Field(exclude=True)] = dataclasses.field(
        default_factory=time.time, compare=False, repr=False
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def ended(self) -> int:
        """Examples this part of the run ended: ok, failed or abstained."""
        return self.examples_ok + self.examples_failed + self.examples_abstained

    def finished(self) -> int:
        """Examples done so far: those this part ended, and those kept from an earlier one."""
        return self.ended() + self.examples_resumed

    def tokens_per_second(self) -> float:
        """Completion tokens per second since the counters started."""
        elapsed = max(time.time() - self.started, 1e-6)
        return self.completion_tokens / elapsed

    def as_dict(self) -> dict[str, int | float]:
        """The counters as the manifest stores them (`tokens` included, `started` not)."""
        return _COUNTS.dump_python(self)

    def model_dump(self) -> dict[str, int | float]:
        """`as_dict`, under the name it had when `Counts` was a pydantic model: callers of
        `result.manifest.counts.model_dump()` keep working."""
        return self.as_dict()


_COUNTS: TypeAdapter[Counts] = TypeAdapter(Counts)
# What a part of a run did with its servers, summed over the parts for the run's total (its
# examples are counted from the result lines, whichever part wrote them).
WORK_COUNTERS = (
    "requests",
    "cache_hits",
    "shared",
    "retries",
    "prompt_tokens",
    "completion_tokens",
)


def summed_work(parts: list[Counts]) -> dict[str, int]:
    """The work counters of several parts of one run (a run and its resumes) added up."""
    return {name: sum(getattr(part, name) for part in parts) for name in WORK_COUNTERS}


@dataclass(frozen=True, slots=True)
class NodeServer:
    """Which model on which server an LLM node used, summed up from a run's trace: a jury's
    judges each on their own model and server. `runs`: its node runs there."""

    node: str
    model: str
    server: str  # the endpoint as the trace names it: a URL, or replicas joined by " | "
    runs: int

    def describe(self, manifest: Manifest) -> str:
        """`model at server`, and what the manifest says serves it when that is not just
        the address (vLLM's root, or a --server-id)."""
        text = f"{self.model} at {self.server}"
        identity = manifest.identity_of(self.server, self.model)
        return text if not identity or identity == self.server else f"{text} ({identity})"


class RunPart(BaseModel):
    """One invocation that wrote a run folder: the first run or one resume, and its own
    counts (the manifest's `counts` are the whole run's)."""

    run_id: str = ""
    started: float | None = None
    ended: float | None = None
    status: str = "unknown"
    counts: Counts = Field(default_factory=Counts)


def duration_text(seconds: float) -> str:
    """A wall time as a person reads it: `12.3 s`, and for a run quicker than a tenth of a
    second its hundredths (`0.04 s`) or `< 0.01 s`, never a `0.0 s` that reads as no time."""
    if seconds >= 0.1:
        return f"{seconds:.1f} s"
    if seconds >= 0.01:
        return f"{seconds:.2f} s"
    return "< 0.01 s"


log = logging.getLogger(__name__)


class EventEntry(BaseModel):
    """One run event as manifest.json keeps it: its kind, when, where, in which worker ("":
    the run's own process), its log level and line, and the facts of its record."""

    event: str
    at: float
    place: str
    worker: str = ""
    level: str
    text: str
    facts: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, record: RunEvent) -> EventEntry:
        return cls(
            event=record.kind,
            at=record.at,
            place=record.place,
            worker=record.worker,
            level=logging.getLevelName(record.log_level()),
            text=record.describe(),
            facts=record.facts(),
        )


class ManifestPart(BaseModel):
    """A part of manifest.json as a typed record that still reads as the JSON object it
    was before it was typed (`part["name"]`, `.get`, `in`, `keys()`, equal to that object),
    so code and notebooks written against the objects keep working. Every field is optional
    and keys this version does not declare are kept (an older or newer orchestrator's,
    or a provider's own): a folder written by any version reads back."""

    model_config = ConfigDict(extra="allow")

    def as_written(self) -> dict[str, Any]:
        """The JSON object the manifest holds: the fields set and the undeclared keys."""
        return self.model_dump(mode="json", exclude_unset=True)

    def _written(self) -> set[str]:
        return self.model_fields_set | set(self.__pydantic_extra__ or {})

    def __getitem__(self, key: str) -> Any:
        if key in type(self).model_fields:
            return getattr(self, key)
        extra = self.__pydantic_extra__ or {}
        if key in extra:
            return extra[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._written() else default

    def __contains__(self, key: object) -> bool:
        return key in self._written()

    def __len__(self) -> int:
        return len(self._written())

    def __bool__(self) -> bool:
        return bool(self._written())

    def keys(self) -> list[str]:
        return list(self.as_written())

    def values(self) -> list[Any]:
        return [self[key] for key in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        return [(key, self[key]) for key in self.keys()]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.as_written() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dict it stands for


class ManifestGraph(ManifestPart):
    """Which graph ran: its file, name and content hash, and its snapshot in the folder."""

    path: str | None = None
    name: str | None = None
    hash: str | None = None
    snapshot: str | None = None


class ManifestDataset(ManifestPart):
    """Which rows it ran over: what the source says of itself (`RowSource.describe`: its
    kind, and a file's path or a frame's rows and columns), the rows' hash and where the
    run kept their inputs."""

    kind: str | None = None  # file, records, pandas, polars, datasets, or a source's own
    path: str | None = None
    rows: int | None = None
    columns: list[str] | None = None
    streaming: bool | None = None
    hash: str | None = None
    inputs: str | None = None


class ManifestResample(ManifestPart):
    """A retest's re-asks as the manifest shows them (`Resample.describe`)."""

    repeat: int | None = None
    nodes: list[str] | str | None = None  # "every llm node" when none were named
    temperature: float | None = None


class ManifestReplay(ManifestPart):
    """A replay's lineage as the manifest shows it (`Replay.describe`): the run replayed,
    the nodes named and all asked again, and what changed."""

    source: str | None = None  # the folder replayed
    source_key: str | None = None  # its run key's digest
    named: list[str] | None = None
    nodes: list[str] | None = None
    changes: dict[str, str] | None = None


class ManifestParameters(ManifestPart):
    """The run's settings as it ran with them: each one its record (engine/settings.py)
    marks for the manifest, under its own name, the cache as the file opened. A setting
    added to the record is written here with nothing declared (an undeclared key, read
    back as such); those below are typed for their readers."""

    concurrency: int | str | None = None  # N, "auto", or "default"
    affinity: bool | None = None
    limit: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    cache: str | None = None  # the cache file (None: none)
    refresh: bool | None = None
    structured: str | None = None
    timeout: float | None = None
    server_wait: float | None = None
    workers: int | str | None = None
    executor: str | None = None
    resample: ManifestResample | None = None  # a retest's repeats only
    replay: ManifestReplay | None = None  # a replay's lineage only
    transport: str | None = None  # the type of a transport given in Python


class ManifestPackage(ManifestPart):
    """What wrote the folder: the package, its version and the Python it ran on."""

    name: str | None = None
    version: str | None = None
    python: str | None = None


class ServerEntry(ManifestPart):
    """One server (or set of replicas) and model the run's nodes talked to, as it was
    found when the run started; a provider may add keys of its own."""

    base_url: str | list[str] | None = None  # a URL, or each replica's
    model: str | None = None
    models_served: list[str] | None = None
    identity: str | None = None  # what serves the model (vLLM's root, or --server-id)
    structured_output: str | None = None  # server or prompt
    version: str | None = None


class OutageEntry(ManifestPart):
    """One stretch a server did not answer: how long, and whether it came back."""

    base_url: str | None = None
    seconds: float | None = None
    recovered: bool | None = None


class LimitChange(BaseModel):
    """One change of a replica's in-flight limit: seconds into the run, new limit, why."""

    t: float
    limit: int
    reason: str


class ReplicaOutage(ManifestPart):
    """One stretch a replica was out of rotation."""

    seconds: float | None = None
    recovered: bool | None = None


class ReplicaEntry(ManifestPart):
    """One replica's share of the work, how its limit was set and moved, and the
    stretches it was out of rotation."""

    base_url: str | None = None
    requests: int | None = None
    failed: int | None = None
    limit_mode: str | None = None  # fixed, vllm metrics or latency
    limit: int | None = None
    limits: list[LimitChange] = Field(default_factory=list)
    outages: list[ReplicaOutage] = Field(default_factory=list)


class WorkerEntry(ManifestPart):
    """One worker of a scaled-out run: its name, process and host, and the examples it
    ended (known once it reports)."""

    worker: str | None = None
    pid: int | None = None
    host: str | None = None
    examples: int | None = None


class Manifest(BaseModel):
    """manifest.json: what ran, against what, with which settings, and how it ended.

    Every key a run writes is a field, and building one with any other key fails. A
    manifest read from disk (`from_disk`) may hold keys this version does not know (a newer
    or an older orchestrator's): they are kept in `extra`, noted in the log, and written
    back at the top level (`as_written`), never silently dropped.
    """

    model_config = ConfigDict(extra="forbid")

    layout_version: int = 1
    run_id: str = ""
    run_key: RunKey | None = None
    graph: ManifestGraph = Field(default_factory=ManifestGraph)
    dataset: ManifestDataset = Field(default_factory=ManifestDataset)
    model: str | None = None
    parameters: ManifestParameters = Field(default_factory=ManifestParameters)
    package: ManifestPackage = Field(default_factory=ManifestPackage)
    servers: dict[str, ServerEntry] = Field(default_factory=dict)  # by "URL model"
    status: str = "unknown"
    error: str | None = None
    cache_error: str | None = None  # replies the cache could not keep (the run went on)
    resumed: bool = False
    started: float | None = None
    updated: float | None = None  # set by the store at each write
    ended: float | None = None
    wall_seconds: float | None = None
    counts: Counts = Field(default_factory=Counts)  # the whole run's, every part summed
    # Each part of the run, first to last, with its own counts; empty in a manifest written
    # before parts were kept (its `counts` are then its last part's only).
    parts: list[RunPart] = Field(default_factory=list)
    means: dict[str, float] = Field(default_factory=dict)
    outages: list[OutageEntry] = Field(default_factory=list)  # derived from the events
    events: list[EventEntry] = Field(default_factory=list)  # outages, workers lost, ...
    replicas: list[ReplicaEntry] = Field(default_factory=list)  # one report per server URL
    workers: list[WorkerEntry] = Field(default_factory=list)  # a scaled-out run's workers
    # Keys of a manifest on disk that this version does not declare.
    extra: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_disk(cls, data: dict[str, Any]) -> Manifest:
        """A manifest.json read back: keys this version does not declare (an older or a
        newer orchestrator's) go to `extra`, with a note in the log, rather than fail the
        read or vanish; ValidationError when a declared key does not fit."""
        unknown = sorted(data.keys() - cls.model_fields.keys())
        if unknown:
            log.info("manifest keys this orchestrator does not know, kept aside: %s", unknown)
            data = {key: value for key, value in data.items() if key not in unknown} | {
                "extra": {**data.get("extra", {}), **{key: data[key] for key in unknown}}
            }
        return cls.model_validate(data)

    def identity_of(self, server: str, model: str) -> str | None:
        """What serves `model` at `server` as the run recorded it (None when unknown)."""
        entry = self.servers.get(f"{server} {model}")
        return entry.identity if entry is not None else None

    def count_text(self, name: str) -> str:
        """A counter of the whole run as shown, with each part's after it when the run was
        resumed: `12 (8 + 4)`."""
        total = str(getattr(self.counts, name))
        if len(self.parts) < 2:
            return total
        return f"{total} ({' + '.join(str(getattr(p.counts, name)) for p in self.parts)})"

    def earlier_parts(self) -> list[RunPart]:
        """This manifest's parts, as a resume takes them over: an older manifest without
        parts stands for one part, with its counts."""
        if self.parts:
            return list(self.parts)
        if not self.run_id:
            return []
        return [
            RunPart(
                run_id=self.run_id,
                started=self.started,
                ended=self.ended,
                status=self.status,
                counts=self.counts,
            )
        ]

    def as_written(self) -> dict[str, Any]:
        """The JSON object manifest.json holds: the fields set (a run that failed to start
        writes only what it knew), unknown keys read from disk back at the top level."""
        data = self.model_dump(mode="json", exclude_unset=True, exclude={"extra"})
        return {**self.extra, **data}


# summary.json's key, in a graph that can abstain, saying means and aggregates are over the
# answered (ok) examples only: false (the abstained are counted apart).
ABSTAIN_NOTE = "aggregates_include_abstained"


class Summary(BaseModel):
    """summary.json: counts, means of numeric outputs, and each aggregate under its name."""

    model_config = ConfigDict(extra="allow")

    graph: str = ""
    counts: Counts = Field(default_factory=Counts)
    means: dict[str, float] = Field(default_factory=dict)

    @property
    def aggregates(self) -> dict[str, Any]:
        return {k: v for k, v in (self.model_extra or {}).items() if k != ABSTAIN_NOTE}

    def as_written(self) -> dict[str, Any]:
        """The JSON object summary.json holds: graph, counts, means, then each aggregate as
        its function returned it (written by orjson, values JSON lacks as their text)."""
        return {
            "graph": self.graph,
            "counts": self.counts.as_dict(),
            "means": self.means,
            **(self.__pydantic_extra__ or {}),
        }
