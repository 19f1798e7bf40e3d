"""ExPerT on a real vLLM server: our graph vs the reference package, wall time and requests.

bench/expert_vs_reference.py compares the two on a fake server that answers every step
correctly; this runs both against a real OpenAI-compatible vLLM server (by default the
embedded CPU server with SmolLM2-135M), on the same examples, one after the other:

1. graphs/expert.yaml over examples/expert.jsonl (or its first --limit rows) with a fresh
   response cache, so every call reaches the server;
2. the reference `expert-score==0.0.1` in its throwaway venv (made by
   `python bench/expert_vs_reference.py --setup`), with a small retry budget and bounded by
   --reference-timeout seconds in total, since a weak model's free-text JSON often does not
   parse and the reference would otherwise retry for hours.

Both sides' requests are counted the same way, by the server: the sum over all finished
reasons of vLLM's `vllm:request_success_total` counter, read from /metrics before and after
each side (ours includes its one structured-output canary request). The last line is the
wall-time ratio reference/ours; when the reference did not finish, that ratio is only a
lower bound, and the line says so.

    python bench/expert_vs_reference.py --setup        # once
    python bench/expert_real_server.py [--limit 10] [--reference-timeout 900]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from expert_vs_reference import DEFAULT_VENV, reference_process
from vllm_saturation import (
    DEFAULT_BASE_URL,
    GENERATED,
    REQUESTS,
    hit_rate,
    load,
    requests_by_reason,
    reset_prefix_cache,
    run_graph,
    scrape,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = "smollm2-135m-instruct"


def _rows(path: Path, limit: int | None) -> int:
    total = sum(1 for line in path.open() if line.strip())
    return min(total, limit) if limit is not None else total


def _reasons(after: dict[str, float], before: dict[str, float]) -> str:
    parts = [f"{k} {after[k] - before.get(k, 0):.0f}" for k in after if after[k] - before.get(k, 0)]
    return ", ".join(parts) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model id for the reference")
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "expert.jsonl")
    parser.add_argument("--limit", type=int, default=None, help="first N examples (default all)")
    parser.add_argument("--concurrency", type=int, default=64, help="for our run")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument(
        "--reference-timeout", type=float, default=900, help="seconds, whole reference run"
    )
    parser.add_argument(
        "--reference-retries", type=int, default=5, help="the reference's max_retries"
    )
    parser.add_argument(
        "--reference-max-len",
        type=int,
        default=600,
        help="the reference's max_evaluator_length (its default asks 8096 tokens per call)",
    )
    args = parser.parse_args()
    rows = _rows(args.data, args.limit)
    limit = args.limit if args.limit is not None else rows
    print(f"ExPerT on {rows} examples of {args.data.name} at {args.base_url}; load {load()}")

    # Neither side may reuse prefix blocks an earlier run left in vLLM's cache (needs
    # VLLM_SERVER_DEV_MODE=1 on the server; without it, our repeated prompts may gain).
    if not reset_prefix_cache(args.base_url):
        print("note: no POST /reset_prefix_cache on this server; its prefix cache is not emptied")

    # -- ours ---------------------------------------------------------------------------
    with tempfile.TemporaryDirectory(prefix="expert-real-") as tmp:
        reasons_before = requests_by_reason(args.base_url)
        ours = run_graph(
            ROOT / "graphs" / "expert.yaml",
            args.data,
            args.base_url,
            args.concurrency,
            args.limit,
            Path(tmp) / "run",
        )
        ours_reasons = _reasons(requests_by_reason(args.base_url), reasons_before)
    print(
        f"ours (graphs/expert.yaml, concurrency {args.concurrency}): wall {ours.wall:.1f} s,"
        f" requests {ours.metrics.get(REQUESTS, 0):.0f} by the server ({ours_reasons};"
        f" our counter {ours.manifest_requests}, canary included), examples finished"
        f" {ours.examples_ok} ok / {ours.examples_failed} failed, tokens generated"
        f" {ours.metrics.get(GENERATED, 0):.0f}, prefix-cache hit rate"
        f" {hit_rate(ours.metrics, {})[0]:.1%}; load {load()}"
    )

    # -- the reference -----------------------------------------------------------------
    reset_prefix_cache(args.base_url)
    before = scrape(args.base_url)
    reasons_before = requests_by_reason(args.base_url)
    out, ref_wall = reference_process(
        args.venv,
        args.data,
        args.base_url,
        args.model,
        args.reference_retries,
        args.reference_max_len,
        limit,
        timeout=args.reference_timeout,
    )
    time.sleep(2)  # a request cut off by the timeout is counted once vLLM aborts it
    after = scrape(args.base_url)
    ref_requests = after.get(REQUESTS, 0) - before.get(REQUESTS, 0)
    ref_reasons = _reasons(requests_by_reason(args.base_url), reasons_before)
    ref_tokens = after.get(GENERATED, 0) - before.get(GENERATED, 0)
    finished = "scores" in out
    timed_out = not finished and str(out.get("error", "")).startswith("did not finish within")
    if finished:
        done = len(out["scores"])
        unparsable = out.get("unparsable", 0)
        state = "finished"
    else:
        done = 0
        found = re.search(r"\((\d+) unparsable", str(out.get("error", "")))
        unparsable = int(found.group(1)) if found else out.get("unparsable", 0)
        state = "TIMED OUT" if timed_out else f"FAILED: {out.get('error')}"
    print(
        f"reference (expert-score 0.0.1, retries {args.reference_retries}, max_len"
        f" {args.reference_max_len}, bound {args.reference_timeout:.0f} s): {state};"
        f" wall {ref_wall:.1f} s, requests {ref_requests:.0f} by the server ({ref_reasons}),"
        f" examples finished {done} of {rows}, unparsable replies {unparsable},"
        f" tokens generated {ref_tokens:.0f}; load {load()}"
    )

    ratio = ref_wall / ours.wall
    if finished:
        verdict = "the reference finished"
    elif timed_out:
        verdict = (
            f"LOWER BOUND: the reference did not finish within its {args.reference_timeout:.0f} s"
            " bound"
        )
    else:
        verdict = (
            "the reference gave up with an error without finishing, so this compares our"
            " complete run with its time until failure"
        )
    print(f"RATIO wall time reference/ours: {ratio:.2f} ({verdict})")


if __name__ == "__main__":
    main()
