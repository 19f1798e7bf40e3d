"""RunKey: the fingerprint of everything that shapes a reply, so a run folder is resumed only
by the same judge.

A component is a readable name (`param repeats_per_order`, `model judge`, `template
aupel/rubric.jinja`) mapped to a short value or content hash; the digest covers them all.
Keeping the parts, not only the digest, lets a refused resume say *what* changed.
Settings that do not change replies (concurrency, timeouts, cache path, server wait) are
deliberately left out, so changing them never blocks a resume.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
from pydantic import BaseModel


class _Params(Protocol):
    @property
    def params(self) -> Mapping[str, Any]: ...


class HashedGraph(Protocol):
    """What the run key reads of a compiled graph (graph/'s `CompiledGraph`, above the
    store): its file, the templates it can render, its params and its user functions."""

    @property
    def source(self) -> bytes: ...

    @property
    def templates(self) -> Mapping[str, str]: ...

    @property
    def spec(self) -> _Params: ...

    def user_functions(self) -> Mapping[str, Any]:
        """The functions named by module path, whose code is part of the identity."""


# Components that depend on the server (known only once endpoints are resolved).
SERVER_PARTS = ("model ", "endpoint ", "server ", "structured ")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def json_value(value: Any) -> str:
    """A component's value as it is compared and shown: JSON, keys sorted."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()


class RunKey(BaseModel):
    """The identity of a run: named components and one digest over them."""

    digest: str
    components: dict[str, str]

    @classmethod
    def from_components(cls, components: Mapping[str, str]) -> RunKey:
        ordered = dict(sorted(components.items()))
        return cls(digest=_digest(orjson.dumps(ordered)), components=ordered)

    def static(self) -> RunKey:
        """The part known before any server is asked (graph, templates, params, data)."""
        return RunKey.from_components(
            {k: v for k, v in self.components.items() if not k.startswith(SERVER_PARTS)}
        )

    def changes_from(self, old: RunKey) -> list[str]:
        """One readable line per difference, old → new; empty when the keys match."""
        lines: list[str] = []
        for name in sorted(set(old.components) | set(self.components)):
            before, after = old.components.get(name), self.components.get(name)
            if before == after:
                continue
            if name.startswith(("graph", "template ", "function ", "data")):
                what = "added" if before is None else "removed" if after is None else "changed"
                lines.append(f"{name} {what}")
            else:
                lines.append(f"{name}: {before or '(none)'} → {after or '(none)'}")
        return _merge_same_change(lines)


def _merge_same_change(lines: list[str]) -> list[str]:
    """`model a: x → y` and `model b: x → y` read better as `model: x → y (nodes a, b)`."""
    groups: dict[tuple[str, str], list[str]] = {}
    order: list[tuple[str, str]] = []
    for line in lines:
        head, sep, change = line.partition(": ")
        kind, _, node = head.partition(" ")
        if sep and kind in ("model", "endpoint", "server", "structured") and node:
            key = (kind, change)
            if key not in groups:
                groups[key] = []
                order.append(key)
            groups[key].append(node)
        else:
            key = (line, "")
            groups[key] = []
            order.append(key)
    merged = []
    for kind, change in order:
        nodes = groups[(kind, change)]
        if not nodes:
            merged.append(kind)
        elif len(nodes) == 1:
            merged.append(f"{kind} {nodes[0]}: {change}")
        else:
            merged.append(f"{kind}: {change} (nodes {', '.join(nodes)})")
    return merged


def function_source_hash(fn: Any) -> str | None:
    """Hash of the file that defines a user function (its version, for the run key)."""
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        return None
    if source is None or not Path(source).is_file():
        return None
    return _digest(Path(source).read_bytes())


def static_components(
    graph: HashedGraph, params: Mapping[str, Any], data_hash: str
) -> dict[str, str]:
    """Graph file, template closure, effective params, user functions and data."""
    parts = {
        "graph": _digest(graph.source),
        "data": data_hash,
    }
    for name, source in graph.templates.items():
        parts[f"template {name}"] = _digest(source.encode("utf-8"))
    for name, value in {**graph.spec.params, **params}.items():
        parts[f"param {name}"] = json_value(value)
    for fname, fn in graph.user_functions().items():
        parts[f"function {fname}"] = function_source_hash(fn) or "(source not found)"
    return parts


REPLICAS = "replicas"  # the endpoint part of a node served by several replicas


def logical_server(urls: Sequence[str]) -> str:
    """The server as the run key names it: its URL, or for several replicas of one model
    just `replicas`, so a run resumes with replicas added, lost or moved (the model, a
    part of its own, still has to match). One URL stays a URL: another address may serve
    other weights under the same model name, and keys written before replicas existed
    keep matching."""
    return urls[0] if len(urls) == 1 else REPLICAS


def server_components(
    endpoints: Iterable[tuple[str, str, Sequence[str], str, str]],
) -> dict[str, str]:
    """(node, model, server URLs, structured mode, what serves the model) of every LLM
    node. The last (`calls.registry.identity_at`, or a --server-id) is what lets replicas
    move while other weights under the same model name are refused."""
    parts: dict[str, str] = {}
    for node, model, urls, structured, identity in endpoints:
        parts[f"model {node}"] = model
        parts[f"endpoint {node}"] = logical_server(urls)
        parts[f"server {node}"] = identity
        parts[f"structured {node}"] = structured
    return parts
