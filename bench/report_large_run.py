"""How fast the HTML report of a 10,000-example run builds and opens.

Writes a synthetic run of graphs/pointwise.yaml through the real writers (RunFolder,
TraceStore; prompts rendered by the graph's own templates), with a few percent failed
examples that used up their retries, then:
  1. builds report.html and times it;
  2. opens it from disk in headless Chromium and times load → interactive (the examples
     table rendered), opening an example (its trace parsed on first use), and a search;
  3. does the same against `report --serve`.

    python bench/report_large_run.py [--examples 10000] [--keep DIR]

Needs Debian's chromium and the playwright package (pip install playwright); without them
it stops after step 1.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

from orchestrator import compile_graph
from orchestrator.data.dataset import file_hash
from orchestrator.report import build_report, make_server
from orchestrator.report.browser import CHROMIUM
from orchestrator.report.browser import CHROMIUM_ARGS as ARGS
from orchestrator.store.folder import LAYOUT_VERSION, RunFolder
from orchestrator.store.records import Counts, Manifest, ResultLine, Summary
from orchestrator.store.runkey import RunKey, static_components
from orchestrator.store.trace import Attempt, NodeRecord, TraceStore

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "graphs" / "pointwise.yaml"
VOCAB_TEXT = (
    "coffee grinder steam wand latte shots consistent review machine weekend trail hike "
    "battery screen camera lens story chapter dragon village winter letter colleague meeting "
    "deadline budget recipe garlic oven crispy honest quickly however although maybe really "
    "great poor fine loud quiet bright heavy light cheap pricey sturdy flimsy"
)
VOCAB = VOCAB_TEXT.split(" ")
REASONS = [
    "Both texts make the same points about price and build quality.",
    "The generated text adds claims the user never made.",
    "Tone is far more formal than the user's short, chatty sentences.",
    "Punctuation habits and sentence length match closely.",
    "It covers the topic but misses the user's main complaint.",
]


def words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(rng.randint(low, high))).capitalize() + "."


def write_run(folder: Path, count: int, fail_share: float = 0.03) -> None:
    """A complete run folder of `count` examples, as `orchestrator run` would leave it."""
    rng = random.Random(7)
    graph = compile_graph(GRAPH)
    judge = graph.nodes["judge"]
    folder.parent.mkdir(parents=True, exist_ok=True)
    data = folder.parent / "data.jsonl"
    rows = [
        {
            "id": f"ex-{i:05d}",
            "input": f"Write a review of product {i}.",
            "reference": words(rng, 40, 160),
            "output": words(rng, 40, 160),
        }
        for i in range(count)
    ]
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    run = RunFolder(folder)
    key = RunKey.from_components(static_components(graph, {}, file_hash(data)))
    run.open(overwrite=True)
    run.begin()
    run.write_snapshot(graph.snapshot())
    store = TraceStore(run.traces_path, "bench-run", graph.content_hash, key.digest)
    store.start_run(graph=str(GRAPH), model="bench-model", base_url="http://127.0.0.1:1/v1")
    params = graph.spec.params
    totals = {"requests": 0, "retries": 0, "cache_hits": 0, "prompt_tokens": 0}
    failed = 0
    for row in rows:
        ctx = {**row, "params": params, "run": {}}
        messages = judge.messages(ctx)
        tokens = sum(len(m["content"].split()) for m in messages)
        if rng.random() < fail_share:
            failed += 1
            attempts = [
                Attempt(
                    number=n,
                    kind="invalid",
                    error="reply is not JSON: Expecting value",
                    raw="Sure! 7/10",
                )
                for n in (1, 2, 3)
            ]
            error = "invalid reply after 3 attempts: reply is not JSON"
            store.record(
                NodeRecord(
                    example_id=row["id"],
                    node="judge",
                    status="failed",
                    error=error,
                    messages=messages,
                    attempts=attempts,
                    latency=rng.uniform(0.5, 3),
                )
            )
            run.write_result(
                ResultLine.model_construct(
                    id=row["id"], status="failed", error=f"node 'judge': {error}"
                )
            )
            totals["requests"] += 3
            totals["retries"] += 2
            continue
        value = {
            "content_reason": rng.choice(REASONS),
            "content": rng.randint(1, 10),
            "style_reason": rng.choice(REASONS),
            "style": rng.randint(1, 10),
        }
        raw = orjson.dumps(value).decode()
        cached = rng.random() < 0.2
        store.record(
            NodeRecord(
                example_id=row["id"],
                node="judge",
                value=value,
                messages=messages,
                raw=[raw],
                cached=cached,
                prompt_tokens=tokens,
                completion_tokens=40,
                latency=rng.uniform(0.2, 2.0),
                model="bench-model",
                endpoint="http://127.0.0.1:1/v1",
                attempts=[
                    Attempt(
                        number=1, kind="cache" if cached else "ok", raw=raw, finish_reason="stop"
                    )
                ],
            )
        )
        score = ((value["content"] - 1) / 9 + (value["style"] - 1) / 9) / 2
        store.record(NodeRecord(example_id=row["id"], node="score", value=score))
        run.write_result(ResultLine.ok(row["id"], {"score": score, **value}))
        totals["requests"] += 0 if cached else 1
        totals["cache_hits"] += int(cached)
        totals["prompt_tokens"] += tokens
    store.close()
    counts = Counts(
        **totals,
        examples=count,
        examples_ok=count - failed,
        examples_failed=failed,
        completion_tokens=40 * (count - failed),
    )
    run.write_manifest(
        Manifest(
            layout_version=LAYOUT_VERSION,
            run_id="bench-run",
            run_key=key,
            graph={"path": str(GRAPH), "name": graph.name, "hash": graph.content_hash},
            dataset={"path": str(data), "hash": key.components["data"]},
            model="bench-model",
            status="complete",
            started=time.time() - 600,
            wall_seconds=600.0,
            counts=counts,
        )
    )
    run.write_summary(Summary(graph=graph.name, counts=counts))
    run.close()
    run.release()


def open_in_browser(url: str, search: str) -> dict[str, float]:
    """Seconds to interactive, to open the first example, and to filter by a search."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        started = time.perf_counter()
        page.goto(url, wait_until="commit", timeout=120_000)
        page.wait_for_function("window.__reportReady === true", timeout=120_000, polling=20)
        ready = time.perf_counter() - started
        rows = page.locator("#examples-table tbody tr").count()
        started = time.perf_counter()
        page.click("#examples-table tbody tr:nth-child(2)")
        page.wait_for_selector("#example-view .node-card", timeout=120_000)
        example = time.perf_counter() - started
        page.click("#example-view a[href='#']")
        page.wait_for_selector("#list-view:not([hidden])")
        started = time.perf_counter()
        page.fill("#q", search)
        page.wait_for_function(
            "document.querySelectorAll('#examples-table tbody tr').length === 1", polling=10
        )
        found = time.perf_counter() - started - 0.12  # minus the search box's debounce
        browser.close()
    if errors:
        raise SystemExit(f"the page logged errors: {errors[:3]}")
    return {"interactive": ready, "example": example, "search": found, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="write the run here and keep it")
    args = parser.parse_args(argv)
    base = args.keep or Path(tempfile.mkdtemp(prefix="report-bench-"))
    folder = base / "run"
    try:
        started = time.perf_counter()
        write_run(folder, args.examples)
        print(f"synthetic run: {args.examples} examples in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        path = build_report(folder)
        built = time.perf_counter() - started
        size = path.stat().st_size / 1e6
        print(
            f"build_report:  {built:.2f} s, report.html {size:.1f} MB "
            f"({size * 1e3 / args.examples:.2f} kB per example)"
        )
        try:
            import playwright  # noqa: F401
        except ImportError:
            print("playwright is not installed: skipping the browser figures")
            return
        if not Path(CHROMIUM).exists():
            print(f"{CHROMIUM} not found: skipping the browser figures")
            return
        target = "ex-00042"
        file = open_in_browser(path.as_uri(), target)
        print(
            f"file in chromium: interactive {file['interactive']:.2f} s · open an example "
            f"{file['example']:.2f} s (parses every trace once) · search {file['search']:.2f} s"
        )
        server = make_server(folder, port=0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started = time.perf_counter()
        served = open_in_browser(server.url, target)
        server.shutdown()
        server.server_close()
        print(
            f"--serve:         interactive {served['interactive']:.2f} s · open an example "
            f"{served['example']:.2f} s · search {served['search']:.2f} s"
        )
        print(f"ratio open-example file/serve: {file['example'] / served['example']:.1f}")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
