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
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopback import Loopback
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
    args = parser.parse_args()

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


if __name__ == "__main__":
    main()
