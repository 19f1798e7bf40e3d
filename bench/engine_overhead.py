"""Engine overhead: `orchestrator run` vs a bare AsyncOpenAI loop against an instant server.

All send the same N pointwise-judge requests at the same concurrency to `bench/loopback.py`
(its own process, no latency). Runs alternate, `--repeat` times each; the medians are
compared. Target: ours >= 0.9x the leanest SDK loop that builds the SDK's reply model
(`bare_post`). The bare loop is measured four ways: `chat.completions.create` on the SDK's
default httpx transport (what most scripts do), the same on the aiohttp transport
orchestrator uses, `client.post` on aiohttp (the SDK's own reply model built), and
`client.post` with the request encoded and the reply read by orjson, which is exactly how
orchestrator sends and reads: the ratio to that last one is our own overhead.
The Python API (`orchestrator.run`) and the `orchestrator run` command (in this process) are
timed too, each as a ratio to the runner path of the same round: target within 5%.

    python bench/engine_overhead.py --rows 5000 --concurrency 64

`--against REF` is the A/B between two versions of orchestrator instead: a git worktree at
REF and this checkout each run the same `orchestrator.run` (in a fresh child process per run,
after a warm-up) against one loopback server, in alternating order, `--rounds` times; the
median of the per-round ratios head/REF is the figure (target >= 0.95: a refactor may cost
at most 5% of the client's throughput).

    python bench/engine_overhead.py --against d339576 --rounds 15 --rows 5000

`--otlp` measures the live OpenTelemetry exporter (`otlp=`, docs/observability.md): paired
rounds of `orchestrator.run` with and without it, its spans going to `bench/otlp_sink.py`
(its own process); the median of the per-round ratios with/without is the figure (target
>= 0.95).

    python bench/engine_overhead.py --otlp --rounds 5 --rows 3000
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopback import ROOT, Loopback
from tree_ab import timed_run_in_tree
from workload import (
    Timing,
    rendered_requests,
    run_api,
    run_bare,
    run_cli,
    run_ours,
    write_judge_graph,
    write_rows,
)

LABELS = {
    "bare": "bare AsyncOpenAI loop, SDK default (httpx) transport",
    "bare_aiohttp": "bare AsyncOpenAI loop, aiohttp transport as ours",
    "bare_post": "bare AsyncOpenAI loop, aiohttp + client.post",
    "bare_bytes": "bare AsyncOpenAI loop, client.post, JSON by orjson as ours",
    "ours": "orchestrator run (cache, trace, results, progress bar)",
    "api": "orchestrator.run(...) Python API, same settings, no bar",
    "cli": "`orchestrator run` command, in this process",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", metavar="REF", help="A/B against this git commit")
    parser.add_argument(
        "--rounds", type=int, default=15, help="paired rounds with --against or --otlp"
    )
    parser.add_argument(
        "--otlp", action="store_true", help="the run with its spans sent live vs without"
    )
    args = parser.parse_args()
    if args.otlp:
        with_otlp(args.rounds, args.rows, args.concurrency)
        return
    if args.against:
        against(args.against, args.rounds, args.rows, args.concurrency)
        return

    with tempfile.TemporaryDirectory() as tmp, Loopback(latency=0.0) as server:
        folder = Path(tmp)
        data = write_rows(folder / "rows.jsonl", args.rows)
        graph = write_judge_graph(folder)
        requests = rendered_requests(graph, data)
        runs: dict[str, list[Timing]] = {name: [] for name in LABELS}
        for i in range(args.repeat):
            for name in LABELS:
                before = server.requests()
                out = folder / f"{name}{i}"
                if name == "ours":
                    timing = run_ours(graph, data, out, server.base_url, args.concurrency)
                elif name in ("api", "cli"):
                    run = run_api if name == "api" else run_cli
                    timing = run(graph, data, out, server.base_url, args.concurrency)
                else:
                    timing = run_bare(
                        requests,
                        server.base_url,
                        args.concurrency,
                        aiohttp=name != "bare",
                        post=name in ("bare_post", "bare_bytes"),
                        raw=name == "bare_bytes",
                    )
                sent = server.requests() - before
                if sent != args.rows:
                    raise SystemExit(f"{name}: expected {args.rows} requests, server saw {sent}")
                runs[name].append(timing)
            print(
                f"round {i + 1}: "
                + "   ".join(f"{name} {runs[name][-1].rate:6.0f} req/s" for name in LABELS)
                + f"   ours/bare_post {runs['ours'][-1].rate / runs['bare_post'][-1].rate:.2f}"
            )
    rates = {name: statistics.median(t.rate for t in runs[name]) for name in LABELS}
    print(f"{args.rows} rows, concurrency {args.concurrency}, instant loopback server")
    for name, label in LABELS.items():
        print(f"{label:<58}{rates[name]:7.0f} req/s (median of {args.repeat})")
    # On a shared machine the speed drifts between rounds; a ratio within one round (runs
    # seconds apart) is steadier than a ratio of medians, so both are shown.
    paired = {
        name: statistics.median(
            o.rate / b.rate for o, b in zip(runs["ours"], runs[name], strict=True)
        )
        for name in ("bare", "bare_aiohttp", "bare_post", "bare_bytes")
    }
    # The API and the CLI each against the runner path of the same round.
    entry = {
        name: statistics.median(
            e.rate / o.rate for e, o in zip(runs[name], runs["ours"], strict=True)
        )
        for name in ("api", "cli")
    }
    print(
        "median of per-round ratios: "
        + ", ".join(f"ours/{name} {value:.2f}" for name, value in paired.items())
    )
    print(
        f"API / runner {entry['api']:.2f}, CLI / runner {entry['cli']:.2f}"
        " (medians of per-round ratios; target: within 5%, i.e. >= 0.95)"
    )
    print(
        f"ratios orchestrator / bare: SDK default {rates['ours'] / rates['bare']:.2f}, "
        f"aiohttp {rates['ours'] / rates['bare_aiohttp']:.2f}, "
        f"aiohttp + post {rates['ours'] / rates['bare_post']:.2f} (target >= 0.90), "
        f"post + orjson {rates['ours'] / rates['bare_bytes']:.2f}"
    )


def with_otlp(rounds: int, rows: int, concurrency: int) -> None:
    """Paired rounds of the API run with its spans sent to a sink and without, alternating
    which goes first."""
    sink = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "otlp_sink.py")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sink.stdout is not None
        url = sink.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp, Loopback(latency=0.0) as server:
            folder = Path(tmp)
            data = write_rows(folder / "rows.jsonl", rows)
            graph = write_judge_graph(folder)
            run_api(graph, data, folder / "warm", server.base_url, concurrency, url)
            rates: dict[str, list[float]] = {"off": [], "on": []}
            ratios: list[float] = []
            for i in range(rounds):
                order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
                for name in order:
                    timing = run_api(
                        graph,
                        data,
                        folder / f"{name}{i}",
                        server.base_url,
                        concurrency,
                        url if name == "on" else None,
                    )
                    rates[name].append(timing.rate)
                ratios.append(rates["on"][-1] / rates["off"][-1])
                print(
                    f"round {i + 1:2d}: without {rates['off'][-1]:6.0f} req/s   "
                    f"with --otlp {rates['on'][-1]:6.0f} req/s   ratio {ratios[-1]:.3f}",
                    flush=True,
                )
    finally:
        sink.terminate()
        sink.wait()
    print(
        f"{rows} rows, concurrency {concurrency}, {rounds} paired rounds, instant loopback "
        f"server; medians: without {statistics.median(rates['off']):.0f} req/s, "
        f"with --otlp {statistics.median(rates['on']):.0f} req/s"
    )
    print(
        f"median of per-round ratios with/without --otlp: {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}; target >= 0.95)"
    )


def against(ref: str, rounds: int, rows: int, concurrency: int) -> None:
    """Paired rounds of this checkout vs a worktree at `ref`, alternating which goes first."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp, Loopback(latency=0.0) as server:
        folder = Path(tmp)
        base = folder / f"tree-{commit}"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(base), ref],
            check=True,
        )
        try:
            data = write_rows(folder / "rows.jsonl", rows)
            warm = write_rows(folder / "warm.jsonl", min(rows, 300), seed=11)
            graph = write_judge_graph(folder)
            trees = {commit: base, "head": ROOT}
            ratios: list[float] = []
            rates: dict[str, list[float]] = {name: [] for name in trees}
            for i in range(rounds):
                # Alternate the order so a drift within a round favours neither side.
                order = list(trees) if i % 2 == 0 else list(reversed(trees))
                for name in order:
                    seconds, done = timed_run_in_tree(
                        trees[name],
                        graph,
                        data,
                        warm,
                        folder / f"{name}{i}",
                        server.base_url,
                        concurrency,
                    )
                    if done != rows:
                        raise SystemExit(f"{name}: {done} requests counted, expected {rows}")
                    rates[name].append(done / seconds)
                ratios.append(rates["head"][-1] / rates[commit][-1])
                print(
                    f"round {i + 1:2d}: {commit} {rates[commit][-1]:6.0f} req/s   "
                    f"head {rates['head'][-1]:6.0f} req/s   head/{commit} {ratios[-1]:.3f}",
                    flush=True,
                )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                check=False,
            )
    print(
        f"{rows} rows, concurrency {concurrency}, {rounds} paired rounds, instant loopback "
        f"server; medians: {commit} {statistics.median(rates[commit]):.0f} req/s, "
        f"head {statistics.median(rates['head']):.0f} req/s"
    )
    print(
        f"median of per-round ratios head/{commit}: {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}; target >= 0.95)"
    )


if __name__ == "__main__":
    main()
