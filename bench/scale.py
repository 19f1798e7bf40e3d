"""Scale: `orchestrator run` of graphs/pointwise.yaml over 100,000 rows, then again from cache.

The run is the real command in a child process against `bench/loopback.py` (instant
replies). While it runs, its resident memory is read from /proc as the results file passes
10k, 50k and 100k lines; the child's lifetime peak comes from wait4 when it exits. The
second run uses a new run folder and the same response cache, so every reply is a hit.
Targets: peak RSS <= 500 MB and flat (at 100k within 20% of at 10k).

    python bench/scale.py --rows 100000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopback import Loopback
from workload import ROOT, run_command, write_rows


@dataclass
class Watched:
    seconds: float = 0.0
    peak_mb: float = 0.0  # whole life of the child, from wait4
    samples: dict[int, tuple[float, float]] = field(default_factory=dict)  # rows → (rss, hwm)


def _status_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a live process in MB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def run_and_watch(command: list[str], results: Path, marks: list[int]) -> Watched:
    """Run `command`, sampling its memory as `results` grows past each mark."""
    watched = Watched()
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines, offset = 0, 0
    pending = sorted(marks)
    while True:
        # wait4 rather than Popen.poll: it also returns the child's peak memory.
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.1)
        if results.exists():
            with results.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            lines += chunk.count(b"\n")
        while pending and lines >= pending[0]:
            watched.samples[pending.pop(0)] = _status_mb(proc.pid)
    watched.seconds = time.perf_counter() - started
    watched.peak_mb = usage.ru_maxrss / 1024
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"run failed ({proc.returncode}):\n{err[-2000:]}")
    return watched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--marks", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    args = parser.parse_args()
    marks = [m for m in args.marks if m <= args.rows]

    with tempfile.TemporaryDirectory() as tmp, Loopback(latency=0.0) as server:
        folder = Path(tmp)
        data = write_rows(folder / "rows.jsonl", args.rows)
        cache = folder / "cache.sqlite"

        def command(out: Path) -> list[str]:
            graph = ROOT / "graphs" / "pointwise.yaml"
            return run_command(graph, data, out, server.base_url, args.concurrency, cache)

        before = server.requests()
        fresh = run_and_watch(command(folder / "run1"), folder / "run1" / "results.jsonl", marks)
        sent = server.requests() - before
        cached = run_and_watch(command(folder / "run2"), folder / "run2" / "results.jsonl", [])
        from_cache = server.requests() - before - sent
        trace_mb = (folder / "run1" / "traces.sqlite").stat().st_size / 2**20

    print(f"graphs/pointwise.yaml, {args.rows} rows, concurrency {args.concurrency}")
    print(
        f"fresh run:  {fresh.seconds:7.1f} s  {args.rows / fresh.seconds:7.0f} rows/s  "
        f"{sent} requests (one is the structured-output canary)  trace {trace_mb:.0f} MB"
    )
    for mark, (rss, hwm) in sorted(fresh.samples.items()):
        print(f"  at {mark:>7} rows: RSS {rss:6.0f} MB, peak so far {hwm:6.0f} MB")
    print(f"  peak RSS over the whole run (wait4): {fresh.peak_mb:.0f} MB")
    print(
        f"cached run: {cached.seconds:7.1f} s  {args.rows / cached.seconds:7.0f} rows/s  "
        f"{from_cache} requests (the canary; every judge reply from cache)"
    )
    first, last = min(fresh.samples), max(fresh.samples)
    growth = fresh.samples[last][0] / fresh.samples[first][0]
    print(
        f"RSS at {last} rows / at {first} rows: {growth:.2f} (target <= 1.20); "
        f"peak {fresh.peak_mb:.0f} MB (target <= 500)"
    )


if __name__ == "__main__":
    main()
