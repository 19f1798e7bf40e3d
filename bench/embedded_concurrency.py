"""Throughput of the same 64 judge requests at concurrency 1 and at the engine default.

Runs graphs/pointwise.yaml (one LLM call per example) over 64 rows built from its examples,
with the cache off, against the embedded vLLM CPU server (started if none is running), or
any server given with --base-url. Prints both wall times and their ratio.

    python bench/embedded_concurrency.py [--base-url URL] [--requests 64] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from workload import variant_rows

from orchestrator import RunConfig, execute

ROOT = Path(__file__).resolve().parent.parent


async def timed_run(data: Path, out: Path, base_url: str, concurrency: int) -> tuple[float, int]:
    started = time.perf_counter()
    outcome = await execute(
        RunConfig(
            graph=ROOT / "graphs/pointwise.yaml",
            data=data,
            out=out,
            base_url=base_url,
            concurrency=concurrency,
            use_cache=False,
            progress=False,
            structured="server",
        )
    )
    return time.perf_counter() - started, outcome.manifest["counts"]["requests"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    server = None
    base_url = args.base_url
    if base_url is None:
        from orchestrator.local import server as embedded

        base_url = embedded.find_running()
        if base_url is None:
            server = embedded.start_server(log=print)
            base_url = server.base_url
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "rows.jsonl"
            variant_rows("pointwise.jsonl", data, args.requests)
            serial, n1 = asyncio.run(timed_run(data, Path(tmp) / "c1", base_url, 1))
            parallel, n2 = asyncio.run(
                timed_run(data, Path(tmp) / "cN", base_url, args.concurrency)
            )
    finally:
        if server is not None:
            server.stop()
    print(f"server: {base_url}")
    print(f"concurrency 1:  {n1} requests in {serial:.1f} s  ({n1 / serial:.2f} req/s)")
    print(
        f"concurrency {args.concurrency}: {n2} requests in {parallel:.1f} s  "
        f"({n2 / parallel:.2f} req/s)"
    )
    print(f"speed-up: {serial / parallel:.2f}x")


if __name__ == "__main__":
    main()
