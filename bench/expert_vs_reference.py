"""ExPerT speed: the reference package (`expert-score==0.0.1`) vs graphs/expert.yaml.

Both tools score the same examples against one loopback fake server that waits a fixed
latency per request and answers every ExPerT step of either tool in the shape that tool
expects (the reference parses free-text JSON and names matches by title; we get
schema-shaped JSON and ids). The answers come from the same deterministic rules, so both
tools take the same decisions, make the same kinds of calls at the same cost, and must end
with the same scores. Prints wall time, requests and the speed ratio.

The reference runs in a throwaway venv (`--setup` makes one): `expert-score` installed with
--no-deps plus what it imports. Its top-level `import vllm` and `import transformers` are
satisfied by tiny stand-in modules on that subprocess's PYTHONPATH only (vLLM is not cheap to
install and is unused with its OpenAI backend; without a tokenizer the reference cuts texts
by words, as our graph does against this server's word-level /tokenize).

    python bench/expert_vs_reference.py --setup            # once: build the venv
    python bench/expert_vs_reference.py --latency 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fakeserver import FakeServer, Reply, schema_responder  # noqa: E402

DEFAULT_VENV = Path(tempfile.gettempdir()) / "expert-score-venv"
REFERENCE_DEPS = ["backoff", "json5", "parse", "openai", "tqdm", "google-generativeai"]

# Stand-ins for the two heavy modules the reference imports at top level. Only
# SamplingParams is used with the OpenAI backend (it reads .temperature and .max_tokens).
STUB_VLLM = """
class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class LLM:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("vllm stand-in: only the OpenAI backend works in this venv")
"""
STUB_TRANSFORMERS = """
class AutoTokenizer:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise OSError("transformers stand-in: no tokenizer (the reference then cuts by words)")
"""

# Runs inside the reference venv: score the examples, print timing and scores as JSON.
DRIVER = textwrap.dedent(
    """
    import contextlib, json, sys, time
    from expert_score.expert import expert
    data, model, retries, max_len, limit = sys.argv[1:6]
    rows = [json.loads(line) for line in open(data) if line.strip()][: int(limit)]
    started = time.perf_counter()
    try:
        # Its own prints ("Error: ..." per unparsable reply) go to stderr for the caller.
        with contextlib.redirect_stdout(sys.stderr):
            out = expert(
                [r["input"] for r in rows], [r["output"] for r in rows],
                [r["reference"] for r in rows], model_name=model, openai_llm=True,
                api_key="EMPTY", max_retries=int(retries), max_evaluator_length=int(max_len),
            )
    except Exception as exc:
        print(json.dumps({"seconds": time.perf_counter() - started, "error": str(exc)}))
        sys.exit(0)
    print(json.dumps({"seconds": time.perf_counter() - started,
                      "ids": [r.get("id") for r in rows],
                      "scores": out["per_query_scores"]}))
    """
)


def setup(venv: Path) -> None:
    """Make the throwaway venv with expert-score (no deps) and what it imports."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", "expert-score==0.0.1"], check=True)
    subprocess.run([*pip, *REFERENCE_DEPS], check=True)
    stubs = venv / "stubs"
    (stubs / "vllm").mkdir(parents=True, exist_ok=True)
    (stubs / "transformers").mkdir(parents=True, exist_ok=True)
    (stubs / "vllm" / "__init__.py").write_text(STUB_VLLM)
    (stubs / "transformers" / "__init__.py").write_text(STUB_TRANSFORMERS)
    print(f"reference venv ready: {venv}")


# --------------------------------------------------------------------------------------------
# One set of decisions, answered in each tool's format
# --------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    {"the", "a", "an", "and", "or", "of", "to", "is", "it", "i", "in", "for", "on", "my", "so"}
    | {"but", "about", "with", "at", "this", "that", "was", "be", "if", "you"}
)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _overlap(a: str, b: str) -> float:
    wa, wb = _words(a), _words(b)
    return len(wa & wb) / max(1, len(wa | wb))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()][:12]


def _aspects(text: str) -> list[dict[str, Any]]:
    """One aspect per sentence; titles are numbered so the reference's by-title lookup cannot
    collapse two aspects, and carry no colon so "title: description" splits cleanly."""
    return [
        {
            "title": f"p{i} " + " ".join(s.split()[:3]).replace(":", ""),
            "description": s,
            "evidence": [s],
        }
        for i, s in enumerate(_sentences(text), start=1)
    ]


def _best(description: str, candidates: list[tuple[str, str]]) -> str | None:
    """The key of the candidate whose description overlaps most (≥ 0.3), else None."""
    best, key = 0.0, None
    for cand_key, cand_description in candidates:
        score = _overlap(description, cand_description)
        if score > best:
            best, key = score, cand_key
    return key if best >= 0.3 else None


def _content(a: list[str], b: list[str]) -> bool:
    return _overlap(" ".join(a), " ".join(b)) >= 0.5


def _style(a: list[str], b: list[str]) -> bool:
    return abs(len(" ".join(a).split()) - len(" ".join(b).split())) <= 3


def _section(text: str, title: str) -> str:
    match = re.search(r"## " + re.escape(title) + r"[^\n]*\n(.*?)(?=\n## |\Z)", text, re.S)
    return match.group(1).strip() if match else ""


def _bullets(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


def _ours(system: str, user: str, body: dict[str, Any]) -> Reply | None:
    """Our graph's steps (recognised by their system prompts)."""
    if "atomic aspects" in system:
        found = [
            {k: a[k] for k in ("title", "description", "evidence")}
            for a in _aspects(_section(user, "The text"))
        ]
        return Reply(content=json.dumps({"aspects": found}))
    if "also appears among" in system:
        aspect = _section(user, "The aspect to find").partition(": ")[2]
        candidates = []
        for line in _section(user, "Candidate aspects").splitlines():
            cid, _, rest = line[1:].partition("] ")
            candidates.append((cid, rest.partition(": ")[2]))
        choice = _best(aspect, candidates) or "none"
        return Reply(content=json.dumps({"reason": "overlap", "matched_id": choice}))
    if "agree in content" in system:
        a = _bullets(_section(user, "Evidence from text A"))
        b = _bullets(_section(user, "Evidence from text B"))
        return Reply(content=json.dumps({"reason": "words", "verdict": _content(a, b)}))
    if "writing style" in system:
        a = _bullets(_section(user, "Sentences from text A"))
        b = _bullets(_section(user, "Sentences from text B"))
        return Reply(content=json.dumps({"reason": "length", "verdict": _style(a, b)}))
    return None


def _between(text: str, start: str, end: str) -> str:
    head = text.split(start, 1)[1] if start in text else ""
    return head.split(end, 1)[0].strip() if end in head else head.strip()


def _reference(prompt: str) -> Reply | None:
    """The reference package's steps (recognised by words of its own prompts)."""
    if "atomic aspects" in prompt and "generated output:" in prompt:
        # The text is on the line after the last "generated output:" label (one line: the
        # reference re-joins the kept words with single spaces).
        text = prompt.rsplit("generated output:", 1)[1].split("\n", 1)[0].strip()
        found = [
            {"aspect": a["title"], "description": a["description"], "evidence": a["evidence"]}
            for a in _aspects(text)
        ]
        return Reply(content="```json\n" + json.dumps(found) + "\n```")
    if "# test aspect" in prompt:
        aspect = _between(prompt.split("# test aspect", 1)[1], "aspect detail:", "\n")
        listing = prompt.split("# list of aspects", 1)[1]
        titles = re.findall(r"aspect title: (.*)\n\s*aspect detail: (.*)", listing)
        key = _best(aspect, [(t.strip(), d.strip()) for t, d in titles])
        answer = {"reason": "overlap", "is_matched": key is not None, "matched_aspect": key or ""}
        return Reply(content=json.dumps(answer))
    if "# list 1" in prompt and "# list 2" in prompt:
        one = _between(prompt, "# list 1", "# list 2").splitlines()
        two = _between(prompt, "# list 2", "# output").splitlines()
        one, two = [s.strip() for s in one if s.strip()], [s.strip() for s in two if s.strip()]
        verdict = _style(one, two) if "writing style" in prompt else _content(one, two)
        return Reply(content=json.dumps({"reason": "rule", "is_matched": verdict}))
    return None


class BenchResponder:
    """Fixed latency per request, then the step's answer in the asking tool's format."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.unknown = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        time.sleep(self.latency)
        messages = body.get("messages") or []
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        user = next((m["content"] for m in messages if m["role"] == "user"), "")
        reply = _ours(system, user, body) if system else _reference(user)
        if reply is None:
            if not system and "sea" not in user:  # our structured-output canary is known
                with self._lock:
                    self.unknown += 1
            return schema_responder(body)
        return reply


# --------------------------------------------------------------------------------------------
# The two runs
# --------------------------------------------------------------------------------------------


def reference_process(
    venv: Path,
    data: Path,
    base_url: str,
    model: str,
    retries: int,
    max_len: int,
    limit: int,
    timeout: float = 3600,
) -> tuple[dict[str, Any], float]:
    """Run the reference package in its venv against `base_url`; its JSON and the wall time.

    Its OpenAI backend retries any exception forever, so the process is bounded here.
    """
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no reference venv at {venv}: run with --setup first")
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "EMPTY",
        "PYTHONPATH": str(venv / "stubs"),
        "PYTHONWARNINGS": "ignore",
    }
    args = [str(data), model, str(retries), str(max_len), str(limit)]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [str(python), "-c", DRIVER, *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        log = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        log = log or (exc.stderr or "")
        failures = log.count("Error: ")
        message = f"did not finish within {timeout:.0f} s ({failures} unparsable replies so far)"
        return {"error": message}, timeout
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"reference run failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["unparsable"] = done.stderr.count("Error: ")
    return out, wall


def run_reference(venv: Path, data: Path, server: FakeServer) -> dict[str, Any]:
    before = len(server.requests)
    out, wall = reference_process(venv, data, server.base_url, server.model, 5, 8096, 10**6)
    if "error" in out:
        raise SystemExit(f"reference run failed: {out['error']}")
    return {
        "wall": wall,
        "inner": out["seconds"],
        "requests": len(server.requests) - before,
        "scores": dict(zip(out["ids"], out["scores"], strict=True)),
    }


def run_ours(data: Path, server: FakeServer, reuse: bool, concurrency: int) -> dict[str, Any]:
    from orchestrator import RunConfig, execute

    with tempfile.TemporaryDirectory() as tmp:
        before = len(server.requests)
        started = time.perf_counter()
        outcome = asyncio.run(
            execute(
                RunConfig(
                    graph=ROOT / "graphs" / "expert.yaml",
                    data=data,
                    out=Path(tmp) / "run",
                    base_url=server.base_url,
                    use_cache=False,
                    concurrency=concurrency,
                    params={"reuse_pair_judgments": reuse},
                    progress=False,
                )
            )
        )
        wall = time.perf_counter() - started
        lines = [json.loads(x) for x in (Path(tmp) / "run" / "results.jsonl").open()]
    failed = [x["id"] for x in lines if x["status"] != "ok"]
    if failed:
        raise SystemExit(f"our run failed on {failed}")
    return {
        "wall": wall,
        "requests": len(server.requests) - before - 1,  # less the structured-output canary
        "scores": {x["id"]: x["scores"] for x in lines},
        "summary": outcome.summary,
    }


def compare_scores(ref: dict[str, dict[str, float]], ours: dict[str, dict[str, float]]) -> float:
    """Largest absolute difference over every example and every one of the 15 scores."""
    worst = 0.0
    for example, scores in ref.items():
        for key, value in scores.items():
            worst = max(worst, abs(value - ours[example][key]))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "expert.jsonl")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--setup", action="store_true", help="build the reference venv and exit")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--real",
        metavar="URL",
        help="instead: run only the reference on one example against this real server",
    )
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model for --real")
    parser.add_argument("--real-timeout", type=float, default=900, help="seconds, for --real")
    parser.add_argument("--real-retries", type=int, default=5, help="retry rounds, for --real")
    args = parser.parse_args()
    if args.setup:
        setup(args.venv)
        return
    if args.real:
        # Small budgets so a weak model fails in minutes, not hours (its default asks
        # for 8096 tokens per call and 100 retry rounds). Note: the reference raises once
        # its round counter passes max_retries even if that last round succeeded.
        out, wall = reference_process(
            args.venv,
            args.data,
            args.real,
            args.model,
            args.real_retries,
            600,
            1,
            timeout=args.real_timeout,
        )
        outcome = out.get("error") or f"finished, scores {out['scores']}"
        if "unparsable" in out:
            outcome += f" ({out['unparsable']} unparsable replies)"
        print(f"expert-score on 1 example at {args.real} ({wall:.0f} s): {outcome}")
        return
    responder = BenchResponder(args.latency)
    with FakeServer(responder) as server:
        ref = run_reference(args.venv, args.data, server)
        same = run_ours(args.data, server, reuse=False, concurrency=args.concurrency)
        reuse = run_ours(args.data, server, reuse=True, concurrency=args.concurrency)
    rows = sum(1 for line in args.data.open() if line.strip())
    print(f"ExPerT on {rows} examples, fake server latency {args.latency * 1000:.0f} ms/request")
    print(f"{'run':<44}{'wall s':>9}{'requests':>10}{'speed-up':>10}")
    print(
        f"{'expert-score 0.0.1 (sequential OpenAI calls)':<44}{ref['wall']:>9.2f}"
        f"{ref['requests']:>10}{1:>10.1f}"
    )
    for label, run in (
        ("graph, each side judges its own pairs", same),
        ("graph, shared pairs judged once (default)", reuse),
    ):
        print(
            f"{label:<44}{run['wall']:>9.2f}{run['requests']:>10}{ref['wall'] / run['wall']:>10.1f}"
        )
    print(f"reference time inside its process (no interpreter start-up): {ref['inner']:.2f} s")
    print(
        f"largest score difference vs reference: own pairs "
        f"{compare_scores(ref['scores'], same['scores']):.2e}, shared "
        f"{compare_scores(ref['scores'], reuse['scores']):.2e}"
    )
    if responder.unknown:
        print(f"warning: {responder.unknown} requests were not recognised as an ExPerT step")


if __name__ == "__main__":
    main()
