"""The five cookbook protocols (docs/cookbook.md) end to end against the fake server.

Each graph runs over its own examples through the command line; the responders answer
from what the prompt shows, so the outputs and the summary's aggregates can be checked
against values worked out here from the same data.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeserver import FakeServer, Reply, schema_responder
from typer.testing import CliRunner

from orchestrator.cli import app

ROOT = Path(__file__).parent.parent


def rows_of(stem: str) -> list[dict[str, Any]]:
    path = ROOT / "examples" / f"{stem}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def run_cli(graph: Path, data: Path, out: Path, base_url: str, *extra: str) -> dict[str, Any]:
    """Run a graph through the CLI; return its result lines by id and its summary."""
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(graph),
            "--data",
            str(data),
            "--out",
            str(out),
            "--base-url",
            base_url,
            "--no-cache",
            *extra,
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    return {"results": {line["id"]: line for line in lines}, "summary": summary}


def schema_props(body: dict) -> dict[str, Any]:
    fmt = body.get("response_format") or {}
    return ((fmt.get("json_schema") or {}).get("schema") or {}).get("properties") or {}


def user_text(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def section(text: str, title: str) -> str:
    """The text under '## title' up to the next '## ' heading (or the end)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no section {title!r} in prompt"
    return match.group(1).strip()


def reply_json(value: dict[str, Any]) -> Reply:
    return Reply(content=json.dumps(value))


# --------------------------------------------------------------------------------------------
# prometheus
# --------------------------------------------------------------------------------------------


def test_prometheus_scores_feedback_and_distribution(tmp_path: Path) -> None:
    rows = {r["id"]: r for r in rows_of("prometheus")}

    def respond(body: dict) -> Reply:
        if "score" not in schema_props(body):
            return schema_responder(body)
        text = user_text(body)
        response = section(text, "Response to grade")
        # A stand-in judge: long, specific responses score high, short vague ones low.
        score = max(1, min(5, len(response) // 60))
        return reply_json({"feedback": f"{len(response)} characters", "score": score})

    with FakeServer(respond) as server:
        run = run_cli(
            ROOT / "graphs/prometheus.yaml",
            ROOT / "examples/prometheus.jsonl",
            tmp_path / "run",
            server.base_url,
        )
        bodies = [b for b in server.requests if "score" in schema_props(b)]

    results, summary = run["results"], run["summary"]
    assert set(results) == set(rows) and 5 <= len(rows) <= 8
    expected = {i: max(1, min(5, len(r["response"]) // 60)) for i, r in rows.items()}
    for row_id, line in results.items():
        assert line["status"] == "ok", line
        assert line["score"] == expected[row_id]
        assert line["feedback"] == f"{len(rows[row_id]['response'])} characters"
        assert line["with_reference"] is ("reference_answer" in rows[row_id])
    assert len(set(expected.values())) >= 3  # the examples spread over the scale

    # The reference answer reaches the judge exactly when the row has one.
    for body in bodies:
        text = user_text(body)
        row = next(r for r in rows.values() if r["response"] in text)
        assert ("## Reference answer" in text) is ("reference_answer" in row)
        assert row["rubric"]["score5_description"] in text

    mean = statistics.mean(expected.values())
    assert summary["means"]["score"] == pytest.approx(mean)
    ci = summary["score_ci"]
    assert ci["mean"] == pytest.approx(mean) and ci["n"] == len(rows)
    assert 1 <= ci["ci_low"] <= mean <= ci["ci_high"] <= 5
    dist = summary["distribution"]["label_distribution"]
    assert dist == {
        **{str(s): list(expected.values()).count(s) for s in range(1, 6)},
        "n/a": 0,
    }


# --------------------------------------------------------------------------------------------
# mtbench_pairwise
# --------------------------------------------------------------------------------------------


def verdict_responder(pick: Any) -> Any:
    def respond(body: dict) -> Reply:
        if "verdict" not in schema_props(body):
            return schema_responder(body)
        text = user_text(body)
        verdict = pick(section(text, "Answer A"), section(text, "Answer B"))
        return reply_json({"reason": "compared", "verdict": verdict})

    return respond


def test_mtbench_always_first_gives_only_ties(tmp_path: Path) -> None:
    rows = rows_of("mtbench_pairwise")
    with FakeServer(verdict_responder(lambda a, b: "A")) as server:
        run = run_cli(
            ROOT / "graphs/mtbench_pairwise.yaml",
            ROOT / "examples/mtbench_pairwise.jsonl",
            tmp_path / "run",
            server.base_url,
        )
    results, summary = run["results"], run["summary"]
    assert len(results) == len(rows)
    for row in rows:
        line = results[row["id"]]
        assert line["status"] == "ok"
        assert line["winner"] == "tie"
        # Each order's own plurality picked the answer shown first: the two disagree.
        assert line["winner_ab"] != line["winner_ba"]
        assert {line["winner_ab"], line["winner_ba"]} == {row["model_a"], row["model_b"]}
        assert len(line["votes"]) == 2 and {v["order"] for v in line["votes"]} == {"ab", "ba"}
    players = summary["win_table"]["all"]["players"]
    models = {r["model_a"] for r in rows} | {r["model_b"] for r in rows}
    assert set(players) == models
    for stats in players.values():
        assert stats["wins"] == stats["losses"] == 0
        assert stats["ties"] == stats["matches"] > 0
        assert stats["win_rate"] == 0.5
    bias = summary["position_bias"]["fake-model"]["all"]
    assert bias["first_rate"] == 1.0 and bias["flip_rate"] == 1.0
    assert bias["votes"] == 2 * len(rows)


def test_mtbench_consistent_judge_gives_wins_and_win_rates(tmp_path: Path) -> None:
    rows = rows_of("mtbench_pairwise")

    # Position-blind: the longer answer wins whichever place it is shown in.
    def longer(a: str, b: str) -> str:
        return "A" if len(a) > len(b) else "B" if len(b) > len(a) else "tie"

    with FakeServer(verdict_responder(longer)) as server:
        run = run_cli(
            ROOT / "graphs/mtbench_pairwise.yaml",
            ROOT / "examples/mtbench_pairwise.jsonl",
            tmp_path / "run",
            server.base_url,
        )
    results, summary = run["results"], run["summary"]
    wins: dict[str, int] = {}
    losses: dict[str, int] = {}
    for row in rows:
        best, worst = (
            ("model_a", "model_b")
            if len(row["answer_a"]) > len(row["answer_b"])
            else ("model_b", "model_a")
        )
        line = results[row["id"]]
        assert line["winner"] == line["winner_ab"] == line["winner_ba"] == row[best]
        wins[row[best]] = wins.get(row[best], 0) + 1
        losses[row[worst]] = losses.get(row[worst], 0) + 1
    players = summary["win_table"]["all"]["players"]
    for name, stats in players.items():
        assert stats["wins"] == wins.get(name, 0)
        assert stats["losses"] == losses.get(name, 0)
        assert stats["ties"] == 0
        assert stats["win_rate"] == pytest.approx(stats["wins"] / stats["matches"])
    assert summary["position_bias"]["fake-model"]["all"]["flip_rate"] == 0.0


# --------------------------------------------------------------------------------------------
# faithfulness
# --------------------------------------------------------------------------------------------

INVENTED = (
    "two weeks",
    "zebra crossing",
    "five brightness",
    "month-long",
    "micro-USB",
    "gentle on furniture",
    "9:00",
    "lunch",
)
PLEASANTRIES = ("thanks", "thank you", "speak soon", "cheers", "best", "see you")


def claims_of(output: str) -> list[str]:
    """The stand-in extractor: every sentence is a claim, except greetings and sign-offs."""
    claims = []
    for sentence in re.split(r"(?<=[.!?])\s+", output):
        sentence = re.sub(r"^(Hi \w+, )?(yes, )?", "", sentence.strip())
        if len(sentence.split()) >= 4 and not sentence.lower().startswith(PLEASANTRIES):
            claims.append(sentence)
    return claims


def supported(claim: str, source: str) -> bool:
    """The stand-in verifier: the examples' invented details are what the source lacks."""
    assert claim and source
    return not any(marker in claim for marker in INVENTED)


def test_faithfulness_scores_supported_share_and_handles_no_claims(tmp_path: Path) -> None:
    rows = {r["id"]: r for r in rows_of("faithfulness")}

    def respond(body: dict) -> Reply:
        props = schema_props(body)
        text = user_text(body)
        if "claims" in props:
            return reply_json({"claims": claims_of(section(text, "Text"))})
        if "supported" in props:
            ok = supported(section(text, "Claim"), section(text, "Source"))
            return reply_json({"reason": "checked", "supported": ok})
        return schema_responder(body)

    with FakeServer(respond) as server:
        run = run_cli(
            ROOT / "graphs/faithfulness.yaml",
            ROOT / "examples/faithfulness.jsonl",
            tmp_path / "run",
            server.base_url,
        )
    results, summary = run["results"], run["summary"]
    scored = []
    for row_id, row in rows.items():
        line = results[row_id]
        assert line["status"] == "ok", line
        claims = claims_of(row["output"])
        verdicts = [supported(c, row["source"]) for c in claims]
        assert line["claims"] == claims
        assert line["n_claims"] == len(claims)
        assert line["n_supported"] == sum(verdicts)
        assert line["unsupported"] == [c for c, v in zip(claims, verdicts, strict=True) if not v]
        if claims:
            assert 0.0 <= line["score"] <= 1.0
            assert line["score"] == pytest.approx(sum(verdicts) / len(claims))
            scored.append(line["score"])
        else:
            assert line["score"] is None
    # The examples cover the cases: all supported, some supported, none, and no claims.
    assert results["summary-faithful"]["score"] == 1.0
    assert results["summary-one-invented"]["score"] == pytest.approx(1 / 3)
    assert results["email-reply-mixed"]["score"] == 0.5
    assert results["review-wrong-specs"]["score"] == 0.0
    assert results["email-greeting-only"]["n_claims"] == 0
    assert summary["no_claims"] == 1
    assert summary["means"]["score"] == pytest.approx(statistics.mean(scored))
    ci = summary["score_ci"]
    assert ci["n"] == len(scored) == len(rows) - 1  # the null score is left out
    assert ci["mean"] == pytest.approx(statistics.mean(scored))
    assert 0.0 <= ci["ci_low"] <= ci["mean"] <= ci["ci_high"] <= 1.0


# --------------------------------------------------------------------------------------------
# jury2
# --------------------------------------------------------------------------------------------


def test_jury2_two_models_label_and_agreement(tmp_path: Path) -> None:
    rows = {r["id"]: r for r in rows_of("jury2")}
    spec = yaml.safe_load((ROOT / "graphs/jury2.yaml").read_text())
    model_a = spec["nodes"]["judge_a"]["model"]
    model_b = spec["nodes"]["judge_b"]["model"]
    assert model_a and model_b and model_a != model_b

    def score_a(text: str) -> int:
        return 1 + len(text) // 40 % 5

    def score_b(text: str) -> int:  # a harsher judge on long texts
        return max(1, score_a(text) - (1 if len(text) > 100 else 0))

    def judge(scorer: Any, model: str) -> Any:
        def respond(body: dict) -> Reply:
            if "score" not in schema_props(body):
                return schema_responder(body)
            assert body["model"] == model
            text = section(user_text(body), "The text to score")
            return reply_json({"reason": model, "score": scorer(text)})

        return respond

    # Each judge model on its own server; the graph names both models, and judge_b is
    # pointed at the second server in a copy of the graph (the test cannot know its port
    # when the graph is written; see docs/cookbook.md).
    with (
        FakeServer(judge(score_a, model_a), model=model_a) as first,
        FakeServer(judge(score_b, model_b), model=model_b) as second,
    ):
        spec["nodes"]["judge_b"]["base_url"] = second.base_url
        graph = tmp_path / "jury2.yaml"
        graph.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        # The copy is outside the shipped tree: its prompts folder and judge_b's server are
        # the user's to name (docs/RELIABILITY.md, threat model).
        run = run_cli(
            graph,
            ROOT / "examples/jury2.jsonl",
            tmp_path / "run",
            first.base_url,
            *("--prompts", str(ROOT / "prompts"), "--allow-server", second.base_url),
        )
        assert not first.errors and not second.errors
        assert any("score" in schema_props(b) for b in first.requests)
        assert any("score" in schema_props(b) for b in second.requests)

    results, summary = run["results"], run["summary"]
    a_scores, b_scores = [], []
    for row_id, row in rows.items():
        line = results[row_id]
        a, b = score_a(row["text"]), score_b(row["text"])
        assert line["status"] == "ok", line
        assert (line["score_a"], line["score_b"]) == (a, b)
        assert line["scores"] == {"judge_a": a, "judge_b": b}
        assert line["mean_score"] == pytest.approx((a + b) / 2)
        assert line["label"] == min(a, b)  # two different scores: the lower one
        assert line["reasons"] == {"judge_a": model_a, "judge_b": model_b}
        a_scores.append(a)
        b_scores.append(b)
    assert a_scores != b_scores and any(x == y for x, y in zip(a_scores, b_scores, strict=True))

    exact = sum(x == y for x, y in zip(a_scores, b_scores, strict=True)) / len(rows)
    agreement = summary["agreement"]
    assert agreement["pairwise_agreement"]["judge_a~judge_b"] == pytest.approx(exact)
    assert agreement["abstain_rate"] == {"judge_a": 0.0, "judge_b": 0.0}
    kappa, alpha = summary["kappa"], summary["alpha"]
    assert isinstance(kappa, float) and -1.0 <= kappa < 1.0
    assert isinstance(alpha, float) and -1.0 <= alpha < 1.0
    # The judges differ by at most one point, so both statistics see agreement.
    assert kappa > 0 and alpha > 0


# --------------------------------------------------------------------------------------------
# self_consistency
# --------------------------------------------------------------------------------------------


def samples_for(text: str, n: int) -> list[int]:
    """Stand-in samples: steady on short texts, scattered on long ones."""
    base = 2 + len(text) % 7
    if len(text) < 150:
        return [base] * n
    return [max(1, min(10, base + d)) for d in ([0, 2, -1, 3, 0, -2, 1] * n)[:n]]


def test_self_consistency_median_spread_and_summary(tmp_path: Path) -> None:
    rows = {r["id"]: r for r in rows_of("self_consistency")}
    seen: list[tuple[int, float]] = []

    def respond(body: dict) -> Reply:
        if "score" not in schema_props(body):
            return schema_responder(body)
        n = int(body.get("n") or 1)
        seen.append((n, body.get("temperature")))
        text = section(user_text(body), "The text to score")
        scores = samples_for(text, n)
        return Reply(samples=[json.dumps({"reason": "r", "score": s}) for s in scores])

    with FakeServer(respond) as server:
        run = run_cli(
            ROOT / "graphs/self_consistency.yaml",
            ROOT / "examples/self_consistency.jsonl",
            tmp_path / "run",
            server.base_url,
        )
    results, summary = run["results"], run["summary"]
    assert seen and all(n == 5 and t is not None and t > 0 for n, t in seen)
    medians, spreads = [], []
    for row_id, row in rows.items():
        line = results[row_id]
        scores = samples_for(row["text"], 5)
        assert line["status"] == "ok", line
        assert line["scores"] == scores
        assert line["score"] == statistics.median(scores)
        assert line["spread"] == max(scores) - min(scores) >= 0
        assert line["stdev"] == pytest.approx(statistics.stdev(scores))
        assert line["unanimous"] is (len(set(scores)) == 1)
        medians.append(line["score"])
        spreads.append(line["spread"])
    assert any(spreads) and not all(spreads)  # both steady and scattered rows
    assert summary["mean_spread"] == pytest.approx(statistics.mean(spreads))
    assert summary["unanimous_share"] == pytest.approx(spreads.count(0) / len(rows))
    ci = summary["score_ci"]
    assert ci["mean"] == pytest.approx(statistics.mean(medians))
    assert ci["ci_low"] <= ci["mean"] <= ci["ci_high"]
    assert isinstance(summary["sample_alpha"], float) and summary["sample_alpha"] <= 1.0


def test_self_consistency_one_sample_still_gives_a_list(tmp_path: Path) -> None:
    """With n = 1 the node's value is one object, not a list; the graph copes."""
    import orchestrator as orc

    rows = rows_of("self_consistency")[:2]
    with FakeServer(schema_responder) as server:
        result = orc.run(
            ROOT / "graphs/self_consistency.yaml",
            rows,
            base_url=server.base_url,
            params={"samples": 1},
        )
    assert [line.status for line in result.results] == ["ok", "ok"]
    for line in result.results:
        extra = line.model_dump()
        assert extra["scores"] == [1] and extra["score"] == 1
        assert extra["spread"] == 0 and extra["stdev"] is None
