"""The servers a re-ask from a folder may ask: a retest's repeats, a batch folder's rounds,
and whatever else re-asks what a folder holds (a replay, a stress test).

A folder may come from someone else. What it records — the server its run asked, the
servers its graph's nodes name, the params that filled those in — is theirs to write, so it
decides nothing: only the servers the user names on the command are asked (`--base-url` /
`base_url=` for the run's, `--allow-server` / `allow_servers=` for a node's own). A command
that leaves one out is refused before any request, in one line listing what the folder
records and those two options; none of them, nor `OPENAI_BASE_URL` or the embedded server,
is ever taken in its place. Which servers will be asked is logged before the first request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..store import ServerEntry
from .endpoints import EndpointWant, own_urls
from .registry import server_urls

log = logging.getLogger(__name__)

OPTIONS = (
    "--base-url URL for the run's server (base_url= in Python)",
    "--allow-server URL for each node's own (allow_servers=[...])",
)


def _same(url: str) -> str:
    return url.rstrip("/")


def recorded_urls(servers: Mapping[str, ServerEntry]) -> list[str]:
    """Every server URL a manifest's `servers` record names (a URL or a list of replicas)."""
    urls: list[str] = []
    for entry in servers.values():
        found = entry.base_url
        urls.extend([found] if isinstance(found, str) else found or [])
    return [url for url in urls if url]


@dataclass(frozen=True)
class FolderServers:
    """What a folder says its run asked: the run's own server(s) and each node's own, by
    node (a `params.X` filled in from the folder's params)."""

    folder: Path
    run: tuple[str, ...] = ()
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        folder: Path,
        node_wants: Mapping[str, EndpointWant],
        params: Mapping[str, Any],
        recorded: Iterable[str] = (),
    ) -> FolderServers:
        """The node servers a graph's nodes ask for (`node_wants`) under `params`; the run's
        are the `recorded` URLs (what a manifest lists) that no node names as its own."""
        nodes: dict[str, tuple[str, ...]] = {}
        for name, want in node_wants.items():
            if want.base_url is not None:
                nodes[name] = own_urls(want.base_url, dict(params), name)
        own = {_same(url) for urls in nodes.values() for url in urls}
        run = tuple(dict.fromkeys(url for url in recorded if _same(url) not in own))
        return cls(folder, run, nodes)

    def describe(self) -> str:
        """Every server the folder records, each with whose it is."""
        shown = [f"{url} (its run's server)" for url in self.run]
        shown += [f"{url} (node '{node}')" for node, urls in self.nodes.items() for url in urls]
        return ", ".join(shown) or "no server"


@dataclass(frozen=True)
class Reask:
    """The servers a re-ask asks, every one named by the user: the run's (None: the
    command's own transport answers its nodes) and the node servers allowed."""

    base_url: str | list[str] | None
    allow_servers: tuple[str, ...]


def reask_servers(
    found: FolderServers,
    *,
    base_url: str | Sequence[str] | None,
    allow_servers: Sequence[str] = (),
    transport: str | None = None,
    trust: bool = False,
) -> Reask:
    """The servers a re-ask from `found.folder` may ask: `base_url` for the run's (or,
    when the command brings its own `transport`, described so, that one) and, for a node's
    own server, `allow_servers` (any, with `trust`). ConfigurationError, one line, when the
    run's server or a node's is not among them; the servers asked are logged (INFO)."""
    run = server_urls(base_url) if base_url else ()
    named = {_same(url) for url in (*run, *allow_servers)}
    unnamed = {
        node: missing
        for node, urls in found.nodes.items()
        if not trust and (missing := [url for url in urls if _same(url) not in named])
    }
    if not run and transport is None:
        raise ConfigurationError(
            f"{found.folder} records {found.describe()}: a re-ask from a folder asks only the "
            "servers you name, never those it records, and you named none; pass "
            + " and ".join(OPTIONS)
        )
    if unnamed:
        listed = ", ".join(f"{url} (node '{n}')" for n, urls in unnamed.items() for url in urls)
        raise ConfigurationError(
            f"{found.folder} records {found.describe()}: a re-ask from a folder asks only the "
            f"servers you name, and you did not name {listed}; nothing is sent to it. Pass "
            f"{OPTIONS[1]} to ask it"
        )
    asked = [f"{url} (the run's server)" for url in run]
    if not run:
        asked.append(f"{transport} (for the run's nodes)")
    asked += [f"{url} (node '{n}')" for n, urls in found.nodes.items() for url in urls]
    log.log(
        logging.INFO if run or found.nodes else logging.DEBUG,
        "Re-asking from %s, which asks only the servers you named: %s",
        found.folder,
        ", ".join(asked),
    )
    return Reask(
        base_url=(run[0] if len(run) == 1 else list(run)) if run else None,
        allow_servers=tuple(allow_servers),
    )
