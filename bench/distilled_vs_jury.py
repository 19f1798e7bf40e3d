"""Time the PerQ jury (three LLM calls per text) against the distilled scorer on the same texts.

By default the jury talks to a fake OpenAI-compatible server that waits a fixed time per
request (``--latency``) and scores posts with a crude feature count, so the jury's labels
vary and a scorer can be distilled from them. ``--base-url`` points the jury at a real
server instead. Prints both timings and their ratio.

    python bench/distilled_vs_jury.py --texts 120 --latency 0.3
    python bench/distilled_vs_jury.py --base-url http://127.0.0.1:8765/v1 --texts 36
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import orchestrator  # noqa: E402
from orchestrator.analysis import distill as d  # noqa: E402

EXAMPLES = ROOT / "examples" / "perq_jury.jsonl"
JURY = ROOT / "graphs" / "perq_jury.yaml"
DISTILLED = ROOT / "graphs" / "perq_distilled.yaml"


def feature_score(post: str, seed: int) -> int:
    """A stand-in judge: platform features present (hashtags, emoji, mentions, layout)."""
    features = [
        "#" in post,
        "@" in post,
        bool(re.search(r"[\U0001F300-\U0001FAFF\u2600-\u27BF]", post)),
        "\n" in post,
        len(post) < 280,
    ]
    score = min(3, max(0, sum(features) - 1))
    noise = zlib.crc32(f"{seed}:{post}".encode()) % 6
    if noise == 0:
        score = max(0, score - 1)  # judges disagree now and then
    return score


def fake_responder(latency: float):
    from fakeserver import Reply, schema_responder

    def respond(body: dict) -> Reply:
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
        if "score" not in schema.get("properties", {}):
            return schema_responder(body)
        post = body["messages"][-1]["content"].split("## Post\n", 1)[-1]
        answer = {"reason": "feature count", "score": feature_score(post, body.get("seed") or 0)}
        return Reply(content=json.dumps(answer), delay=latency)

    return respond


def make_texts(path: Path, count: int) -> Path:
    """`count` distinct posts: the examples, each copy numbered (groups stay per copy)."""
    base = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    with path.open("w") as handle:
        for i in range(count):
            row = dict(base[i % len(base)])
            copy = i // len(base)
            if copy:
                row["id"] = f"{row['id']}-{copy}"
                row["group"] = f"{row['group']}-{copy}"
                row["text"] = f"{row['text']} ({copy})"
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def run_graph(
    graph: Path, data: Path, out: Path, base_url: str, concurrency: int, **params: object
) -> float:
    started = time.perf_counter()
    asyncio.run(
        orchestrator.execute(
            orchestrator.RunConfig(
                graph=graph,
                data=data,
                out=out,
                base_url=base_url,
                use_cache=False,
                progress=False,
                params=dict(params),
                concurrency=concurrency,
            )
        )
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=90)
    parser.add_argument("--latency", type=float, default=0.3, help="fake seconds per request")
    parser.add_argument("--base-url", default=None, help="a real server for the jury")
    parser.add_argument("--model-dir", type=Path, default=None, help="an existing scorer")
    parser.add_argument("--concurrency", type=int, default=8, help="jury requests in flight")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="perq-bench-"))
    data = make_texts(work / "texts.jsonl", args.texts)
    server = None
    if args.base_url:
        base_url, where = args.base_url, args.base_url
    else:
        from fakeserver import FakeServer

        server = FakeServer(fake_responder(args.latency)).start()
        base_url, where = server.base_url, f"fake server, {args.latency}s per request"
    try:
        jury_seconds = run_graph(JURY, data, work / "jury", base_url, args.concurrency)
    finally:
        if server is not None:
            server.stop()
    summary = json.loads((work / "jury" / "summary.json").read_text())
    print(f"texts: {args.texts}; jury: 3 judges via {where}, {args.concurrency} in flight")
    print(f"jury labels: {summary['agreement']['label_distribution']}")

    model_dir = args.model_dir
    if model_dir is None:
        model_dir = work / "scorer"
        started = time.perf_counter()
        card = d.distill(work / "jury", model_dir)
        print(f"distilled in {time.perf_counter() - started:.1f} s; {d.format_card(card)}")

    rows = [json.loads(line) for line in data.read_text().splitlines()]
    texts = [r["text"] for r in rows]
    contexts = [r["platform"] for r in rows]
    started = time.perf_counter()
    scorer = d.load_scorer(model_dir)
    scorer.predict(texts[:1], contexts[:1])
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    scorer.predict(texts, contexts)
    batch_seconds = time.perf_counter() - started
    graph_seconds = run_graph(
        DISTILLED, data, work / "distilled", base_url, 1, model_dir=str(model_dir)
    )

    print(f"jury graph:            {jury_seconds:8.2f} s ({args.texts * 3} LLM calls)")
    print(f"distilled graph:       {graph_seconds:8.2f} s (model already loaded)")
    print(f"distilled batch call:  {batch_seconds:8.2f} s (+{load_seconds:.2f} s first load)")
    print(f"ratio jury / distilled graph: {jury_seconds / graph_seconds:8.1f}x")
    print(f"ratio jury / distilled batch: {jury_seconds / batch_seconds:8.1f}x")
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
