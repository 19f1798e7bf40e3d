"""The pointwise workload shared by the throughput benchmarks: rows, graph, and both clients.

`run_ours` is a real `orchestrator run` (cache, trace, results file, progress bar drawn to
nowhere); `run_bare` is the limit: a plain `AsyncOpenAI` worker pool sending the very same
requests (messages rendered beforehand, same schema, same sampling) and parsing nothing.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import yaml

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator import RunConfig, RunOutcome

ROOT = Path(__file__).resolve().parent.parent

_VOCABULARY = (
    "the coffee was fine but service slow and I waited twenty minutes for a table near "
    "window staff friendly prices fair would come back for brunch though parking is awful "
    "my partner loved pastries I found them too sweet overall a solid neighbourhood spot"
)
_WORDS = _VOCABULARY.split()


def write_rows(path: Path, n: int, seed: int = 7) -> Path:
    """`n` pointwise rows (input, reference, output) of review-like text, deterministic."""
    rng = random.Random(seed)

    def text(words: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."

    with path.open("wb") as handle:
        for i in range(n):
            row = {
                "id": f"r{i}",
                "input": "Write a short review of a cafe you visited. " + text(8),
                "reference": text(60),
                "output": text(60),
            }
            handle.write(orjson.dumps(row) + b"\n")
    return path


def variant_rows(example_file: str, path: Path, count: int) -> Path:
    """`count` rows cycling through `examples/<example_file>`, each with its own id and a
    distinct tail on its output, so every request is a real, uncached one."""
    examples = [orjson.loads(line) for line in (ROOT / "examples" / example_file).open("rb")]
    with path.open("wb") as handle:
        for i in range(count):
            row = dict(examples[i % len(examples)])
            row["id"] = f"{row['id']}-{i}"
            row["output"] = f"{row['output']} (variant {i})"
            handle.write(orjson.dumps(row) + b"\n")
    return path


def write_judge_graph(folder: Path) -> Path:
    """graphs/pointwise.yaml cut down to its one LLM node (same prompts, schema, sampling)."""
    spec = yaml.safe_load((ROOT / "graphs" / "pointwise.yaml").read_text())
    spec["name"] = "pointwise-judge"
    # Its own copy of the templates beside it: a graph reads prompts only from its folder.
    shutil.copytree(ROOT / "prompts", folder / "prompts", dirs_exist_ok=True)
    spec["prompts"] = "prompts"
    spec["nodes"] = {"judge": spec["nodes"]["judge"]}
    spec["outputs"] = {"content": "judge.content", "style": "judge.style"}
    path = folder / "judge.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@dataclass
class Timing:
    seconds: float
    requests: int
    span: float | None = None  # first request sent → last reply taken, from the trace

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def span_rate(self) -> float:
        """Requests/s between first and last request: the run without its fixed start-up
        and summary costs (compile, model list, reading results back)."""
        return self.requests / (self.span or self.seconds)


def execute_timed(config: RunConfig, console: Console | None = None) -> tuple[RunOutcome, float]:
    """`orchestrator run` in this process, as configured; its outcome and wall seconds.

    Without a console the progress bar is drawn, to nowhere, as a user's terminal would.
    """
    from rich.console import Console

    from orchestrator import execute

    with open(os.devnull, "w") as sink:
        console = console or Console(file=sink, force_terminal=True, width=120)
        started = time.perf_counter()
        outcome = asyncio.run(execute(config, console=console))
        return outcome, time.perf_counter() - started


def run_ours(
    graph: Path,
    data: Path,
    out: Path,
    base_url: str,
    concurrency: int,
    cache: Path | None = None,
) -> Timing:
    """One `orchestrator run` in this process; time from start to summary written."""
    from orchestrator import RunConfig

    config = RunConfig(
        graph=graph,
        data=data,
        out=out,
        base_url=base_url,
        concurrency=concurrency,
        cache=cache or out.parent / f"{out.name}-cache.sqlite",
        structured="server",  # no canary: the bare loop sends none either
        overwrite=True,
    )
    outcome, seconds = execute_timed(config)
    counts = outcome.manifest["counts"]
    if counts["examples_failed"]:
        raise SystemExit(f"our run had {counts['examples_failed']} failed examples")
    with sqlite3.connect(out / "traces.sqlite") as db:
        first, last = db.execute("SELECT MIN(started), MAX(finished) FROM node_runs").fetchone()
    return Timing(seconds, counts["requests"] + counts["cache_hits"], last - first)


def _timing_from(out: Path, seconds: float, counts: dict[str, Any]) -> Timing:
    if counts["examples_failed"]:
        raise SystemExit(f"our run had {counts['examples_failed']} failed examples")
    with sqlite3.connect(out / "traces.sqlite") as db:
        first, last = db.execute("SELECT MIN(started), MAX(finished) FROM node_runs").fetchone()
    return Timing(seconds, counts["requests"] + counts["cache_hits"], last - first)


def run_api(
    graph: Path, data: Path, out: Path, base_url: str, concurrency: int, otlp: str | None = None
) -> Timing:
    """The same run through `orchestrator.run` (the Python API, no progress bar); `otlp`:
    its spans sent live to that endpoint."""
    import orchestrator as orc

    started = time.perf_counter()
    result = orc.run(
        graph,
        data,
        out=out,
        base_url=base_url,
        concurrency=concurrency,
        cache=out.parent / f"{out.name}-cache.sqlite",
        structured="server",
        overwrite=True,
        otlp=otlp,
    )
    seconds = time.perf_counter() - started
    return _timing_from(out, seconds, result.manifest.counts.as_dict())


def run_cli(graph: Path, data: Path, out: Path, base_url: str, concurrency: int) -> Timing:
    """The same run as the `orchestrator run` command, invoked in this process (no
    interpreter start-up: that is a fixed cost, not a per-request one)."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    cache = out.parent / f"{out.name}-cache.sqlite"
    args = run_command(graph, data, out, base_url, concurrency, cache)[3:]
    started = time.perf_counter()
    outcome = CliRunner().invoke(app, [*args, "--structured", "server", "--overwrite"])
    seconds = time.perf_counter() - started
    if outcome.exit_code != 0:
        raise SystemExit(f"orchestrator run exited {outcome.exit_code}: {outcome.output[-500:]}")
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    return _timing_from(out, seconds, manifest["counts"])


def run_command(
    graph: Path, data: Path, out: Path, base_url: str, concurrency: int, cache: Path
) -> list[str]:
    """The `orchestrator run` command line, with its defaults otherwise (canary included)."""
    return [
        sys.executable,
        "-m",
        "orchestrator",
        "run",
        str(graph),
        "--data",
        str(data),
        "--out",
        str(out),
        "--base-url",
        base_url,
        "--concurrency",
        str(concurrency),
        "--cache",
        str(cache),
    ]


def rendered_requests(graph: Path, data: Path) -> list[dict[str, Any]]:
    """The chat requests our run sends for each row, rendered here so the bare loop need not."""
    from orchestrator.data.dataset import read_rows
    from orchestrator.graph.schemas import json_schema
    from orchestrator.kinds.graphs import compile_graph

    compiled = compile_graph(graph)
    judge = compiled.nodes["judge"]
    assert judge.model is not None
    schema = json_schema(judge.model)
    params = {**compiled.spec.params}
    requests = []
    for row in read_rows(data, None):
        ctx = {**row.data, "params": params}
        requests.append(
            {
                "messages": judge.messages(ctx),
                "temperature": 0.0,
                "max_tokens": judge.sampling.max_tokens,
                "n": 1,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": schema, "strict": True},
                },
            }
        )
    return requests


def run_bare(
    requests: list[dict[str, Any]],
    base_url: str,
    concurrency: int,
    aiohttp: bool = False,
    post: bool = False,
    raw: bool = False,
) -> Timing:
    """The same requests through a bare AsyncOpenAI worker pool; no parsing, no bookkeeping.

    `aiohttp=True` puts the SDK on the same aiohttp transport, with the same pool size, that
    orchestrator uses; otherwise it is the SDK's default httpx client. `post=True` also
    sends the body as built with `client.post`, as orchestrator does, instead of
    `chat.completions.create`: what is left between that and ours is our own work.
    `raw=True` (with `post`) also does the JSON itself, as orchestrator's transport does:
    the request encoded with orjson and handed over as `content`, the reply taken as bytes
    and read with orjson instead of building the SDK's `ChatCompletion`: the leanest loop.
    """
    import openai
    import orjson
    from openai.types.chat import ChatCompletion

    from orchestrator.providers.openai_compat import make_http_client

    async def main() -> float:
        http = make_http_client(concurrency, 600.0) if aiohttp else None
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key="EMPTY", max_retries=0, http_client=http
        )
        queue = iter(requests)

        async def worker() -> None:
            for kwargs in queue:
                if post and raw:
                    content = orjson.dumps({"model": "loopback", **kwargs})
                    reply = await client.post("/chat/completions", content=content, cast_to=bytes)
                    orjson.loads(reply)
                elif post:
                    body = {"model": "loopback", **kwargs}
                    await client.post("/chat/completions", body=body, cast_to=ChatCompletion)
                else:
                    await client.chat.completions.create(model="loopback", **kwargs)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
        await client.close()
        return seconds

    return Timing(asyncio.run(main()), len(requests))
