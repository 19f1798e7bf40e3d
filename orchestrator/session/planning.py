"""The run plan as the session builds it: `make_plan` decides what the caller's settings
(`RunSettings`, `orc.run`'s keyword arguments, which the CLI reaches through the API) left
open and returns one `RunPlan`, once per run.

The records themselves are defined in engine/ (settings.py, plan.py): scale/ and engine/
carry and read them and sit below session/ in the layer contract (pyproject
[tool.importlinter]). They are re-exported here under the names the design gives them.
"""

from __future__ import annotations

import os
from dataclasses import fields

from ..engine import (
    Executor,
    Replay,
    Resample,
    RunArgs,
    RunPlan,
    RunSettings,
    Workers,
    parse_workers,
)
from ..errors import ConfigurationError
from ..graph import CompiledGraph
from ..providers import FAKE_BASE_URL, make_provider

__all__ = [
    "UNUSED_BASE_URL",
    "Executor",
    "Replay",
    "Resample",
    "RunArgs",
    "RunPlan",
    "RunSettings",
    "Workers",
    "make_plan",
]

# The base URL of a run whose graph has no node that talks to a server (compute nodes only,
# e.g. graphs/perq_distilled.yaml): never contacted, so none need be given or started.
UNUSED_BASE_URL = "http://127.0.0.1:8000/v1"


def make_plan(settings: RunSettings, graph: CompiledGraph) -> RunPlan:
    """The plan of a run of `graph` with `settings`: the server found when none was named,
    the key from the environment when none was given, the provider named made, the workers
    counted, the servers trusted when the caller or the graph's loader said so."""
    transport = settings.transport
    if settings.provider is not None:
        if transport is not None:
            raise ConfigurationError(
                f"both transport= and provider={settings.provider!r} given: pass one of them"
            )
        transport = make_provider(settings.provider)
    base_url = settings.base_url
    if not base_url:
        # A transport of the caller's own needs no server to be found.
        base_url = FAKE_BASE_URL if settings.transport is not None else _default_base_url(graph)
    given = {item.name: getattr(settings, item.name) for item in fields(settings)}
    return RunPlan(
        **{
            **given,
            "base_url": base_url if isinstance(base_url, str) else tuple(base_url),
            "api_key": settings.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            "transport": transport,
            # One process locally; on Ray, one actor per CPU of the cluster.
            "workers": parse_workers(settings.workers)
            if settings.workers is not None
            else ("auto" if settings.executor == "ray" else 1),
            "trust": settings.trust or graph.trusted,
            "allow_servers": tuple(settings.allow_servers),
        }
    )


def _default_base_url(graph: CompiledGraph) -> str:
    """The run's server when none was named: none needed, OPENAI_BASE_URL, or the embedded
    server running on its default port."""
    if not any(node.uses_server for node in graph.nodes.values()):
        return UNUSED_BASE_URL
    url = os.environ.get("OPENAI_BASE_URL")
    if url:
        return url
    from .. import local as embedded

    running = embedded.find_running(embedded.DEFAULT_PORT)
    if running:
        return running
    raise ConfigurationError(
        "no server to talk to: pass base_url='http://host:port/v1', set OPENAI_BASE_URL, or "
        "start the embedded one with `orchestrator serve`"
    )
