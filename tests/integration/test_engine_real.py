"""The engine against the real embedded vLLM server: a graph end to end, schema-valid
replies through server-side structured output, the canary, and a cached second run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import trace_records

import orchestrator as orc
from orchestrator import compile_graph
from orchestrator.calls.client import LLMClient
from orchestrator.store.records import Counts

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_pointwise_end_to_end_then_from_cache(embedded_server: Any, tmp_path: Path) -> None:
    graph = compile_graph(ROOT / "graphs/pointwise.yaml")

    def run(out: str) -> orc.RunResult:
        return orc.run(
            ROOT / "graphs/pointwise.yaml",
            ROOT / "examples/pointwise.jsonl",
            out=tmp_path / out,
            base_url=embedded_server.base_url,
            cache=tmp_path / "cache.sqlite",
            limit=3,
        )

    first = run("run1")
    counts = first.manifest.counts
    assert counts.examples_ok == 3, (tmp_path / "run1/results.jsonl").read_text()
    server = next(iter(first.manifest.servers.values()))
    assert server["structured_output"] == "server"  # the canary saw the schema enforced
    assert server["version"]  # vLLM answers /version

    judge_model = graph.nodes["judge"].model
    assert judge_model is not None
    judged = trace_records(tmp_path / "run1/traces.sqlite", node="judge")
    assert len(judged) == 3
    for record in judged:
        accepted = record["attempts"][-1]
        assert accepted["kind"] == "ok" and accepted["finish_reason"] == "stop"
        parsed = judge_model.model_validate_json(accepted["raw"])  # the server's own bytes
        assert 1 <= parsed.content <= 10 and 1 <= parsed.style <= 10

    second = run("run2")
    assert second.manifest.counts.cache_hits == 3  # one validated reply per example
    assert second.manifest.counts.requests == 1  # only the canary reaches the server
    # Results stream in finishing order; compare them by example.
    runs = [
        sorted((tmp_path / f"{run}/results.jsonl").read_text().splitlines())
        for run in ("run1", "run2")
    ]
    assert runs[0] == runs[1]


def test_canary_detects_enforcement(embedded_server: Any) -> None:
    async def check() -> bool:
        client = LLMClient(cache=None, stats=Counts())
        try:
            return await client.canary(
                client.endpoint(embedded_server.base_url, embedded_server.model)
            )
        finally:
            await client.close()

    assert asyncio.run(check()) is True
