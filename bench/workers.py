"""All cores: `orchestrator run` in 1 worker vs `--workers 2`, against the instant loopback.

Each run sends the same N pointwise-judge requests (new run folder, new cache: every
request reaches the server) at the same total `--concurrency` (split between workers).
Runs alternate, `--repeat` rounds; the ratio is taken within each round (runs seconds
apart share the machine's load) and its median printed. Target: >= 1.6x on 2 cores.

The loopback server is a process on the same cores, so its CPU share is printed too: every
core-second it burns is one the client cannot have. So are the owner process's (it reads
rows and writes every line and trace row) and the workers'. Wall time includes starting
the workers: round 1's run with workers also starts multiprocessing's fork server, which
imports orchestrator once, and later rounds' workers are forked from it, as a second run in
one Python session is. The span rate (first request to last reply, from the trace) leaves
fixed start-up costs out.

    python bench/workers.py --rows 20000 --concurrency 64 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopback import Loopback
from workload import write_judge_graph, write_rows

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_busy() -> float:
    """CPU seconds every process of the machine has used (its other users' too)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    idle = int(fields[3]) + int(fields[4])  # idle + iowait
    return (sum(int(f) for f in fields[:8]) - idle) / TICKS


def own_and_children() -> tuple[float, float]:
    """CPU seconds of this process, and of its descendants that have ended: its children,
    and the children of its live children (the workers, forked by multiprocessing's fork
    server, which is this process's child and reaps them)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    grandchildren = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        if int(fields[1]) == os.getpid():
            grandchildren += (int(fields[13]) + int(fields[14])) / TICKS
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime + grandchildren


@dataclass
class Measured:
    seconds: float
    requests: int
    span: float  # first request sent → last reply taken (from the trace)
    server_cpu: float  # cores the server kept busy over the run
    owner_cpu: float  # cores this process (the run's owner) kept busy
    workers_cpu: float  # cores the worker processes kept busy (0 in one process; Ray's
    # actors are not this process's descendants, so 0 there too: see machine_cpu)
    machine_cpu: float  # cores busy on the whole machine (other agents' work included)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def span_rate(self) -> float:
        return self.requests / self.span


def measure(
    graph: Path, data: Path, out: Path, server: Loopback, concurrency: int, **options: Any
) -> Measured:
    """One `orc.run` into a new folder and cache, with `options` (workers, executor)."""
    import orchestrator as orc

    server_before, machine_before = cpu_seconds(server.pid), machine_busy()
    own_before, kids_before = own_and_children()
    started = time.perf_counter()
    result = orc.run(
        graph,
        data,
        out=out,
        base_url=server.base_url,
        concurrency=concurrency,
        cache=out.parent / f"{out.name}-cache.sqlite",
        structured="server",  # no canary
        **options,
    )
    seconds = time.perf_counter() - started
    own_after, kids_after = own_and_children()
    counts = result.manifest.counts
    if counts.examples_failed or counts.cache_hits:
        raise SystemExit(f"{out.name}: {counts.examples_failed} failed, {counts.cache_hits} hits")
    with sqlite3.connect(out / "traces.sqlite") as db:
        first, last = db.execute("SELECT MIN(started), MAX(finished) FROM node_runs").fetchone()
    return Measured(
        seconds,
        counts.requests,
        last - first,
        (cpu_seconds(server.pid) - server_before) / seconds,
        (own_after - own_before) / seconds,
        (kids_after - kids_before) / seconds,
        (machine_busy() - machine_before) / seconds,
    )


def line(name: str, m: Measured) -> str:
    return (
        f"{name:<10}{m.rate:7.0f} req/s (span {m.span_rate:5.0f}) in {m.seconds:5.1f} s; "
        f"cores busy: server {m.server_cpu:.2f}, owner {m.owner_cpu:.2f}, "
        f"workers {m.workers_cpu:.2f}, machine {m.machine_cpu:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    runs: dict[int, list[Measured]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp, Loopback(latency=0.0) as server:
        folder = Path(tmp)
        data = write_rows(folder / "rows.jsonl", args.rows)
        graph = write_judge_graph(folder)
        for i in range(args.repeat):
            for workers in (1, 2):
                out = folder / f"w{workers}-{i}"
                runs[workers].append(
                    measure(graph, data, out, server, args.concurrency, workers=workers)
                )
            one, two = runs[1][-1], runs[2][-1]
            print(f"round {i + 1}: {line('1 worker', one)}")
            print(f"         {line('2 workers', two)}")
            span = two.span_rate / one.span_rate
            print(f"         ratio {two.rate / one.rate:.2f} (span {span:.2f})")
    ratios = [t.rate / o.rate for o, t in zip(runs[1], runs[2], strict=True)]
    spans = [t.span_rate / o.span_rate for o, t in zip(runs[1], runs[2], strict=True)]
    print(f"{args.rows} rows, concurrency {args.concurrency} in total, instant loopback server")
    print(
        f"--workers 2 / 1 worker: {statistics.median(ratios):.2f} wall, "
        f"{statistics.median(spans):.2f} span (medians of per-round ratios; target >= 1.6); "
        f"round 1, which started the fork server: {ratios[0]:.2f} wall"
    )
    server_share = statistics.median(m.server_cpu for m in runs[2])
    print(f"the server kept {server_share:.2f} of the {os.cpu_count()} cores busy at 2 workers")


if __name__ == "__main__":
    main()
