"""Keeping vLLM full: our ExPerT run vs a bare load generator replaying its requests.

The ExPerT graph has dependencies (extract -> match -> judge), so at times fewer requests
are ready than the concurrency allows. How much output throughput does that cost? This
runs graphs/expert.yaml over examples/expert.jsonl on a real vLLM server (fresh response
cache, so every call reaches the server), then rebuilds every request the run sent from its
trace (messages, sampling, JSON schema, exactly as orchestrator/calls/request.py builds a body)
and fires them all, with no dependencies, from a plain `openai.AsyncOpenAI` worker pool at
the same concurrency: the ideal a dependency-free load generator reaches on that server.
Output tokens/s = completion tokens / wall seconds; the last line is ours/replay (target
>= 0.9).

It also reads vLLM's Prometheus /metrics around each run: requests finished, tokens
generated, and the prefix-cache hit rate (hit tokens / queried tokens). To see whether the
graph's static-first prompt layout (fixed instructions in the system message, before the
per-example text) pays off, the same graph is run once more with every LLM node's system
and user templates swapped (same text, per-example part first), and the two hit rates are
compared. When the server offers POST /reset_prefix_cache (vLLM started with
VLLM_SERVER_DEV_MODE=1), the prefix cache is emptied before every run and every replay, so
no run profits from blocks an earlier one left behind; otherwise that is printed.

    VLLM_SERVER_DEV_MODE=1 orchestrator serve &     # embedded server, port 8765
    python bench/vllm_saturation.py [--concurrency 64 16] [--repeats 2] [--limit 10]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from rich.console import Console
from workload import execute_timed

from orchestrator import RunConfig
from orchestrator.calls.request import request_body, with_schema_instruction
from orchestrator.store.reader import TraceReader

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASE_URL = "http://127.0.0.1:8765/v1"
REQUEST_TIMEOUT = 600.0  # seconds; what `orchestrator run` uses on the embedded CPU server

# Counters summed over their labels (finished_reason, engine, model_name).
REQUESTS = "vllm:request_success_total"
GENERATED = "vllm:generation_tokens_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"


def trace_dicts(trace: Path) -> list[dict[str, Any]]:
    """Every node execution in a trace file, oldest first, as plain dicts."""
    with TraceReader.open(trace) as reader:
        return [run.model_dump() for run in reader.node_runs()]


# --------------------------------------------------------------------------------------------
# vLLM's /metrics
# --------------------------------------------------------------------------------------------


def server_root(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1")


def scrape(base_url: str) -> dict[str, float]:
    """Every sample of the Prometheus text at /metrics, summed per metric name."""
    text = httpx.get(f"{server_root(base_url)}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0]
        try:
            totals[name] = totals.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return totals


def requests_by_reason(base_url: str) -> dict[str, float]:
    """vllm:request_success_total per finished_reason (stop, length, abort, ...)."""
    text = httpx.get(f"{server_root(base_url)}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(REQUESTS + "{"):
            labels, _, value = line.rpartition(" ")
            reason = labels.split('finished_reason="', 1)[-1].split('"', 1)[0]
            out[reason] = out.get(reason, 0.0) + float(value)
    return out


def delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def hit_rate(after: dict[str, float], before: dict[str, float]) -> tuple[float, float, float]:
    """(hit rate, hit tokens, queried tokens) of the prefix cache between two scrapes."""
    queries = delta(after, before, PREFIX_QUERIES)
    hits = delta(after, before, PREFIX_HITS)
    return (hits / queries if queries else 0.0), hits, queries


def reset_prefix_cache(base_url: str) -> bool:
    """Empty vLLM's prefix cache; False when the server does not offer it (no dev mode)."""
    try:
        reply = httpx.post(f"{server_root(base_url)}/reset_prefix_cache", timeout=30)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


# --------------------------------------------------------------------------------------------
# Our run
# --------------------------------------------------------------------------------------------


@dataclass
class GraphRun:
    wall: float  # around execute(), start-up (canary, /version) included
    manifest_wall: float
    span: float  # first node start to last node finish in the trace: the engine run
    completion_tokens: int  # summed over the trace's node records (no canary)
    manifest_completion_tokens: int  # the run's counter (canary included)
    manifest_requests: int
    examples_ok: int
    examples_failed: int
    folder: Path
    longest: int  # most completion tokens of one node execution
    cut: int  # replies that stopped at max_tokens (finish_reason "length")
    metrics: dict[str, float] = field(default_factory=dict)  # deltas of /metrics


def run_graph(
    graph: Path,
    data: Path,
    base_url: str,
    concurrency: int,
    limit: int | None,
    out: Path,
) -> GraphRun:
    """graphs/… over data on the server with a fresh response cache; figures from the run."""
    before = scrape(base_url)
    config = RunConfig(
        graph=graph,
        data=data,
        out=out,
        base_url=base_url,
        limit=limit,
        cache=out.parent / f"{out.name}-cache.sqlite",
        concurrency=concurrency,
        timeout=REQUEST_TIMEOUT,
        progress=False,
    )
    outcome, wall = execute_timed(config, Console(stderr=True, quiet=True))
    after = scrape(base_url)
    counts = outcome.manifest["counts"]
    records = trace_dicts(out / "traces.sqlite")
    first = min(r["started"] for r in records)
    last = max(r["finished"] for r in records)
    return GraphRun(
        wall=wall,
        manifest_wall=outcome.manifest["wall_seconds"],
        span=last - first,
        completion_tokens=sum(r["completion_tokens"] or 0 for r in records),
        manifest_completion_tokens=counts["completion_tokens"],
        manifest_requests=counts["requests"],
        examples_ok=counts["examples_ok"],
        examples_failed=counts["examples_failed"],
        folder=out,
        longest=max((r["completion_tokens"] or 0 for r in records), default=0),
        cut=sum(a["finish_reason"] == "length" for r in records for a in r["attempts"]),
        metrics={name: delta(after, before, name) for name in after},
    )


# --------------------------------------------------------------------------------------------
# The replay
# --------------------------------------------------------------------------------------------


@dataclass
class Bodies:
    bodies: list[dict[str, Any]]
    replies: int  # replies our client received for these records (first asks + re-asks)
    attempts: Counter[str]


def request_bodies(trace: Path) -> Bodies:
    """The first request of every LLM node execution in the trace, built by the client's own
    `request_body`.

    Re-asks after an invalid reply are not in the node's messages; they are counted from
    the attempts instead (`replies - len(bodies)`).
    """
    records = [r for r in trace_dicts(trace) if r["request"] and r["messages"]]
    records.sort(key=lambda r: r["started"])  # the order our engine issued them
    bodies: list[dict[str, Any]] = []
    kinds: Counter[str] = Counter()
    replies = 0
    for rec in records:
        kinds.update(a["kind"] for a in rec["attempts"])
        if any(a["kind"] == "cache" for a in rec["attempts"]):
            continue  # came from our response cache (cannot happen with a fresh one)
        replies += sum(a["kind"] in ("ok", "invalid", "truncated") for a in rec["attempts"])
        params = rec["request"]["params"]
        messages = rec["messages"]
        schema = rec["schema"]
        server_schema = None
        if schema is not None and rec["request"]["structured"] == "prompt":
            messages = with_schema_instruction(messages, schema)
        elif schema is not None:
            server_schema = schema
        body = request_body(rec["model"], messages, params, params.get("n") or 1, server_schema)
        bodies.append(body)
    return Bodies(bodies, replies, kinds)


@dataclass
class Replay:
    wall: float
    completion_tokens: int
    errors: int
    longest: int
    cut: int
    metrics: dict[str, float]


async def _replay(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> Replay:
    client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", timeout=REQUEST_TIMEOUT, max_retries=0)
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    tokens = 0
    errors = 0
    longest = 0
    cut = 0

    async def worker() -> None:
        nonlocal tokens, errors, longest, cut
        while True:
            try:
                body = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                # Sent as built, like our client does (no per-call transform of the body).
                reply = await client.post("/chat/completions", body=body, cast_to=ChatCompletion)
            except Exception:
                errors += 1
                continue
            if reply.usage is not None:
                tokens += reply.usage.completion_tokens
                longest = max(longest, reply.usage.completion_tokens)
            cut += sum(c.finish_reason == "length" for c in reply.choices)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    await client.close()
    return Replay(wall, tokens, errors, longest, cut, {})


def replay(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> Replay:
    before = scrape(base_url)
    result = asyncio.run(_replay(base_url, bodies, concurrency))
    after = scrape(base_url)
    result.metrics = {name: delta(after, before, name) for name in after}
    return result


# --------------------------------------------------------------------------------------------
# The dynamic-first variant of the graph
# --------------------------------------------------------------------------------------------


def dynamic_first_graph(graph: Path, prompts: Path, folder: Path) -> Path:
    """A copy of `graph` whose LLM nodes send the per-example text first.

    The prompts folder is copied next to it and every LLM node's `system` and `prompt`
    templates are swapped: the same text and the same chat-template tokens, but the
    per-example part (the user template) now opens the conversation and the fixed
    instructions follow it. YAML merge keys (`<<: *extract`) are expanded on loading.
    """
    shutil.copytree(prompts, folder / "prompts", dirs_exist_ok=True)
    spec = yaml.safe_load(graph.read_text())
    spec["prompts"] = "prompts"
    spec["name"] = f"{spec['name']}_dynamic_first"
    for node in spec["nodes"].values():
        if node.get("kind") == "llm" and node.get("system") and node.get("prompt"):
            node["system"], node["prompt"] = node["prompt"], node["system"]
    path = folder / f"{graph.stem}_dynamic_first.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return path


# --------------------------------------------------------------------------------------------


def load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def describe_run(label: str, run: GraphRun) -> None:
    rate, hits, queries = hit_rate(run.metrics, {})
    print(
        f"{label}: {run.examples_ok} ok / {run.examples_failed} failed examples;"
        f" wall {run.wall:.1f} s (manifest {run.manifest_wall:.1f} s, engine span"
        f" {run.span:.1f} s); completion tokens {run.completion_tokens} (manifest"
        f" {run.manifest_completion_tokens}, server {run.metrics.get(GENERATED, 0):.0f});"
        f" requests {run.manifest_requests} (server {run.metrics.get(REQUESTS, 0):.0f});"
        f" {run.completion_tokens / run.span:.2f} tok/s over the span,"
        f" {run.manifest_completion_tokens / run.manifest_wall:.2f} over the manifest wall;"
        f" prefix cache {hits:.0f}/{queries:.0f} tokens = {rate:.1%};"
        f" longest reply {run.longest} tokens, {run.cut} cut at max_tokens"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL)
    parser.add_argument("--graph", type=Path, default=ROOT / "graphs" / "expert.yaml")
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "expert.jsonl")
    parser.add_argument("--limit", type=int, default=None, help="first N examples (default all)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[64], help="one or more; default 64"
    )
    parser.add_argument("--repeats", type=int, default=1, help="run/replay pairs per concurrency")
    parser.add_argument(
        "--no-layout", action="store_true", help="skip the dynamic-first layout comparison"
    )
    parser.add_argument("--keep", type=Path, help="keep run folders here (default: a temp dir)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vllm-saturation-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    can_reset = reset_prefix_cache(args.base_url)
    print(
        f"server {args.base_url}; graph {args.graph.name} on {args.data.name}"
        f" (limit {args.limit}); load average {load()}"
    )
    if not can_reset:
        print(
            "note: POST /reset_prefix_cache is not available (start vLLM with"
            " VLLM_SERVER_DEV_MODE=1): a replay can reuse prefix blocks its run left cached"
        )
    cache_info = [
        line
        for line in httpx.get(f"{server_root(args.base_url)}/metrics", timeout=10).text.split("\n")
        if line.startswith("vllm:cache_config_info{")
    ]
    if cache_info:
        labels = cache_info[0]
        for key in ("enable_prefix_caching", "block_size"):
            value = labels.split(f'{key}="', 1)[-1].split('"', 1)[0]
            print(f"server cache config: {key}={value}")

    ratios: list[tuple[int, int, float, float]] = []
    static_runs: list[GraphRun] = []
    for concurrency in args.concurrency:
        for repeat in range(1, args.repeats + 1):
            tag = f"c{concurrency}-r{repeat}"
            reset_prefix_cache(args.base_url)
            print(f"--- concurrency {concurrency}, pair {repeat}; load average {load()}")
            ours = run_graph(
                args.graph, args.data, args.base_url, concurrency, args.limit, work / tag
            )
            describe_run("ours  ", ours)
            if concurrency == args.concurrency[0]:
                static_runs.append(ours)
            found = request_bodies(ours.folder / "traces.sqlite")
            reasks = found.replies - len(found.bodies)
            print(
                f"trace: {len(found.bodies)} LLM node requests, {reasks} re-asks (not"
                f" replayed); attempts by kind {dict(found.attempts)}"
            )
            reset_prefix_cache(args.base_url)
            again = replay(args.base_url, found.bodies, concurrency)
            rate, hits, queries = hit_rate(again.metrics, {})
            tps = again.completion_tokens / again.wall
            print(
                f"replay: {len(found.bodies)} requests ({again.errors} failed) at"
                f" concurrency {concurrency} in {again.wall:.1f} s; completion tokens"
                f" {again.completion_tokens} (server {again.metrics.get(GENERATED, 0):.0f});"
                f" {tps:.2f} tok/s; prefix cache {hits:.0f}/{queries:.0f} = {rate:.1%};"
                f" longest reply {again.longest} tokens, {again.cut} cut at max_tokens;"
                f" load average {load()}"
            )
            ours_span = ours.completion_tokens / ours.span
            ours_wall = ours.manifest_completion_tokens / ours.manifest_wall
            ratios.append((concurrency, repeat, ours_span / tps, ours_wall / tps))
            print(
                f"ratio ours/replay (c={concurrency}, pair {repeat}): {ours_span / tps:.3f}"
                f" over the engine span, {ours_wall / tps:.3f} over the manifest wall"
            )

    if not args.no_layout:
        concurrency = args.concurrency[0]
        variant = dynamic_first_graph(args.graph, ROOT / "prompts", work / "variant")
        reset_prefix_cache(args.base_url)
        print(f"--- dynamic-first layout ({variant}), concurrency {concurrency}; load {load()}")
        dyn = run_graph(variant, args.data, args.base_url, concurrency, args.limit, work / "dyn")
        describe_run("dynamic-first", dyn)
        for i, run in enumerate(static_runs, start=1):
            describe_run(f"static-first (ours, pair {i})", run)
        static_rate = [hit_rate(r.metrics, {})[0] for r in static_runs]
        dyn_rate = hit_rate(dyn.metrics, {})[0]
        print(
            "prefix-cache hit rate: static-first (shipped) "
            + ", ".join(f"{r:.1%}" for r in static_rate)
            + f" vs dynamic-first {dyn_rate:.1%}"
        )
    print(f"run folders: {work}")
    print(
        "RATIO ours/replay output tokens/s (engine span; target >= 0.9): "
        + ", ".join(f"c={c} pair {r}: {span:.3f}" for c, r, span, _ in ratios)
        + " | over the manifest wall: "
        + ", ".join(f"{whole:.3f}" for _, _, _, whole in ratios)
    )


if __name__ == "__main__":
    main()
