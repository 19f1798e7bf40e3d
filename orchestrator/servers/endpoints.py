"""The servers a run talks to: the endpoint of each node whose kind talks to one (one URL, or
several replicas of its model), each server checked once (its model list, a structured-
output canary, its version) and its in-flight limit settled before any example is sent."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

import httpx

from ..errors import ConfigurationError, ServerError
from ..providers import Provider, ServedModel
from ..store import ServerEntry
from .registry import Endpoint, ServerRegistry, server_urls, weights_text

log = logging.getLogger(__name__)

StructuredChoice = Literal["auto", "server", "prompt"]  # how structured output is asked for


class EndpointWant(NamedTuple):
    """What a node that talks to a server asks of the run's servers (None: the run's own)."""

    base_url: str | list[str] | None  # a list: replicas serving the same model
    model: str | None
    api_key_env: str | None
    provider: str | None = None  # a built-in provider's name (None: the run's)


class _Deadline(Protocol):
    @property
    def timeout(self) -> float: ...


class ServerClient(Protocol):
    """What checking the servers asks of the client that will call them (the calls layer's
    `LLMClient`): its registry, the model lists, the canary's verdict and its deadline."""

    @property
    def servers(self) -> ServerRegistry: ...

    @property
    def retry(self) -> _Deadline: ...

    def provider(self, name: str | None) -> Provider: ...

    def endpoint(
        self,
        base_url: str | Sequence[str],
        model: str,
        api_key: str = "EMPTY",
        *,
        identity: str | None = None,
        check_joins: bool = False,
        provider: Provider | None = None,
    ) -> Endpoint: ...

    async def list_models(
        self, base_url: str, api_key: str = "EMPTY", provider: Provider | None = None
    ) -> list[ServedModel]: ...

    async def canary(self, ep: Endpoint, tries: int = 3) -> bool: ...


@dataclass(frozen=True)
class ServerChoice:
    """The run's default server (one URL, or several replicas), model and key, and how
    structured output is chosen."""

    base_url: str | tuple[str, ...]
    model: str | None
    api_key: str
    structured: StructuredChoice
    params: dict[str, Any] = field(default_factory=dict)  # the run's, for `model: params.X`
    # What serves the run's model, as the user names it (--server-id): in place of the root
    # the servers report, for the nodes on the run's own servers.
    server_id: str | None = None
    # Servers a node's own `base_url` may name besides the run's (--allow-server); None: any
    # (--trust). A `params.X` the user gave (`given_params`) is the user's word too.
    allowed: tuple[str, ...] | None = ()
    given_params: frozenset[str] = frozenset()


PARAM_PREFIX = "params."


def from_params(value: str | None, params: dict[str, Any], node: str, key: str) -> str | None:
    """A node's `model`/`base_url` as written, or the param it names (`params.judge_a`), so
    a sweep or `--param` can switch one judge of several without editing the graph. A param
    declared null leaves the node on the run's own (model or server): a shipped jury then
    runs on one server as it comes, and `--param` gives each judge its model."""
    if value is None or not value.startswith(PARAM_PREFIX):
        return value
    name = value.removeprefix(PARAM_PREFIX)
    if name in params and params[name] is None:
        return None
    found = params.get(name)
    if not isinstance(found, str) or not found:
        raise ConfigurationError(
            f"node '{node}': {key} is {value}, but that param is "
            f"{'not declared' if name not in params else repr(found)}; give it a name "
            f"(--param {name}=...)"
        )
    return found


def reads_key_env(want: EndpointWant, choice: ServerChoice, urls: Sequence[str]) -> bool:
    """Whether a node's `api_key_env` is read: only for servers of its own (`urls`), none
    of them the run's. The run's servers always get the user's key, whatever variable the
    graph names: a graph may not choose which secret of the user's environment they get."""
    if not want.api_key_env or want.base_url is None:
        return False
    run_urls = {url.rstrip("/") for url in server_urls(choice.base_url)}
    return not any(url.rstrip("/") in run_urls for url in urls)


def node_api_key(want: EndpointWant, choice: ServerChoice, urls: Sequence[str]) -> str:
    """The key a node's requests to `urls` carry: from its own `api_key_env` for a server
    of its own (`reads_key_env`), else the run's."""
    own = reads_key_env(want, choice, urls)
    key = os.environ.get(want.api_key_env, "") if want.api_key_env and own else choice.api_key
    return key or "EMPTY"


VERSION_TIMEOUT = 5.0  # seconds /version may take, at most the run's --timeout


async def server_version(base_url: str, timeout: float = VERSION_TIMEOUT) -> str | None:
    """vLLM answers /version at its root; other servers may not, which is fine."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=min(timeout, VERSION_TIMEOUT)) as http:
            reply = await http.get(f"{root}/version")
            if reply.status_code == 200:
                return str(reply.json().get("version"))
    except (httpx.HTTPError, ValueError):
        pass
    return None


def own_urls(want: str | Sequence[str], params: dict[str, Any], node: str) -> tuple[str, ...]:
    """The URLs a node's own `base_url` names (a URL, a list of replicas, each may name a
    param, taken from `params`)."""
    written = [want] if isinstance(want, str) else list(want)
    return server_urls([from_params(w, params, node, "base_url") or "" for w in written])


def node_urls(want: str | Sequence[str] | None, choice: ServerChoice, node: str) -> tuple[str, ...]:
    """The URLs a node talks to: its own `base_url` (`own_urls`), else the run's."""
    if want is None:
        return server_urls(choice.base_url)
    return own_urls(want, choice.params, node)


def _refused_urls(want: EndpointWant, urls: Sequence[str], choice: ServerChoice) -> list[str]:
    """The URLs of a node's own `base_url` the user did not name: a graph file is someone
    else's, and the user's key must go only to servers the user chose."""
    if choice.allowed is None or want.base_url is None:
        return []
    written = [want.base_url] if isinstance(want.base_url, str) else list(want.base_url)
    named = {u.rstrip("/") for u in (*server_urls(choice.base_url), *choice.allowed)}
    for value in written:
        param = value.removeprefix(PARAM_PREFIX)
        if value.startswith(PARAM_PREFIX) and param in choice.given_params:
            named.add(str(choice.params[param]).rstrip("/"))
    return [url for url in urls if url.rstrip("/") not in named]


def first_answering(urls: Sequence[str], served_by: dict[str, list[ServedModel]]) -> str:
    """The first of a server's URLs that listed its models at start."""
    return next(url for url in urls if url in served_by)


def node_identity(
    node: str,
    model: str,
    urls: Sequence[str],
    served_by: dict[str, list[ServedModel]],
    server_id: str | None,
    identify: Callable[[str, Sequence[ServedModel], str], str],
) -> str:
    """What serves a node's model: `server_id` when the user named it, else what every
    replica that answered reports (`identify`: its provider's reading of the model list);
    replicas that report different weights are refused."""
    if server_id:
        return server_id
    found = {url: identify(url, served_by[url], model) for url in urls if url in served_by}
    (first, identity), *others = found.items()
    for url, other in others:
        if other != identity:
            raise ServerError(
                f"node '{node}': the replicas given serve '{model}' from different weights: "
                f"{first} from {weights_text(first, identity)}, {url} from "
                f"{weights_text(url, other)}. "
                "Replies of one would be taken for the other's; give only replicas of the "
                "same weights, or, if they are the same weights, say so with --server-id ID"
            )
    return identity


async def prepare_endpoints(
    node_wants: Mapping[str, EndpointWant], client: ServerClient, choice: ServerChoice
) -> tuple[dict[str, Endpoint], dict[str, ServerEntry]]:
    """The endpoint of every node that talks to a server (`node_wants`: what each asks for,
    as its kind reads it), and what the manifest records of each server."""
    endpoints: dict[str, Endpoint] = {}
    served_by: dict[str, list[ServedModel]] = {}
    down: dict[str, ServerError] = {}  # replicas that did not answer at start
    started_without: set[str] = set()
    run_urls = server_urls(choice.base_url)
    wants: list[tuple[str, EndpointWant, tuple[str, ...]]] = []
    talks_to: dict[str, list[str]] = {}
    for name, want in node_wants.items():
        urls = node_urls(want.base_url, choice, name)
        refused = _refused_urls(want, urls, choice)
        if refused:
            raise ConfigurationError(
                f"node '{name}': its base_url names {', '.join(refused)}, a server the graph "
                "chose and you did not; nothing (and no API key) is sent to it. Allow it with "
                f"--allow-server {refused[0]} (allow_servers=[...] in Python), or run with "
                "--trust if you trust this graph"
            )
        wants.append((name, want, urls))
        for url in urls:
            talks_to.setdefault(url, []).append(name)
    if talks_to:
        # Shown (INFO) when the graph names servers of its own; a run that talks only to the
        # servers given with it has nothing new to say.
        own = any(want.base_url is not None for _, want, _ in wants)
        log.log(
            logging.INFO if own else logging.DEBUG,
            "Servers this run talks to: %s",
            "; ".join(f"{url} (nodes {', '.join(nodes)})" for url, nodes in talks_to.items()),
        )
    for name, want, urls in wants:
        if want.api_key_env and not reads_key_env(want, choice, urls):
            log.info(
                "node '%s': api_key_env %s is not read: the node talks to the run's server, "
                "which gets your key",
                name,
                want.api_key_env,
            )
        api_key = node_api_key(want, choice, urls)
        # A graph names only built-in providers (checked when it compiled).
        provider = client.provider(want.provider) if want.provider else None
        for url in urls:
            if url not in served_by and url not in down:
                try:
                    served_by[url] = await client.list_models(url, api_key, provider)
                except ServerError as exc:
                    if len(urls) == 1:
                        raise
                    down[url] = exc
        answering = [url for url in urls if url in served_by]
        if not answering:
            raise down[urls[0]]
        served = [m.id for m in served_by[answering[0]]]
        model = from_params(want.model, choice.params, name, "model")
        model = model or (choice.model if urls == run_urls else None)
        model = model or (served[0] if served else None)
        if model is None:
            raise ServerError(f"{urls[0]} serves no model; pass --model")
        for url in answering:
            names = [m.id for m in served_by[url]]
            if names and model not in names:
                raise ServerError(
                    f"node '{name}': model '{model}' is not served by {url} "
                    f"(it serves: {', '.join(names)})"
                    + ("; every replica given must serve it" if len(urls) > 1 else "")
                )
        given = choice.server_id if urls == run_urls else None
        endpoints[name] = client.endpoint(
            urls,
            model,
            api_key,
            identity=node_identity(
                name,
                model,
                urls,
                served_by,
                given,
                functools.partial(client.servers.identity_at, provider=provider),
            ),
            # A replica that joins later is checked against the root the others report;
            # a --server-id is the user's word for the whole set.
            check_joins=not given,
            provider=provider,
        )
        for url in urls:
            if url in down and url not in started_without:
                # One replica down at start is one that died a moment before: the run
                # goes on with the others and takes it back once it answers.
                log.warning("%s; starting without it until it answers", down[url])
                endpoints[name].replicas.start_without(url)
                started_without.add(url)
    servers: dict[str, ServerEntry] = {}
    for ep in {id(e): e for e in endpoints.values()}.values():
        if choice.structured == "auto" and ep.starts:
            # Not started yet: the canary would start it; what it enforces is known.
            ep.structured = ep.starts[0].structured
        elif choice.structured == "auto":
            enforced = await client.canary(ep)
            ep.structured = "server" if enforced else "prompt"
            if not enforced:
                log.warning(
                    "%s (%s) ignored the JSON schema in 3 canary requests. Falling back to "
                    "schema-in-prompt plus validation: expect more retries. (vLLM >= 0.12 "
                    "takes `response_format` json_schema.)",
                    ep.base_url,
                    ep.model,
                )
        else:
            ep.structured = choice.structured
        servers[f"{ep.base_url} {ep.model}"] = ServerEntry.model_validate(
            {
                "base_url": ep.urls[0] if len(ep.urls) == 1 else list(ep.urls),
                "model": ep.model,
                "models_served": [m.id for m in served_by[first_answering(ep.urls, served_by)]],
                "identity": ep.identity,
                "structured_output": ep.structured,
                "version": None
                if ep.starts
                else await server_version(
                    first_answering(ep.urls, served_by), client.retry.timeout
                ),
                **ep.server_info,
            }
        )
    await client.servers.start_tuning()
    return endpoints, servers
