"""A run's settings, each declared once: `RunSettings`.

Every setting `orc.run` takes is a field here, and its `Setting` says what the code around
it needs to know: its help text, the `orchestrator run` option that sets it (none: Python
only), whether it joins the run key and whether the manifest records it. The rest is
derived from this listing: `orc.run`'s keyword arguments (`**settings: Unpack[RunArgs]`),
the command line's options (cli/settings.py), the run plan (`RunPlan`, the same fields
resolved: plan.py), the manifest's `parameters` (`manifest_section`), the run key's
settings part (`key_parts`) and the client's arguments (`client_options`). A new setting
is a field here, the code that applies it, and a test (tests/engine/test_settings.py
checks that the listings agree).

It lives in engine/ beside the plan it becomes: scale/ and engine/ read the plan and sit
below session/ (pyproject [tool.importlinter]). The types it names from calls/ and
providers/ are imported from their lightest modules, as the command line imports this one
to build its options.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict, get_args

from ..calls import RetryPolicy
from ..errors import ConfigurationError
from ..providers import Transport
from ..servers import DEFAULT_SERVER_WAIT, Concurrency, StructuredChoice, parse_concurrency
from ..store import json_value

Executor = Literal["local", "ray"]
Workers = int | Literal["auto"]
# How a node's replies are held to its schema: the server enforces it, the prompt carries
# it (and the reply is validated), or a canary request decides which.

SETTING = "orchestrator.setting"  # the key of a field's `Setting` in its metadata
UNSET: Any = object()


@dataclass(frozen=True, kw_only=True)
class Setting:
    """What is known of one run setting besides its type and default."""

    help: str
    # The `orchestrator run` option that sets it (`--x/--no-x`: a flag with its negation);
    # None: `orc.run` only (an object, such as a transport). `by_hand`: the command writes
    # that option itself (its parsing joins other options: --ray, --param), rather than
    # having it made from this record.
    flag: str | None = None
    by_hand: bool = False
    # Shapes replies: a run with another value is another run (refused on resume).
    # `keyed_by` names the key's parts that hold it when it has none of its own.
    run_key: bool = False
    keyed_by: str | None = None
    # Recorded under the manifest's `parameters` (`only_if_set`: left out when None).
    manifest: bool = False
    only_if_set: bool = False
    # How the manifest and the run key show its value (default: as it is).
    show: Callable[[Any], Any] | None = None
    client: bool = False  # an argument of the run's LLMClient (calls/client.py)
    # The command line's side, when it differs from the field's: the type Typer parses,
    # the default it shows (None: not given, the field's default applies), the function
    # turning what was typed into the setting, the metavar and the environment variable.
    cli_type: Any = None
    cli_default: Any = UNSET
    parse: Callable[[Any], Any] | None = None
    metavar: str | None = None
    envvar: str | None = None


def about(**meta: Any) -> dict[str, Setting]:
    """A `RunSettings` field's metadata: its `Setting`."""
    return {SETTING: Setting(**meta)}


def parse_workers(value: str | int) -> Workers:
    """`--workers`: a positive count or `auto`; ConfigurationError naming the flag else."""
    if value == "auto":
        return "auto"
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise ConfigurationError(
            f"--workers takes a number of processes (1 or more) or auto, got {value!r}"
        )
    return count


def parse_structured(value: str) -> StructuredChoice:
    """`--structured`: one of its three modes; ConfigurationError naming the flag else."""
    modes: tuple[StructuredChoice, ...] = get_args(StructuredChoice)
    for mode in modes:
        if value == mode:
            return mode
    raise ConfigurationError(f"--structured must be {', '.join(modes[:-1])} or {modes[-1]}")


def sharded(workers: Workers | None, executor: Executor) -> bool:
    """False for the plain in-process run: one worker (or `auto` on one core), no Ray."""
    if executor == "ray":
        return True
    if workers == "auto":
        return (os.cpu_count() or 1) > 1
    return workers not in (None, 1)


@dataclass(frozen=True, kw_only=True)
class Resample:
    """A retest's re-asks (`orc.retest`): `nodes` (empty: every LLM node) are asked again
    under fresh sample indices — repeat `repeat` of a node of n samples takes indices
    repeat·n … repeat·n + n − 1 — so the cache, keyed by sample index, holds each repeat
    apart from the run's own replies (indices 0 … n − 1) and from the other repeats.
    `temperature`, when given, replaces those nodes' own."""

    repeat: int
    nodes: tuple[str, ...] = ()
    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.repeat < 1:
            raise ValueError(f"a retest repeat is numbered from 1, not {self.repeat}")

    def covers(self, node: str) -> bool:
        """Whether `node` is one of the nodes re-asked."""
        return not self.nodes or node in self.nodes

    def first_sample(self, node: str, n: int) -> int:
        """The sample index `node`'s call of n samples starts at (0: the run's own)."""
        return self.repeat * n if self.covers(node) else 0

    def describe(self) -> dict[str, Any]:
        """As the manifest and the run key show it."""
        return {
            "repeat": self.repeat,
            "nodes": list(self.nodes) or "every llm node",
            "temperature": self.temperature,
        }


@dataclass(frozen=True, kw_only=True)
class Replay:
    """A replay of a finished run (`orc.replay`): `nodes` (the ones named and every node
    that depends on them) are asked again, and every other node's output is read back from
    the trace of the run in `source`, the rows its key `source_key` wrote, so it sends no
    request. `changes` says what differs from that run (prompt, model, params), in words
    and digests; with the source's key it is part of this run's key, so two replays of one
    run with different changes never resume or share a folder."""

    source: str
    source_key: str
    named: tuple[str, ...]
    nodes: tuple[str, ...]
    changes: Mapping[str, str] = field(default_factory=dict)

    def reads_back(self, node: str) -> bool:
        """Whether `node`'s output comes from the source's trace rather than a request."""
        return node not in self.nodes

    def describe(self) -> dict[str, Any]:
        """As the manifest and the run key show it."""
        return {
            "source": self.source,
            "source_key": self.source_key,
            "named": list(self.named),
            "nodes": list(self.nodes),
            "changes": dict(self.changes),
        }


_ENDPOINTS = "each LLM node's model, server and structured mode (`model NODE`, …)"


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """How a run goes, as its caller said it: `orc.run`'s keyword arguments, which the
    command line reaches through the API. Frozen; `RunPlan` is the same record with what
    the caller left open decided (plan.py)."""

    base_url: str | list[str] | tuple[str, ...] | None = field(
        default=None,
        metadata=about(
            help="OpenAI-compatible server, e.g. http://gpu:8000/v1; repeat it for replicas of "
            "one model (each request goes to the least loaded). Default: the embedded vLLM CPU "
            "server.",
            flag="--base-url",
            cli_type=list[str] | None,
            run_key=True,
            keyed_by=_ENDPOINTS,
        ),
    )
    model: str | None = field(
        default=None,
        metadata=about(
            help="Model name (default: the server's first).",
            flag="--model",
            run_key=True,
            keyed_by=_ENDPOINTS,
        ),
    )
    server_id: str | None = field(
        default=None,
        metadata=about(
            help="Name the weights the server serves (one name for all --base-url replicas), in "
            "place of the root its /v1/models reports; replies are cached and runs resumed per "
            "name (docs/servers.md).",
            flag="--server-id",
            run_key=True,
            keyed_by=_ENDPOINTS,
        ),
    )
    api_key: str | None = field(
        default=None,
        repr=False,
        metadata=about(
            help="API key (env OPENAI_API_KEY).",
            flag="--api-key",
            envvar="OPENAI_API_KEY",
        ),
    )
    provider: str | None = field(
        default=None,
        metadata=about(
            help="The built-in provider that reaches --base-url: openai (OpenAI-compatible, "
            "vLLM; the default). A graph node may name its own (docs/providers.md).",
            flag="--provider",
        ),
    )
    concurrency: Concurrency = field(
        default=None,
        metadata=about(
            help="In-flight requests per server: N, or auto (tuned from vLLM's /metrics, else "
            "from latency). Default: auto against vLLM, 64 elsewhere.",
            flag="--concurrency",
            cli_type=str | None,
            parse=parse_concurrency,
            manifest=True,
            show=lambda value: value or "default",
            client=True,
        ),
    )
    affinity: bool = field(
        default=True,
        metadata=about(
            help="With replicas, an example's calls prefer the replica of its last.",
            flag="--affinity/--no-affinity",
            manifest=True,
            client=True,
        ),
    )
    limit: int | None = field(
        default=None,
        metadata=about(
            help="Run only the first N rows.",
            flag="--limit",
            manifest=True,
        ),
    )
    params: dict[str, Any] = field(
        default_factory=dict,
        metadata=about(
            help="Override a graph param: key=value.",
            flag="--param",
            by_hand=True,
            run_key=True,
            keyed_by="one part per param, with the graph's defaults (`param NAME`)",
            manifest=True,
        ),
    )
    # False: no cache; True: the shared one (the command line's default); a path: that file.
    cache: bool | str | Path = field(
        default=False,
        metadata=about(
            help="Response cache file.",
            flag="--cache",
            cli_type=Path | None,
            cli_default=None,
            manifest=True,
        ),
    )
    refresh: bool = field(
        default=False,
        metadata=about(
            help="Ignore cached replies (still store new).",
            flag="--refresh/--no-refresh",
            manifest=True,
            client=True,
        ),
    )
    overwrite: bool = field(
        default=False,
        metadata=about(
            help="Replace a run folder of another run.",
            flag="--overwrite/--no-overwrite",
        ),
    )
    structured: StructuredChoice = field(
        default="auto",
        metadata=about(
            help="auto (canary decides) | server | prompt.",
            flag="--structured",
            cli_type=str,
            parse=parse_structured,
            run_key=True,
            keyed_by=_ENDPOINTS,
            manifest=True,
        ),
    )
    timeout: float = field(
        default=120.0,
        metadata=about(
            help="Seconds per request (default 120; 600 on the embedded CPU server).",
            flag="--timeout",
            cli_type=float | None,
            cli_default=None,
            manifest=True,
            client=True,
        ),
    )
    server_wait: float = field(
        default=DEFAULT_SERVER_WAIT,
        metadata=about(
            help="Seconds to wait for a server that stops answering mid-run before stopping the "
            "run (finished work is kept; re-run to resume).",
            flag="--server-wait",
            manifest=True,
            client=True,
        ),
    )
    # None: one process, or on Ray one actor per cluster CPU.
    workers: Workers | None = field(
        default=None,
        metadata=about(
            help="Processes to run the graph in (auto: one per core; with --ray, actors, default "
            "one per cluster CPU). One run folder and cache; --concurrency is split.",
            flag="--workers",
            cli_type=str | None,
            parse=parse_workers,
            manifest=True,
        ),
    )
    executor: Executor = field(
        default="local",
        metadata=about(
            help="Where the workers run: local processes, or Ray actors.",
            flag="--ray",
            by_hand=True,
            manifest=True,
        ),
    )
    ray_address: str | None = field(
        default=None,
        metadata=about(
            help="The Ray cluster to run on (None: the instance Ray finds or starts here).",
            flag="--ray",
            by_hand=True,
        ),
    )
    trust: bool = field(
        default=False,
        metadata=about(
            help="Trust the graph file: let it import its own Python (modules beside it, any "
            "module:function), read templates outside its folder and talk to the servers it "
            "names.",
            flag="--trust",
        ),
    )
    allow_servers: list[str] | tuple[str, ...] = field(
        default=(),
        metadata=about(
            help="A server a node's own base_url may name (repeatable); without it such a node is "
            "refused and gets no request and no key.",
            flag="--allow-server",
            cli_type=list[str] | None,
            cli_default=None,
            metavar="URL",
        ),
    )
    resample: Resample | None = field(
        default=None,
        metadata=about(
            help="A retest's re-asks under fresh sample indices (orc.retest sets it).",
            run_key=True,
            manifest=True,
            only_if_set=True,
            show=lambda value: None if value is None else value.describe(),
        ),
    )
    replay: Replay | None = field(
        default=None,
        metadata=about(
            help="A replay: which nodes are asked again and where the others' outputs are read "
            "back from (orc.replay sets it).",
            run_key=True,
            manifest=True,
            only_if_set=True,
            show=lambda value: None if value is None else value.describe(),
        ),
    )

    otlp: str | None = field(
        default=None,
        metadata=about(
            help="Send the decision trace, while the run goes, to this OTLP/HTTP traces endpoint "
            "(e.g. http://127.0.0.1:4318/v1/traces; `env`: the one OTEL_EXPORTER_OTLP_TRACES_"
            "ENDPOINT names). Needs a run folder and the otel extra (docs/observability.md).",
            flag="--otlp",
            metavar="URL",
        ),
    )
    # Sent with each export request, never recorded: a header is often a backend's key.
    otlp_headers: list[str] | tuple[str, ...] = field(
        default=(),
        repr=False,
        metadata=about(
            help="A header for the --otlp endpoint, key=value (repeatable; also "
            "OTEL_EXPORTER_OTLP_HEADERS); never written to disk.",
            flag="--otlp-header",
            cli_type=list[str] | None,
            cli_default=None,
            metavar="KEY=VALUE",
        ),
    )
    otlp_content: bool = field(
        default=True,
        metadata=about(
            help="With --otlp: send prompts, replies and outputs (--no-otlp-content: none).",
            flag="--otlp-content/--no-otlp-content",
        ),
    )

    transport: Transport | None = field(
        default=None,
        repr=False,
        metadata=about(
            help="The provider object that reaches the servers (e.g. orc.FakeTransport()); "
            "None: the one `provider` names.",
            manifest=True,
            only_if_set=True,
            show=lambda value: None if value is None else type(value).__name__,
            client=True,
        ),
    )
    retry: RetryPolicy | None = field(
        default=None,
        repr=False,
        metadata=about(
            help="How failed requests are retried (None: the default policy).",
            client=True,
        ),
    )

    def __post_init__(self) -> None:
        # A list (the command line's repeated options, a caller's) is kept as a tuple: the
        # record is frozen, and one URL in a list still names replicas of one.
        for name in ("base_url", "allow_servers", "otlp_headers"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))

    @classmethod
    def of(cls, given: Mapping[str, Any], where: str = "arun()") -> RunSettings:
        """The settings named in `given`, the rest at their defaults; a name that is not a
        setting is refused as Python refuses an unknown keyword argument."""
        for name in given:
            if name not in SETTINGS:
                raise TypeError(f"{where} got an unexpected keyword argument {name!r}")
        return cls(**given)

    @property
    def use_cache(self) -> bool:
        return self.cache is not False

    @property
    def cache_file(self) -> Path | None:
        """The cache file named (None: none, or the shared default one)."""
        return None if isinstance(self.cache, bool) else Path(self.cache)

    @property
    def sharded(self) -> bool:
        """Whether rows go to workers (processes or Ray actors) rather than run here."""
        return sharded(self.workers, self.executor)

    def setting_fields(self) -> Iterator[tuple[str, Setting, Any]]:
        """Each setting of this record (a subclass's own too): its name, its `Setting` and
        its default."""
        for item in dataclasses.fields(self):
            meta = item.metadata.get(SETTING)
            if meta is not None:
                # A plan's decided fields have no default: the record's is the setting's.
                yield item.name, meta, _default(FIELDS.get(item.name, item))

    def shown(self, name: str, meta: Setting) -> Any:
        """A setting's value as the manifest and the run key show it."""
        value = getattr(self, name)
        return meta.show(value) if meta.show is not None else value

    def manifest_section(self) -> dict[str, Any]:
        """The manifest's `parameters`: every setting it records, under its own name."""
        return {
            name: self.shown(name, meta)
            for name, meta, _ in self.setting_fields()
            if meta.manifest and not (meta.only_if_set and getattr(self, name) is None)
        }

    def key_parts(self) -> dict[str, str]:
        """The run key's parts of the settings that have parts of their own: each one not
        at its default, by name. A setting added later, at its default, leaves the key of
        every run made before it unchanged."""
        return {
            name: json_value(self.shown(name, meta))
            for name, meta, default in self.setting_fields()
            if meta.run_key and meta.keyed_by is None and getattr(self, name) != default
        }

    def client_options(self) -> dict[str, Any]:
        """The settings the run's client takes, as its keyword arguments."""
        return {name: getattr(self, name) for name, meta, _ in self.setting_fields() if meta.client}


def _default(item: dataclasses.Field[Any]) -> Any:
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


def default_of(name: str) -> Any:
    """A setting's default value."""
    return _default(FIELDS[name])


FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(RunSettings)}
SETTINGS: dict[str, Setting] = {name: f.metadata[SETTING] for name, f in FIELDS.items()}


class RunArgs(TypedDict, total=False):
    """`orc.run`'s settings as keyword arguments (`**settings: Unpack[RunArgs]`), so an
    editor completes and a type checker checks them: `RunSettings`'s fields, one for one
    (a test holds the two listings to the same names and types)."""

    base_url: str | list[str] | tuple[str, ...] | None
    model: str | None
    server_id: str | None
    api_key: str | None
    provider: str | None
    concurrency: Concurrency
    affinity: bool
    limit: int | None
    params: dict[str, Any]
    cache: bool | str | Path
    refresh: bool
    overwrite: bool
    structured: StructuredChoice
    timeout: float
    server_wait: float
    workers: Workers | None
    executor: Executor
    ray_address: str | None
    trust: bool
    allow_servers: list[str] | tuple[str, ...]
    resample: Resample | None
    replay: Replay | None
    otlp: str | None
    otlp_headers: list[str] | tuple[str, ...]
    otlp_content: bool
    transport: Transport | None
    retry: RetryPolicy | None
