"""What a server is to a run: its endpoints (one URL or several replicas of a model), their
in-flight limits and how they are tuned, an outage waited out, a server started on first
use, each node's endpoint checked once, and the servers a re-ask from a folder may ask."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .deferred import DeferredServer, StartOnFirstUse, start_seconds_within
    from .endpoints import (
        PARAM_PREFIX,
        EndpointWant,
        ServerChoice,
        StructuredChoice,
        node_api_key,
        prepare_endpoints,
    )
    from .outage import DEFAULT_SERVER_WAIT, ServerGone
    from .reask import FolderServers, reask_servers, recorded_urls
    from .registry import Endpoint, ServerRegistry, StructuredMode, server_urls
    from .replicas import Replica, ReplicaSet, start_example
    from .tuner import Concurrency, parse_concurrency

lazy(__name__)

__all__ = [
    "DEFAULT_SERVER_WAIT",
    "PARAM_PREFIX",
    "Concurrency",
    "DeferredServer",
    "Endpoint",
    "EndpointWant",
    "FolderServers",
    "Replica",
    "ReplicaSet",
    "ServerChoice",
    "ServerGone",
    "ServerRegistry",
    "StartOnFirstUse",
    "StructuredChoice",
    "StructuredMode",
    "node_api_key",
    "parse_concurrency",
    "prepare_endpoints",
    "reask_servers",
    "recorded_urls",
    "server_urls",
    "start_example",
    "start_seconds_within",
]
