"""`--concurrency auto` against fixed limits, on a real vLLM server.

Runs graphs/expert.yaml over `--rows` examples (examples/expert.jsonl repeated, each copy
with its own id and a distinct tail, so no reply is shared) with the response cache off,
at each fixed in-flight limit and then at `auto`, against the embedded vLLM CPU server
(started here on its own port with VLLM_SERVER_DEV_MODE=1, so the prefix cache can be
emptied before every run) or a server given with --base-url. For each run it prints the
output tokens/s (vLLM's own generation counter over the run's wall time), the preemptions
vLLM counted, and for `auto` the limit's trajectory. The last lines compare auto with the
best fixed setting (target: within 5% of its tokens/s, no more preemptions).

    python bench/auto_concurrency.py [--rows 40] [--fixed 8 16 32 64 128] [--base-url URL]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from vllm_saturation import delta, reset_prefix_cache, scrape
from workload import execute_timed, variant_rows

from orchestrator import RunConfig

ROOT = Path(__file__).resolve().parent.parent
PORT = 8791  # not the embedded default, so another user's server is never measured
GENERATED = "vllm:generation_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
TIMEOUT = 900.0  # seconds per request: at 128 in flight on 2 CPU cores replies queue long


def make_rows(path: Path, count: int) -> Path:
    """ExPerT rows, `count` of them (examples/expert.jsonl varied)."""
    return variant_rows("expert.jsonl", path, count)


def one_run(base_url: str, data: Path, out: Path, concurrency: int | str) -> dict[str, Any]:
    reset_prefix_cache(base_url)
    before = scrape(base_url)
    outcome, seconds = execute_timed(
        RunConfig(
            graph=ROOT / "graphs/expert.yaml",
            data=data,
            out=out,
            base_url=base_url,
            concurrency=concurrency,  # type: ignore[arg-type]
            use_cache=False,
            structured="server",
            timeout=TIMEOUT,
            overwrite=True,
        )
    )
    after = scrape(base_url)
    counts = outcome.manifest["counts"]
    return {
        "concurrency": concurrency,
        "seconds": seconds,
        "tokens_per_s": delta(after, before, GENERATED) / seconds,
        "preemptions": delta(after, before, PREEMPTIONS),
        "ok": counts["examples_ok"],
        "failed": counts["examples_failed"],
        "requests": counts["requests"],
        "limits": outcome.manifest["replicas"][0]["limits"],
        "mode": outcome.manifest["replicas"][0]["limit_mode"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--fixed", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--base-url")
    args = parser.parse_args()
    server = None
    base_url = args.base_url
    if base_url is None:
        from orchestrator.local import server as embedded

        os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")  # POST /reset_prefix_cache
        server = embedded.start_server(port=PORT, log=print)
        base_url = server.base_url
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = make_rows(Path(tmp) / "rows.jsonl", args.rows)
            load = os.getloadavg()
            print(
                f"ExPerT over {args.rows} examples at {base_url}; prefix cache emptied before "
                f"each run: {reset_prefix_cache(base_url)}; load {load[0]:.2f}",
                flush=True,
            )
            runs = []
            for setting in [*args.fixed, "auto"]:
                result = one_run(base_url, data, Path(tmp) / f"run-{setting}", setting)
                runs.append(result)
                print(
                    f"concurrency {setting!s:>4}: {result['tokens_per_s']:6.1f} output "
                    f"tokens/s, {result['preemptions']:.0f} preemptions, wall "
                    f"{result['seconds']:.0f} s, {result['ok']} ok / {result['failed']} "
                    f"failed, {result['requests']} requests",
                    flush=True,
                )
    finally:
        if server is not None:
            server.stop()
    auto = runs[-1]
    best = max(runs[:-1], key=lambda r: r["tokens_per_s"])
    trajectory = ", ".join(f"{c['t']:g}s→{c['limit']} ({c['reason']})" for c in auto["limits"])
    print(f"auto ({auto['mode']}) limit trajectory: {trajectory}")
    print(
        f"auto / best fixed ({best['concurrency']}): "
        f"{auto['tokens_per_s'] / best['tokens_per_s']:.3f} of its output tokens/s "
        f"(target >= 0.95); preemptions {auto['preemptions']:.0f} vs {best['preemptions']:.0f}"
    )


if __name__ == "__main__":
    main()
