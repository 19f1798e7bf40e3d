"""Small builders shared by the core tests: graph folders and runs against the fake server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import yaml

from orchestrator import RunConfig, RunOutcome, execute


def write_graph(root: Path, graph: dict[str, Any], templates: dict[str, str]) -> Path:
    """Write graph.yaml plus its templates under root/prompts; return the graph path."""
    prompts = root / "prompts"
    for name, text in templates.items():
        (prompts / name).parent.mkdir(parents=True, exist_ok=True)
        (prompts / name).write_text(text, encoding="utf-8")
    prompts.mkdir(parents=True, exist_ok=True)
    graph = {"prompts": "prompts", **graph}
    path = root / "graph.yaml"
    path.write_text(yaml.safe_dump(graph, sort_keys=False), encoding="utf-8")
    return path


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_graph(graph: Path, data: Path, out: Path, base_url: str, **kwargs: Any) -> RunOutcome:
    """Run synchronously with a private cache unless the test passes its own."""
    kwargs.setdefault("cache", out.parent / "cache.sqlite")
    kwargs.setdefault("progress", False)
    config = RunConfig(graph=graph, data=data, out=out, base_url=base_url, **kwargs)
    return asyncio.run(execute(config))


def results(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return {str(r["id"]): r for r in map(json.loads, lines)}


def user_text(body: dict[str, Any]) -> str:
    """The last user message of a chat request (what the prompt rendered to)."""
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def is_canary(body: dict[str, Any]) -> bool:
    schema = (body.get("response_format") or {}).get("json_schema", {}).get("schema", {})
    return "token" in schema.get("properties", {}) and "count" in schema.get("properties", {})


def requests_per_call(bodies: list[dict[str, Any]]) -> dict[str, int]:
    """How many requests the server saw for each node call, canary excluded.

    A call is named by its first user message: re-asks append turns after it, so every
    request one call sends (first try, transport retries, re-asks) counts toward it.
    """
    counts: dict[str, int] = {}
    for body in bodies:
        if is_canary(body):
            continue
        first = next(m["content"] for m in body["messages"] if m["role"] == "user")
        counts[first] = counts.get(first, 0) + 1
    return counts
