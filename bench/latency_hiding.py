"""Latency hiding: requests/s at several concurrencies against a server that waits per reply.

With a fixed latency L and C requests in flight, the best any client can do is C/L
requests/s. This runs `orchestrator run` (and, for reference, the bare SDK loop that sends
exactly as orchestrator does) at each concurrency against `bench/loopback.py` with L added
to every reply, and prints each rate as a fraction of C/L. "ours" is the whole run (start-up
and summary included); "in-run" counts from the first request to the last reply.

    python bench/latency_hiding.py --latency 0.1 --concurrency 1 16 64 256
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopback import Loopback
from workload import rendered_requests, run_bare, run_ours, write_judge_graph, write_rows


def rows_for(concurrency: int, latency: float, seconds: float, cap: int) -> int:
    """Enough rows for about `seconds` of steady state at the ideal rate, within [30, cap]."""
    return max(30, min(cap, round(seconds * concurrency / latency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per reply")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--seconds", type=float, default=4.0, help="ideal run length per level")
    parser.add_argument("--max-rows", type=int, default=4000)
    args = parser.parse_args()

    lines = []
    with tempfile.TemporaryDirectory() as tmp, Loopback(latency=args.latency) as server:
        folder = Path(tmp)
        graph = write_judge_graph(folder)
        for concurrency in args.concurrency:
            n = rows_for(concurrency, args.latency, args.seconds, args.max_rows)
            data = write_rows(folder / f"rows{concurrency}.jsonl", n)
            bare = run_bare(
                rendered_requests(graph, data), server.base_url, concurrency, True, True
            )
            ours = run_ours(graph, data, folder / f"run{concurrency}", server.base_url, concurrency)
            ideal = concurrency / args.latency
            line = (
                f"{concurrency:>11}{n:>7}{ideal:>9.0f}{bare.rate:>9.0f}{bare.rate / ideal:>7.2f}"
                f"{ours.rate:>9.0f}{ours.rate / ideal:>7.2f}"
                f"{ours.span_rate:>9.0f}{ours.span_rate / ideal:>7.2f}"
            )
            lines.append((concurrency, ours.span_rate / ideal))
            print(line if len(lines) > 1 else HEADER + "\n" + line, flush=True)
    print(
        f"{args.latency * 1000:.0f} ms per reply; in-run ratio orchestrator/ideal at concurrency "
        + ", ".join(f"{c}: {r:.2f}" for c, r in lines)
    )


HEADER = (
    f"{'concurrency':>11}{'rows':>7}{'ideal/s':>9}{'bare/s':>9}{'ratio':>7}"
    f"{'ours/s':>9}{'ratio':>7}{'in-run/s':>9}{'ratio':>7}"
)

if __name__ == "__main__":
    main()
