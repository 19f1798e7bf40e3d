"""Does prefix-cache affinity pay? Two vLLM replicas, ExPerT with and without it.

With affinity, the calls of one example prefer the replica that served its earlier calls
(while it is not much busier than the others), so text an example's prompts share can be
found in that server's prefix cache. This starts two embedded vLLM CPU servers (ports 8792
and 8793, VLLM_SERVER_DEV_MODE=1 so their prefix caches can be emptied before each run),
runs graphs/expert.yaml over `--rows` examples against both (`--base-url` twice, the cache
off) with affinity off and on, in turn, and prints for each run the prefix-cache hit rate
over both servers (hit tokens / queried tokens, from their /metrics) and the output
tokens/s.

    python bench/replica_affinity.py [--rows 20] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from auto_concurrency import make_rows
from vllm_saturation import (
    GENERATED,
    PREFIX_HITS,
    PREFIX_QUERIES,
    delta,
    reset_prefix_cache,
    scrape,
)
from workload import execute_timed

from orchestrator import RunConfig
from orchestrator.local import server as embedded

ROOT = Path(__file__).resolve().parent.parent
PORTS = (8792, 8793)


def one_run(urls: list[str], data: Path, out: Path, affinity: bool) -> tuple[float, float]:
    """(prefix-cache hit rate over both servers, output tokens/s) of one run; SystemExit
    if an example failed (the figures would not compare like with like)."""
    for url in urls:
        reset_prefix_cache(url)
    before = [scrape(url) for url in urls]
    outcome, seconds = execute_timed(
        RunConfig(
            graph=ROOT / "graphs/expert.yaml",
            data=data,
            out=out,
            base_url=tuple(urls),
            concurrency=32,
            affinity=affinity,
            use_cache=False,
            structured="server",
            timeout=900.0,
            overwrite=True,
        )
    )
    failed = outcome.manifest["counts"]["examples_failed"]
    if failed:
        raise SystemExit(f"{failed} examples failed (affinity {affinity}); see {out}")
    after = [scrape(url) for url in urls]
    hits = sum(delta(a, b, PREFIX_HITS) for a, b in zip(after, before, strict=True))
    queries = sum(delta(a, b, PREFIX_QUERIES) for a, b in zip(after, before, strict=True))
    tokens = sum(delta(a, b, GENERATED) for a, b in zip(after, before, strict=True))
    return (hits / queries if queries else 0.0), tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")
    servers = []
    try:
        for port in PORTS:
            servers.append(embedded.start_server(port=port, log=print))
        urls = [s.base_url for s in servers]
        with tempfile.TemporaryDirectory() as tmp:
            data = make_rows(Path(tmp) / "rows.jsonl", args.rows)
            print(f"ExPerT over {args.rows} examples on two replicas {urls}, 32 in flight each")
            for round_ in range(args.rounds):
                for affinity in (False, True):
                    rate, tps = one_run(urls, data, Path(tmp) / f"r{round_}{affinity}", affinity)
                    print(
                        f"affinity {'on ' if affinity else 'off'}: prefix-cache hit rate "
                        f"{rate:.1%}, {tps:.1f} output tokens/s",
                        flush=True,
                    )
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    main()
