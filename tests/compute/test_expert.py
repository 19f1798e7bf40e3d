"""ExPerT: score formulas, constrained matching, failed aspects, truncation, G-Eval logprobs,
and the graphs end to end against the fake server."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import (
    Ran,
    is_canary,
    orchestrator_command,
    results,
    run_graph,
    trace_records,
    write_rows,
)
from pydantic import ValidationError

from orchestrator.compute.expert import (
    NO_LOGPROBS,
    SCORE_KEYS,
    build_explanation,
    expert_pairs,
    expert_scores,
    logprob_weighted_score,
    scores_from_explanation,
    truncate_to_tokens,
    truncate_with_server,
)
from orchestrator.graph.schemas import build_model
from orchestrator.kinds.graphs import compile_graph

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "graphs" / "expert.yaml"
EXAMPLES = ROOT / "examples" / "expert.jsonl"


def run(graph: Path, data: Path, out: Path, base_url: str, **kwargs: Any) -> Ran:
    """A run without the response cache, so every request the graph makes reaches the server."""
    return run_graph(graph, data, out, base_url, use_cache=False, **kwargs)


# --------------------------------------------------------------------------------------------
# Score formulas on hand-made explanations
# --------------------------------------------------------------------------------------------


def entry(matched: bool, content: bool | None = None, style: bool | None = None) -> dict:
    return {"matched": matched, "content": content, "style": style, "failed": False}


def f1(p: float, r: float) -> float:
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def test_all_five_aggregations_by_hand() -> None:
    # Recall side: 4 reference aspects; precision side: 2 output aspects.
    explanation = {
        "recall": [
            entry(True, True, True),
            entry(True, True, False),
            entry(True, False, True),
            entry(False),
        ],
        "precision": [entry(True, True, False), entry(False)],
    }
    scores = scores_from_explanation(explanation)
    assert set(scores) == set(SCORE_KEYS) and len(SCORE_KEYS) == 15
    expected = {
        # (recall, precision) worked out by hand from the entries above
        "content_only": (2 / 4, 1 / 2),
        "style_only": (2 / 4, 0 / 2),
        "content_and_style": (1 / 4, 0 / 2),
        "content_or_style": (3 / 4, 1 / 2),
        "content_style_average": ((1 + 0.5 + 0.5) / 4, 0.5 / 2),
    }
    for agg, (r, p) in expected.items():
        assert scores[f"{agg}_recall"] == pytest.approx(r)
        assert scores[f"{agg}_precision"] == pytest.approx(p)
        assert scores[f"{agg}_f1"] == pytest.approx(f1(p, r))
    assert scores["style_only_f1"] == 0.0  # P = 0 → F = 0 even though R > 0
    assert scores["content_style_average_f1"] == pytest.approx(2 * 0.25 * 0.5 / 0.75)


def test_empty_sides_and_no_matches_score_zero() -> None:
    for explanation in (
        {"recall": [], "precision": []},
        {"recall": [entry(True, True, True)], "precision": []},
        {"recall": [], "precision": [entry(True, True, True)]},
        {"recall": [entry(False), entry(False)], "precision": [entry(False)]},
    ):
        scores = scores_from_explanation(explanation)
        assert all(scores[k] == 0.0 for k in SCORE_KEYS if k.endswith("_f1")), explanation
    one_sided = scores_from_explanation({"recall": [entry(True, True, True)], "precision": []})
    assert one_sided["content_only_recall"] == 1.0
    assert one_sided["content_only_precision"] == 0.0


def test_perfect_match_scores_one() -> None:
    scores = scores_from_explanation(
        {"recall": [entry(True, True, True)] * 3, "precision": [entry(True, True, True)] * 2}
    )
    assert all(v == 1.0 for v in scores.values())


def aspects(prefix: str, titles: list[str]) -> list[dict]:
    return [
        {"id": f"{prefix}{i}", "title": t, "description": f"about {t}", "evidence": [f"{t}."]}
        for i, t in enumerate(titles, start=1)
    ]


def test_failed_matching_call_is_unmatched_and_visible() -> None:
    ref = aspects("R", ["price", "price"])  # equal titles stay apart by id
    out = aspects("O", ["price"])
    explanation = build_explanation(
        ref,
        out,
        recall_match=[{"reason": "same", "matched_id": "O1"}, {"failed": True, "error": "boom"}],
        precision_match=[{"reason": "same", "matched_id": "R1"}],
        recall_content=[{"reason": "ok", "verdict": True}, None],
        recall_style=[{"reason": "ok", "verdict": True}, None],
        precision_content=[None],
        precision_style=[None],
    )
    first, second = explanation["recall"]
    assert first["matched"] and first["matched_aspect"] == "price" and not first["failed"]
    assert second["matched"] is False and second["failed"] is True
    assert "boom" in second["error"] and "failed" in second["match_reason"]
    assert second["content"] is None and second["style"] is None
    # The precision side reuses the recall side's judgment of the same (R1, O1) pair.
    (only,) = explanation["precision"]
    assert only["matched_id"] == "R1" and only["judged_on"] == "recall"
    assert only["content"] is True and only["content_reason"] == "ok"
    scores = scores_from_explanation(explanation)
    assert scores["content_only_recall"] == 0.5  # the failed aspect counts as unmatched
    assert scores["content_only_precision"] == 1.0


def one_failed_style(failed_judgment: str) -> dict:
    """One matched pair whose content call says yes and whose style call failed."""
    return build_explanation(
        aspects("R", ["battery"]),
        aspects("O", ["battery life"]),
        recall_match=[{"reason": "same", "matched_id": "O1"}],
        precision_match=[{"reason": "same", "matched_id": "R1"}],
        recall_content=[{"reason": "agree", "verdict": True}],
        recall_style=[{"failed": True, "error": "no valid reply after 3 attempts"}],
        precision_content=[None],
        precision_style=[None],
        failed_judgment=failed_judgment,  # type: ignore[arg-type]
    )


def test_failed_judgment_by_default_makes_both_verdicts_no() -> None:
    """The default follows expert-score: a failed style call takes the content credit too.
    (Before issue 16 the default kept content's "yes" and gave content_only_recall 1.0.)"""
    default = build_explanation(
        aspects("R", ["battery"]),
        aspects("O", ["battery life"]),
        recall_match=[{"reason": "same", "matched_id": "O1"}],
        precision_match=[{"reason": "same", "matched_id": "R1"}],
        recall_content=[{"reason": "agree", "verdict": True}],
        recall_style=[{"failed": True, "error": "no valid reply after 3 attempts"}],
        precision_content=[None],
        precision_style=[None],
    )
    assert default == one_failed_style("reference")
    for rec in (default["recall"][0], default["precision"][0]):  # precision reuses R1|O1
        assert rec["matched"] and rec["content"] is False and rec["style"] is False
        assert rec["failed"] and rec["failed_calls"] == ["style"]
        assert "style judgment failed" in rec["error"]
        assert rec["overridden"] == {"content": True}
        assert "because the style judgment failed" in rec["content_reason"]
        assert "the judge said yes: agree" in rec["content_reason"]
        assert rec["style_reason"].startswith("counted as no: no valid reply")
    scores = scores_from_explanation(default)
    assert all(v == 0.0 for v in scores.values()), scores


def test_failed_judgment_keep_other_keeps_the_verdict_that_succeeded() -> None:
    explanation = one_failed_style("keep_other")
    (rec,) = explanation["recall"]
    assert rec["matched"] and rec["content"] is True and rec["style"] is False
    assert rec["content_reason"] == "agree" and "overridden" not in rec
    assert rec["failed"] and rec["failed_calls"] == ["style"]
    assert "style judgment failed" in rec["error"]
    scores = scores_from_explanation(explanation)
    assert scores["content_only_recall"] == 1.0
    assert scores["content_only_precision"] == 1.0
    assert scores["style_only_recall"] == 0.0
    assert scores["content_style_average_recall"] == 0.5
    assert scores["content_or_style_f1"] == 1.0


def test_a_no_verdict_is_not_marked_overridden() -> None:
    explanation = build_explanation(
        aspects("R", ["battery"]),
        aspects("O", ["battery life"]),
        recall_match=[{"reason": "same", "matched_id": "O1"}],
        precision_match=[{"reason": "other", "matched_id": "none"}],
        recall_content=[{"failed": True, "error": "cut off"}],
        recall_style=[{"reason": "terse both", "verdict": False}],
        precision_content=[None],
        precision_style=[None],
    )
    (rec,) = explanation["recall"]
    assert rec["content"] is False and rec["style"] is False and "overridden" not in rec
    assert rec["failed_calls"] == ["content"]
    assert "the judge said no: terse both" in rec["style_reason"]


@pytest.mark.parametrize("convention", ["reference", "keep_other"])
def test_failed_counts_are_the_same_under_both_conventions(convention: str) -> None:
    ref = aspects("R", ["a", "b", "c", "d"])
    out = aspects("O", ["a", "b", "c"])
    ok = {"reason": "fine", "verdict": True}
    boom = {"failed": True, "error": "boom"}
    result = expert_scores(
        ref,
        out,
        # R1: match failed; R2: style failed; R3: both judgments failed; R4: none
        recall_match=[boom, {"matched_id": "O2"}, {"matched_id": "O3"}, {"matched_id": "none"}],
        # O1 → R4 is judged here and its content call fails; O2, O3 reuse the recall side's
        precision_match=[{"matched_id": "R4"}, {"matched_id": "R2"}, {"matched_id": "R3"}],
        recall_content=[None, ok, boom, None],
        recall_style=[None, boom, boom, None],
        precision_content=[boom, None, None],
        precision_style=[ok, None, None],
        failed_judgment=convention,
    )
    recall, precision = result["explanation"]["recall"], result["explanation"]["precision"]
    assert [e.get("failed_calls") for e in recall] == [
        ["match"],
        ["style"],
        ["content", "style"],
        None,
    ]
    assert [e.get("failed_calls") for e in precision] == [
        ["content"],
        ["style"],
        ["content", "style"],
    ]
    assert result["failed_aspects"] == 6
    assert result["failed_judgments"] == 5  # every failed aspect but R1's failed match
    yes = 1.0 if convention == "keep_other" else 0.0
    assert result["scores"]["content_only_recall"] == yes / 4  # R2's content
    assert result["scores"]["style_only_precision"] == yes / 3  # O1's style
    assert result["scores"] == scores_from_explanation(result["explanation"])


def test_unknown_failed_judgment_is_refused() -> None:
    with pytest.raises(ValueError, match="failed_judgment must be one of reference, keep_other"):
        expert_scores([], [], [], [], [], [], [], [], failed_judgment="refrence")


def test_pairs_skip_unmatched_failed_and_reused() -> None:
    ref = aspects("R", ["a", "b"])
    out = aspects("O", ["a", "b", "c"])
    recall = expert_pairs("recall", ref, out, [{"matched_id": "O1"}, {"matched_id": "none"}])
    assert recall[0]["key"] == "R1|O1" and recall[1] is None
    precision = expert_pairs(
        "precision",
        out,
        ref,
        [{"matched_id": "R1"}, {"matched_id": "R1"}, {"failed": True, "error": "x"}],
        judged=recall,
    )
    # O1→R1 is the same pair as R1→O1 (reused); O2→R1 is new; O3 failed.
    assert precision[0] is None
    assert precision[1]["key"] == "R1|O2" and precision[1]["reference"]["id"] == "R1"
    assert precision[2] is None


# --------------------------------------------------------------------------------------------
# The matching answer cannot name a missing aspect
# --------------------------------------------------------------------------------------------


def test_matching_schema_rejects_unknown_ids() -> None:
    graph = compile_graph(GRAPH)
    node = graph.nodes["recall_match"]
    out = aspects("O", ["price", "price", "noise"])
    ctx = {"output_aspects": out}
    choices = node.dynamic["matched_id"](ctx)
    assert choices == ["O1", "O2", "O3", "none"]
    model = build_model("recall_match", node.spec.output, {"matched_id": choices})
    assert model.model_validate({"reason": "r", "matched_id": "O2"}).matched_id == "O2"
    assert model.model_validate({"reason": "r", "matched_id": "none"}).matched_id == "none"
    for bad in ("O4", "price", "R1", ""):
        with pytest.raises(ValidationError):
            model.model_validate({"reason": "r", "matched_id": bad})
    enum = model.model_json_schema()["properties"]["matched_id"]["enum"]
    assert enum == choices  # what the server is told to enforce is the same list


# --------------------------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------------------------


def test_truncate_by_words_keeps_formatting() -> None:
    text = "one two\nthree   four five six"
    result = asyncio.run(truncate_to_tokens(text, max_tokens=4, base_url=None))
    assert result["text"] == "one two\nthree   four"
    assert result["truncated"] and result["method"] == "words"
    assert (result["tokens_before"], result["tokens_after"]) == (6, 4)
    short = asyncio.run(truncate_to_tokens("a b", max_tokens=4, base_url=None))
    assert short["text"] == "a b" and not short["truncated"]


def test_truncate_uses_tokenize_and_detokenize() -> None:
    seen: list[tuple[str, dict]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body))
        if request.url.path == "/tokenize":
            # two tokens per word, so the word count and the token count differ
            tokens = list(range(2 * len(body["prompt"].split())))
            return httpx.Response(200, json={"tokens": tokens, "count": len(tokens)})
        return httpx.Response(200, json={"prompt": f"<{len(body['tokens'])} tokens>"})

    async def truncate() -> dict:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            return await truncate_with_server("a b c d e f", 4, "http://h:1/v1", "m", http)

    result = asyncio.run(truncate())
    assert result == {
        "text": "<4 tokens>",
        "truncated": True,
        "tokens_before": 12,
        "tokens_after": 4,
        "method": "tokenize",
    }
    assert [p for p, _ in seen] == ["/tokenize", "/detokenize"]
    assert seen[0][1]["model"] == "m" and seen[1][1]["tokens"] == [0, 1, 2, 3]


def test_truncate_falls_back_without_detokenize_and_without_server() -> None:
    with FakeServer() as server:  # has /tokenize (one token per word) but no /detokenize
        result = asyncio.run(
            truncate_to_tokens("w1 w2 w3 w4 w5 w6", 3, server.base_url, "fake-model")
        )
    assert result["method"] == "tokenize+words"
    assert result["text"] == "w1 w2 w3" and result["tokens_after"] == 3
    gone = asyncio.run(truncate_to_tokens("w1 w2 w3", 2, "http://127.0.0.1:9/v1", "m", timeout=2))
    assert gone["method"] == "words" and "unavailable" in gone["note"]


def test_truncation_in_a_run_uses_the_runs_key_and_limits(tmp_path: Path) -> None:
    """Truncation reaches /tokenize through the run's client: with the endpoint's API key
    (before, it sent none and silently fell back to word counts) and never more at once
    than the in-flight limit."""
    data = write_rows(
        tmp_path / "rows.jsonl",
        [json.loads(line) for line in EXAMPLES.read_text().splitlines()[:4]],
    )
    with FakeServer(ExpertResponder()) as server:
        server.api_key = "sk-secret-tokenizer"
        server.tokenize_delay = 0.05
        run(
            GRAPH,
            data,
            tmp_path / "run",
            server.base_url,
            params={"max_tokens_per_text": 8},
            api_key="sk-secret-tokenizer",
            concurrency=2,
        )
        peak = server.peak_tokenize
    lines = results(tmp_path / "run")
    assert all(line["status"] == "ok" for line in lines.values()), lines
    for line in lines.values():
        assert line["truncation"]["reference"]["method"] == "tokenize+words"
    assert any(path.endswith("/tokenize") for path in server.paths)
    assert 1 <= peak <= 2


def test_truncation_fails_loudly_when_the_server_refuses(tmp_path: Path) -> None:
    """A 401 from /tokenize fails the node, naming the error; before, truncation silently
    switched to word counts and the example passed as if it had been tokenized."""
    data = write_rows(tmp_path / "rows.jsonl", [json.loads(EXAMPLES.open().readline())])
    with FakeServer(ExpertResponder()) as server:
        server.tokenize_status = 401
        run(GRAPH, data, tmp_path / "run", server.base_url)
    line = next(iter(results(tmp_path / "run").values()))
    assert line["status"] == "failed"
    assert "truncate_to_tokens" in line["error"] and "401" in line["error"]


def test_failed_tokenize_tries_are_kept_in_the_trace(tmp_path: Path) -> None:
    """A /tokenize try that fails and is sent again is kept as a transport attempt of the
    truncation node, like a failed try of an LLM call; before, the trace kept only the value
    and the retry left no mark."""

    data = write_rows(tmp_path / "rows.jsonl", [json.loads(EXAMPLES.open().readline())])
    with FakeServer(ExpertResponder()) as server:
        server.tokenize_errors = [500]
        run(GRAPH, data, tmp_path / "run", server.base_url, params={"max_tokens_per_text": 8})
    line = next(iter(results(tmp_path / "run").values()))
    assert line["status"] == "ok", line
    tries = {
        rec["node"]: rec["attempts"]
        for rec in trace_records(tmp_path / "run" / "traces.sqlite")
        if rec["node"] in ("reference_text", "output_text")
    }
    failed = [a["error"] for attempts in tries.values() for a in attempts]
    # The fake server has no /detokenize: those 404s are kept too, and say why the cut
    # text came from a word cut.
    assert sum("HTTP 500" in error for error in failed) == 1, failed
    assert all("HTTP 500" in error or "/detokenize" in error for error in failed), failed


def test_server_gone_during_truncation_stops_the_run(tmp_path: Path) -> None:
    """A server that stays away while /tokenize is asked stops the run (status "server
    gone", the example left for the resume) as it does for an LLM call; before, the
    truncation node failed the example as if the example were at fault."""
    from orchestrator.servers.outage import ServerGone

    data = write_rows(tmp_path / "rows.jsonl", [json.loads(EXAMPLES.open().readline())])
    with FakeServer() as server:
        expert = ExpertResponder()

        def respond(body: dict) -> Reply:
            if is_canary(body):
                # Answered; from here a proxy in front answers 502 on every route.
                server.fail_every_route(502, 60.0)
                return schema_responder(body)
            return expert(body)

        server.responder = respond
        with pytest.raises(ServerGone):
            run(GRAPH, data, tmp_path / "run", server.base_url, server_wait=1.0)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "server gone"
    finished = tmp_path / "run" / "results.jsonl"
    assert not finished.exists() or finished.read_text() == ""


def test_truncate_outside_a_run_does_not_hide_a_refusal() -> None:
    """Called from Python with no run: a server without /tokenize (404) still gets word
    counts, saying so, but a refusal (401) is raised instead of passing for a word count."""
    with FakeServer() as server:
        server.tokenize_status = 404
        words = asyncio.run(truncate_to_tokens("w1 w2 w3 w4", 2, server.base_url, "fake-model"))
        assert words["method"] == "words" and "404" in words["note"]
        server.tokenize_status = None
        server.api_key = "sk-needed"
        with pytest.raises(httpx.HTTPStatusError, match="401"):
            asyncio.run(truncate_to_tokens("w1 w2 w3 w4", 2, server.base_url, "fake-model"))


# --------------------------------------------------------------------------------------------
# G-Eval: probability-weighted score
# --------------------------------------------------------------------------------------------


def lp(token: str, top: dict[str, float], chosen: float | None = None) -> dict:
    return {"token": token, "logprob": top.get(token, chosen or 0.0), "top": top}


def geval_tokens(score_top: dict[str, float], chosen: str) -> list[dict]:
    return [
        lp('{"', {'{"': 0.0}),
        lp("reason", {"reason": 0.0}),
        lp('":"', {'":"': 0.0}),
        lp("fine", {"fine": 0.0}),
        lp('","', {'","': 0.0}),
        lp("score", {"score": 0.0}),
        lp('":', {'":': 0.0}),
        lp(chosen, score_top),
        lp("}", {"}": 0.0}),
    ]


def test_logprob_weighted_score_by_hand() -> None:
    top = {"4": math.log(0.6), "3": math.log(0.2), "5": math.log(0.1), "x": math.log(0.1)}
    value = {"reason": "fine", "score": 4, "_logprobs": geval_tokens(top, "4")}
    got = logprob_weighted_score(value, "score", [1, 2, 3, 4, 5])
    assert got == pytest.approx((4 * 0.6 + 3 * 0.2 + 5 * 0.1) / 0.9)
    # An allowed set without 5 drops its mass.
    got = logprob_weighted_score(value, "score", [1, 2, 3, 4])
    assert got == pytest.approx((4 * 0.6 + 3 * 0.2) / 0.8)


def test_logprob_score_when_the_digit_shares_a_token() -> None:
    # A space glued to the digit: the value starts inside the token " 2".
    spaced = [
        lp('{"score', {'{"score': 0.0}),
        lp('":', {'":': 0.0}),
        lp(" 2", {" 2": math.log(0.5), " 1": math.log(0.5), "2": math.log(0.3)}),
    ]
    assert logprob_weighted_score({"_logprobs": spaced}, "score", [1, 2, 3]) == pytest.approx(1.5)
    # The colon glued to the digit: only alternatives with the same lead-in count.
    glued = [
        lp('{"score', {'{"score': 0.0}),
        lp('":4', {'":4': math.log(0.6), '":5': math.log(0.2), '" :': math.log(0.2)}),
        lp("}", {"}": 0.0}),
    ]
    got = logprob_weighted_score({"_logprobs": glued}, "score", [1, 2, 3, 4, 5])
    assert got == pytest.approx((4 * 0.6 + 5 * 0.2) / 0.8)


def test_logprob_score_without_logprobs_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no logprobs"):
        logprob_weighted_score({"score": 3}, "score", [1, 2, 3, 4, 5])
    assert "--structured" in NO_LOGPROBS


# --------------------------------------------------------------------------------------------
# A responder that answers every ExPerT step in shape, from the prompt text
# --------------------------------------------------------------------------------------------

WORD = re.compile(r"[a-z0-9]+")
STOP = {
    "the",
    "a",
    "an",
    "and",
    "or",
    "of",
    "to",
    "is",
    "it",
    "i",
    "in",
    "for",
    "on",
    "my",
    "so",
    "but",
    "about",
    "with",
    "at",
    "this",
    "that",
    "was",
    "be",
    "if",
    "you",
}


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def overlap(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    return len(wa & wb) / max(1, len(wa | wb))


def section(text: str, title: str) -> str:
    """The body under a `## title` heading of a rendered prompt."""
    match = re.search(r"## " + re.escape(title) + r"[^\n]*\n(.*?)(?=\n## |\Z)", text, re.S)
    assert match, f"no section {title!r} in prompt"
    return match.group(1).strip()


def bullets(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


class ExpertResponder:
    """Answers by step: sentences as aspects, word overlap for matching and content, sentence
    length for style. Deterministic, so the test can predict every decision."""

    def __init__(
        self, fail_match_for: str | None = None, fail_style_for: str | None = None
    ) -> None:
        self.fail_match_for = fail_match_for
        self.fail_style_for = fail_style_for
        self.steps: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"] if len(body["messages"]) == 2 else ""
        if len(body["messages"]) > 2:  # a re-ask after an invalid reply
            user = body["messages"][1]["content"]
        step = (
            "extract"
            if "atomic aspects" in system
            else "match"
            if "also appears among" in system
            else "content"
            if "agree in content" in system
            else "style"
            if "writing style" in system
            else "other"
        )
        with self.lock:
            self.steps.append(step)
        if step == "extract":
            text = section(user, "The text")
            sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()][:15]
            found = [
                {"title": " ".join(s.split()[:3]), "description": s, "evidence": [s]}
                for s in sentences
            ]
            return Reply(content=json.dumps({"aspects": found}))
        if step == "match":
            aspect = section(user, "The aspect to find")
            if self.fail_match_for and self.fail_match_for in aspect:
                return Reply(content='{"reason": "cut off')  # never valid
            best, best_id = 0.0, "none"
            for line in section(user, "Candidate aspects").splitlines():
                cid, _, rest = line[1:].partition("] ")
                if overlap(aspect, rest) > best:
                    best, best_id = overlap(aspect, rest), cid
            choice = best_id if best >= 0.3 else "none"
            enum = body["response_format"]["json_schema"]["schema"]["properties"]["matched_id"]
            assert choice in enum["enum"]
            return Reply(
                content=json.dumps({"reason": f"overlap {best:.2f}", "matched_id": choice})
            )
        if step in ("content", "style"):
            a = " ".join(
                bullets(
                    section(
                        user,
                        "Evidence from text A" if step == "content" else "Sentences from text A",
                    )
                )
            )
            b = " ".join(
                bullets(
                    section(
                        user,
                        "Evidence from text B" if step == "content" else "Sentences from text B",
                    )
                )
            )
            if step == "style" and self.fail_style_for and self.fail_style_for in a:
                return Reply(content='{"reason": "cut off')  # never valid
            if step == "content":
                verdict = overlap(a, b) >= 0.5
            else:
                verdict = abs(len(a.split()) - len(b.split())) <= 3
            return Reply(content=json.dumps({"reason": step, "verdict": verdict}))
        return schema_responder(body)


def check_result_line(line: dict) -> None:
    """Everything the issue promises of one result line, and that scores follow from it."""
    assert line["status"] == "ok", line
    assert set(line["scores"]) == set(SCORE_KEYS)
    assert line["score"] == line["scores"]["content_style_average_f1"]
    assert line["scores"] == pytest.approx(scores_from_explanation(line["explanation"]))
    keys = {
        "aspect",
        "description",
        "evidence",
        "matched",
        "matched_aspect",
        "match_reason",
        "content",
        "style",
        "content_reason",
        "style_reason",
        "failed",
    }
    for side in ("recall", "precision"):
        for item in line["explanation"][side]:
            assert keys <= set(item)
            if not item["matched"]:
                assert item["content"] is None and item["style"] is None
                assert item["matched_aspect"] is None
            else:
                assert isinstance(item["content"], bool) and isinstance(item["style"], bool)


def test_expert_graph_end_to_end(tmp_path: Path) -> None:
    responder = ExpertResponder()
    with FakeServer(responder) as server:
        outcome = run(GRAPH, EXAMPLES, tmp_path / "run", server.base_url)
    lines = results(tmp_path / "run")
    assert len(lines) == sum(1 for _ in EXAMPLES.open())
    for line in lines.values():
        check_result_line(line)
    # The near-copy matches almost everything; the off-topic output matches nothing.
    assert lines["review-near-copy"]["scores"]["content_only_f1"] >= 0.6
    off = lines["abstract-off-topic"]
    assert off["score"] == 0.0
    assert not any(e["matched"] for e in off["explanation"]["recall"])
    # Extraction saw one aspect per sentence of the reference.
    near = lines["review-near-copy"]["explanation"]["recall"]
    assert [e["id"] for e in near] == [f"R{i}" for i in range(1, len(near) + 1)]
    # Request count = extractions + one match per aspect + two judgments per judged pair.
    expected = 0
    for line in lines.values():
        rec, prec = line["explanation"]["recall"], line["explanation"]["precision"]
        judged = sum(e["matched"] for e in rec) + sum(
            e["matched"] and e["judged_on"] == "precision" for e in prec
        )
        expected += 2 + len(rec) + len(prec) + 2 * judged
    assert responder.steps.count("other") == 1  # the canary
    assert len(responder.steps) - 1 == expected
    summary = outcome.summary
    for key in SCORE_KEYS:
        mean = sum(line["scores"][key] for line in lines.values()) / len(lines)
        assert summary["means"][f"scores.{key}"] == pytest.approx(mean)


def test_without_reuse_every_side_judges_its_own_pairs(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "one.jsonl", [json.loads(EXAMPLES.open().readline())])
    counts = {}
    for reuse in (True, False):
        responder = ExpertResponder()
        with FakeServer(responder) as server:
            run(
                GRAPH,
                data,
                tmp_path / f"run-{reuse}",
                server.base_url,
                params={"reuse_pair_judgments": reuse},
            )
        line = next(iter(results(tmp_path / f"run-{reuse}").values()))
        check_result_line(line)
        sides = {e["judged_on"] for e in line["explanation"]["precision"] if e["matched"]}
        assert sides == ({"recall"} if reuse else {"precision"})
        counts[reuse] = responder.steps.count("content")
    matched_precision = sum(e["matched"] for e in line["explanation"]["precision"])
    assert counts[False] - counts[True] == matched_precision > 0


def test_failed_matching_is_recorded_not_fatal(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "one.jsonl", [json.loads(EXAMPLES.open().readline())])
    responder = ExpertResponder(fail_match_for="Filters are cheap")
    with FakeServer(responder) as server:
        run(GRAPH, data, tmp_path / "run", server.base_url)
    line = next(iter(results(tmp_path / "run").values()))
    check_result_line(line)
    failed = [e for side in line["explanation"].values() for e in side if e["failed"]]
    assert len(failed) == 2  # the sentence exists on both sides
    for item in failed:
        assert item["matched"] is False and "matching failed" in item["error"]
    assert line["failed_aspects"] == 2


def test_failed_judgment_param_reaches_the_scores_in_a_cli_run(tmp_path: Path) -> None:
    """`--param failed_judgment=keep_other` keeps the content "yes" of the pair whose style
    call fails; the default run counts it as no. Both lines count the same failures."""
    data = write_rows(tmp_path / "one.jsonl", [json.loads(EXAMPLES.open().readline())])
    with FakeServer(ExpertResponder(fail_style_for="Filters are cheap")) as server:
        run(GRAPH, data, tmp_path / "default", server.base_url)
        done = orchestrator_command(
            "run",
            str(GRAPH),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "keep"),
            "--base-url",
            server.base_url,
            "--no-cache",
            "--param",
            "failed_judgment=keep_other",
        )
    assert done.returncode == 0, done.stdout + done.stderr
    default = next(iter(results(tmp_path / "default").values()))
    keep = next(iter(results(tmp_path / "keep").values()))
    for line in (default, keep):
        check_result_line(line)
        hit = [e for side in line["explanation"].values() for e in side if e["failed"]]
        # R4|O4 ("Filters are cheap.") is judged once and reused on the precision side.
        assert [e["id"] for e in hit] == ["R4", "O4"], hit
        assert all(e["failed_calls"] == ["style"] and e["style"] is False for e in hit)
        assert line["failed_aspects"] == line["failed_judgments"] == 2
    assert all(
        e["content"] is False and e["overridden"] == {"content": True}
        for e in (default["explanation"]["recall"][3], default["explanation"]["precision"][3])
    )
    assert keep["explanation"]["recall"][3]["content"] is True
    assert keep["explanation"]["precision"][3]["content"] is True
    assert "overridden" not in keep["explanation"]["recall"][3]
    n_ref = len(default["explanation"]["recall"])
    n_out = len(default["explanation"]["precision"])
    gain = keep["scores"]["content_only_recall"] - default["scores"]["content_only_recall"]
    assert gain == pytest.approx(1 / n_ref)
    gain = keep["scores"]["content_only_precision"] - default["scores"]["content_only_precision"]
    assert gain == pytest.approx(1 / n_out)
    assert keep["scores"]["style_only_f1"] == default["scores"]["style_only_f1"]
    summary = json.loads((tmp_path / "keep" / "summary.json").read_text(encoding="utf-8"))
    assert summary["means"]["failed_judgments"] == 2.0


def test_truncation_is_applied_and_recorded(tmp_path: Path) -> None:
    data = write_rows(tmp_path / "one.jsonl", [json.loads(EXAMPLES.open().readline())])
    responder = ExpertResponder()
    with FakeServer(responder) as server:
        run(GRAPH, data, tmp_path / "run", server.base_url, params={"max_tokens_per_text": 8})
        prompts = [
            b["messages"][-1]["content"]
            for b in server.requests
            if "atomic aspects" in b["messages"][0]["content"]
        ]
    line = next(iter(results(tmp_path / "run").values()))
    trunc = line["truncation"]["reference"]
    assert trunc["truncated"] and trunc["tokens_after"] == 8 and trunc["tokens_before"] > 8
    assert trunc["method"] == "tokenize+words"  # the fake server has /tokenize only
    assert all(len(section(p, "The text").split()) == 8 for p in prompts)


# --------------------------------------------------------------------------------------------
# GEMBA and G-Eval graphs
# --------------------------------------------------------------------------------------------


def test_gemba_graph_end_to_end(tmp_path: Path) -> None:
    def responder(body: dict) -> Reply:
        if "0 to 100" in body["messages"][0]["content"]:
            ref = section(body["messages"][-1]["content"], "The user's own text")
            out = section(body["messages"][-1]["content"], "Generated text")
            score = round(100 * overlap(ref, out))
            return Reply(content=json.dumps({"reason": "overlap", "score": score}))
        return schema_responder(body)

    with FakeServer(responder) as server:
        run(
            ROOT / "graphs" / "gemba.yaml",
            ROOT / "examples" / "gemba.jsonl",
            tmp_path / "run",
            server.base_url,
        )
    lines = results(tmp_path / "run")
    assert len(lines) >= 5
    for line in lines.values():
        assert line["status"] == "ok"
        assert 0 <= line["rating"] <= 100 and line["score"] == pytest.approx(line["rating"] / 100)


def openai_logprobs(tokens: list[dict]) -> list[dict]:
    """`geval_tokens` as a server sends them: top alternatives as a `top_logprobs` list."""
    return [
        {
            "token": t["token"],
            "logprob": t["logprob"],
            "top_logprobs": [{"token": k, "logprob": v} for k, v in t["top"].items()],
        }
        for t in tokens
    ]


def test_geval_graph_weights_score_tokens(tmp_path: Path) -> None:
    # Skewed so the weighted score (3.25) is not the digit written (3).
    top = {"3": math.log(0.5), "4": math.log(0.375), "2": math.log(0.125)}

    def responder(body: dict) -> Reply:
        if body.get("logprobs"):
            assert body["top_logprobs"] == 20
            tokens = openai_logprobs(geval_tokens(top, "3"))
            return Reply(content='{"reason":"fine","score":3}', logprobs=tokens)
        return schema_responder(body)

    with FakeServer(responder) as server:
        run(
            ROOT / "graphs" / "geval.yaml",
            ROOT / "examples" / "geval.jsonl",
            tmp_path / "run",
            server.base_url,
        )
    lines = results(tmp_path / "run")
    assert len(lines) >= 5
    for line in lines.values():
        assert line["status"] == "ok", line
        assert line["rating"] == 3
        assert line["rating_weighted"] == pytest.approx(3 * 0.5 + 4 * 0.375 + 2 * 0.125)
        assert line["score"] == pytest.approx((line["rating_weighted"] - 1) / 4)


def test_geval_graph_without_logprobs_fails_clearly(tmp_path: Path) -> None:
    with FakeServer(schema_responder) as server:  # answers, but never with logprobs
        run(
            ROOT / "graphs" / "geval.yaml",
            ROOT / "examples" / "geval.jsonl",
            tmp_path / "run",
            server.base_url,
        )
    lines = results(tmp_path / "run")
    for line in lines.values():
        assert line["status"] == "failed"
        assert "no logprobs" in line["error"]


@pytest.mark.parametrize("name", ["expert", "gemba", "geval"])
def test_graphs_validate(name: str) -> None:
    graph = compile_graph(ROOT / "graphs" / f"{name}.yaml")
    assert set(graph.spec.inputs) == {"input", "reference", "output"}
    assert "score" in graph.outputs


def test_empty_output_scores_zero_without_calls_for_it(tmp_path: Path) -> None:
    row = json.loads(EXAMPLES.open().readline())
    data = write_rows(tmp_path / "one.jsonl", [{**row, "output": "   "}])
    responder = ExpertResponder()
    with FakeServer(responder) as server:
        run(GRAPH, data, tmp_path / "run", server.base_url)
    line = next(iter(results(tmp_path / "run").values()))
    check_result_line(line)
    assert line["explanation"]["precision"] == []
    recall = line["explanation"]["recall"]
    assert recall and all(not e["matched"] and "no aspects" in e["match_reason"] for e in recall)
    assert line["score"] == 0.0
    assert responder.steps.count("extract") == 1  # only the reference was sent
    assert "match" not in responder.steps
