"""The loopback benchmarks still run end to end (tiny sizes; no timing is asserted here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(script: str, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


@pytest.mark.parametrize(
    ("script", "args", "last_line"),
    [
        (
            "engine_overhead.py",
            ["--rows", "150", "--repeat", "1", "--concurrency", "8"],
            r"ratios orchestrator / bare: SDK default \d+\.\d\d, aiohttp \d+\.\d\d, "
            r"aiohttp \+ post \d+\.\d\d",
        ),
        (
            "engine_overhead.py",
            ["--against", "HEAD", "--rounds", "1", "--rows", "100", "--concurrency", "8"],
            r"median of per-round ratios head/\w+: \d+\.\d{3} \(range",
        ),
        (
            "latency_hiding.py",
            ["--latency", "0.02", "--concurrency", "1", "8", "--seconds", "0.5"],
            r"in-run ratio orchestrator/ideal at concurrency 1: \d+\.\d\d, 8: \d+\.\d\d",
        ),
        (
            "workers.py",
            ["--rows", "300", "--repeat", "1", "--concurrency", "8"],
            r"the server kept \d+\.\d\d of the \d+ cores busy at 2 workers",
        ),
        (
            "scale.py",
            ["--rows", "400", "--marks", "100", "400", "--concurrency", "8"],
            r"RSS at 400 rows / at 100 rows: \d+\.\d\d .*peak \d+ MB",
        ),
    ],
)
def test_loopback_benchmark_runs(script: str, args: list[str], last_line: str):
    lines = run_bench(script, *args)
    assert re.search(last_line, lines[-1]), lines


def test_scale_run_sends_one_request_per_row_and_none_from_cache():
    lines = run_bench("scale.py", "--rows", "300", "--marks", "300", "--concurrency", "8")
    fresh = next(line for line in lines if line.startswith("fresh run:"))
    cached = next(line for line in lines if line.startswith("cached run:"))
    assert "301 requests" in fresh  # 300 rows + the canary
    assert " 1 requests" in cached  # only the canary: every judge reply came from the cache
