"""Several replicas of one model: does a run go faster with more servers, and does it lose
nothing when one dies?

Each loopback server (bench/loopback.py, its own process) answers at most `--capacity`
requests at once, each after `--latency` seconds, like a GPU server whose batch is full:
one such server caps a run at capacity / latency requests/s (16 / 0.05 s = 320/s). The
same judge graph runs over the same rows against 1, 2 and 4 of them (`--base-url`
repeated, a fixed in-flight limit per server), and the rate is compared with one server's,
measured in the same process (targets: 2 servers >= 1.9x, 4 >= 3.6x). Then the run against
4 servers is repeated with one server killed (SIGKILL) part-way: every example must still
end ok.

    python bench/replicas.py [--rows 3000] [--capacity 16] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from loopback import Loopback
from workload import execute_timed, write_judge_graph, write_rows

from orchestrator import RunConfig


def run(
    graph: Path, data: Path, out: Path, urls: list[str], concurrency: int
) -> tuple[dict[str, Any], float, float]:
    """One run against `urls`; its manifest, wall seconds, and requests/s between the first
    request sent and the last reply taken (from the trace)."""
    config = RunConfig(
        graph=graph,
        data=data,
        out=out,
        base_url=tuple(urls),
        concurrency=concurrency,
        use_cache=False,
        structured="server",
        overwrite=True,
    )
    outcome, seconds = execute_timed(config)
    with sqlite3.connect(out / "traces.sqlite") as db:
        first, last = db.execute("SELECT MIN(started), MAX(finished) FROM node_runs").fetchone()
    requests = outcome.manifest["counts"]["requests"]
    return outcome.manifest, seconds, requests / (last - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument(
        "--capacity", type=int, default=16, help="requests a server answers at once"
    )
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    parser.add_argument(
        "--concurrency", type=int, default=32, help="in-flight limit per server (fixed)"
    )
    parser.add_argument("--kill-after", type=float, default=1.0, help="seconds into the kill run")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    try:
        graph = write_judge_graph(folder)
        data = write_rows(folder / "rows.jsonl", args.rows)
        print(
            f"{args.rows} rows, one request each; each server answers {args.capacity} at once, "
            f"{args.latency * 1000:.0f} ms each (a cap of {args.capacity / args.latency:.0f} "
            f"req/s); client limit {args.concurrency} per server"
        )
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(Loopback(args.latency, capacity=args.capacity))
                for _ in range(4)
            ]
            rates: dict[int, float] = {}
            for count in (1, 2, 4):
                urls = [s.base_url for s in servers[:count]]
                manifest, seconds, rate = run(
                    graph, data, folder / f"run{count}", urls, args.concurrency
                )
                failed = manifest["counts"]["examples_failed"]
                rates[count] = rate
                shares = " / ".join(str(r["requests"]) for r in manifest["replicas"])
                print(
                    f"{count} server(s): {rate:7.0f} req/s  ({seconds:.1f} s wall, "
                    f"{failed} failed; requests per server {shares})"
                )
            for count in (2, 4):
                target = {2: 1.9, 4: 3.6}[count]
                print(
                    f"ratio {count} servers / 1: {rates[count] / rates[1]:.2f}x "
                    f"(target >= {target})"
                )
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(Loopback(args.latency, capacity=args.capacity))
                for _ in range(4)
            ]
            victim = servers[3]
            killed: list[float] = []

            def kill() -> None:
                assert victim._proc is not None
                victim._proc.kill()
                killed.append(time.monotonic())

            timer = threading.Timer(args.kill_after, kill)
            timer.start()
            urls = [s.base_url for s in servers]
            manifest, seconds, rate = run(graph, data, folder / "kill", urls, args.concurrency)
            timer.cancel()
            counts = manifest["counts"]
            moved = sum(
                1 for r in manifest["replicas"] if r["base_url"] == victim.base_url and r["outages"]
            )
            print(
                f"4 servers, one killed {args.kill_after:g} s in"
                f"{'' if killed else ' (the run ended first: raise --rows)'}: "
                f"{counts['examples_ok']} ok, {counts['examples_failed']} failed examples, "
                f"{rate:.0f} req/s, {counts['retries']} retries; killed server out of "
                f"rotation: {'yes' if moved else 'no'}"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
