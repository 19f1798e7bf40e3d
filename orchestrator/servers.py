"""The servers a run talks to: the endpoint of each node whose kind talks to one, each
server checked once (its model list, a structured-output canary, its version) before any
example is sent."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import httpx

from .client import Endpoint, LLMClient, ServerError
from .errors import ConfigurationError

if TYPE_CHECKING:
    from .graph import CompiledGraph
    from .kinds.base import EndpointWant

log = logging.getLogger("orchestrator")

StructuredChoice = Literal["auto", "server", "prompt"]


@dataclass(frozen=True)
class ServerChoice:
    """The run's default server, model and key, and how structured output is chosen."""

    base_url: str
    model: str | None
    api_key: str
    structured: StructuredChoice
    params: dict[str, Any] = field(default_factory=dict)  # the run's, for `model: params.X`


PARAM_PREFIX = "params."


def from_params(value: str | None, params: dict[str, Any], node: str, key: str) -> str | None:
    """A node's `model`/`base_url` as written, or the param it names (`params.judge_a`), so
    a sweep or `--param` can switch one judge of several without editing the graph."""
    if value is None or not value.startswith(PARAM_PREFIX):
        return value
    name = value.removeprefix(PARAM_PREFIX)
    found = params.get(name)
    if not isinstance(found, str) or not found:
        raise ConfigurationError(
            f"node '{node}': {key} is {value}, but that param is "
            f"{'not declared' if name not in params else repr(found)}; give it a name "
            f"(--param {name}=...)"
        )
    return found


def node_api_key(want: EndpointWant, choice: ServerChoice) -> str:
    """The key a node's requests carry: from its own `api_key_env`, else the run's."""
    key = os.environ.get(want.api_key_env, "") if want.api_key_env else choice.api_key
    return key or "EMPTY"


async def server_version(base_url: str) -> str | None:
    """vLLM answers /version at its root; other servers may not, which is fine."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            reply = await http.get(f"{root}/version")
            if reply.status_code == 200:
                return str(reply.json().get("version"))
    except (httpx.HTTPError, ValueError):
        pass
    return None


async def prepare_endpoints(
    graph: CompiledGraph, client: LLMClient, choice: ServerChoice
) -> tuple[dict[str, Endpoint], dict[str, Any]]:
    """The endpoint of every node that talks to a server (its kind says which, and what it
    asks for), and what the manifest records of each server."""
    endpoints: dict[str, Endpoint] = {}
    served_by: dict[str, list[str]] = {}
    for name, cn in graph.nodes.items():
        want = cn.kind.endpoint_want(cn.spec)
        if want is None:
            continue
        base_url = from_params(want.base_url, choice.params, name, "base_url") or choice.base_url
        api_key = node_api_key(want, choice)
        if base_url not in served_by:
            served_by[base_url] = await client.list_models(base_url, api_key)
        served = served_by[base_url]
        model = from_params(want.model, choice.params, name, "model")
        model = model or (choice.model if base_url == choice.base_url else None)
        model = model or (served[0] if served else None)
        if model is None:
            raise ServerError(f"{base_url} serves no model; pass --model")
        if served and model not in served:
            raise ServerError(
                f"node '{name}': model '{model}' is not served by {base_url} "
                f"(it serves: {', '.join(served)})"
            )
        endpoints[name] = client.endpoint(base_url, model, api_key)
    servers: dict[str, Any] = {}
    for ep in {id(e): e for e in endpoints.values()}.values():
        if choice.structured == "auto":
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
        servers[f"{ep.base_url} {ep.model}"] = {
            "base_url": ep.base_url,
            "model": ep.model,
            "models_served": served_by[ep.base_url],
            "structured_output": ep.structured,
            "version": await server_version(ep.base_url),
            **ep.server_info,
        }
    return endpoints, servers
