"""Votes, ensembles and accuracy for the style triplet protocol, and its graph end to end."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import run_graph

from orchestrator.compute import votes as v
from orchestrator.kinds.graphs import compile_graph

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "graphs" / "style_ensemble.yaml"
EXAMPLES = ROOT / "examples" / "style_ensemble.jsonl"


# -- single votes --------------------------------------------------------------------------


def test_sign_vote() -> None:
    assert v.sign_vote(0.7, 0.2) == 1
    assert v.sign_vote(0.2, 0.7) == -1
    assert v.sign_vote(0.5, 0.5) == 0
    assert v.sign_vote(None, 0.5) is None
    assert v.sign_vote(math.nan, 0.5) is None


def test_pair_scores_keeps_unavailable_metrics_out_with_their_reason() -> None:
    out = v.pair_scores(
        {
            "bleu": [{"score": 30.0}, {"score": 10.0}],
            "rouge1": [0.5, 0.25],
            "meteor": [
                {"available": False, "reason": "unavailable: WordNet data not installed"},
                {"available": False, "reason": "unavailable: WordNet data not installed"},
            ],
        }
    )
    assert out["pairs"] == {"bleu": [30.0, 10.0], "rouge1": [0.5, 0.25], "meteor": None}
    assert out["unavailable"] == {"meteor": "unavailable: WordNet data not installed"}
    votes = v.pair_votes(out["pairs"], {"judge": -1})
    assert votes == {"bleu": 1, "rouge1": 1, "meteor": None, "judge": -1}


# -- the A/B judge -------------------------------------------------------------------------


def test_judge_orders_are_seeded_per_example_and_both_on_request() -> None:
    assert v.judge_orders("ex-1", seed=3) == v.judge_orders("ex-1", seed=3)
    firsts = Counter(v.judge_orders(f"ex-{i}", seed=0)[0][0] for i in range(200))
    assert 60 < firsts["a"] < 140 and firsts["a"] + firsts["b"] == 200
    flipped = sum(
        v.judge_orders(f"ex-{i}", seed=0) != v.judge_orders(f"ex-{i}", seed=1) for i in range(200)
    )
    assert flipped > 40  # another seed gives another assignment
    assert v.judge_orders("ex-1", both=True) == [["a", "b"], ["b", "a"]]


def test_judge_vote_maps_display_positions_back_to_candidates() -> None:
    assert v.judge_vote([{"verdict": "A"}], [["a", "b"]])["vote"] == 1
    assert v.judge_vote([{"verdict": "A"}], [["b", "a"]])["vote"] == -1
    assert v.judge_vote([{"verdict": "B"}], [["b", "a"]])["vote"] == 1
    for abstain in ("Both", "None"):
        assert v.judge_vote([{"verdict": abstain}], [["a", "b"]])["vote"] == 0
    failed = v.judge_vote([{"failed": True, "error": "x"}], [["a", "b"]])
    assert failed["vote"] == 0 and failed["failed"] == 1


def test_judge_vote_with_both_orders_needs_agreement() -> None:
    orders = [["a", "b"], ["b", "a"]]
    agree = v.judge_vote([{"verdict": "A"}, {"verdict": "B"}], orders)
    assert agree["vote"] == 1 and agree["consistent"] is True
    position_bias = v.judge_vote([{"verdict": "A"}, {"verdict": "A"}], orders)
    assert position_bias["vote"] == 0 and position_bias["consistent"] is False
    half = v.judge_vote([{"verdict": "B"}, {"verdict": "Both"}], orders)
    assert half["vote"] == 0


# -- ensembles -----------------------------------------------------------------------------


def test_majority_vote_ties_abstentions_and_unavailable() -> None:
    votes = {"x": 1, "y": 1, "z": -1, "t": 0, "u": None}
    assert v.majority_vote(votes, ["x", "y", "z"]) == 1
    assert v.majority_vote(votes, ["x", "z"]) == 0  # a tie stays a tie
    assert v.majority_vote(votes, ["x", "z", "t"]) == 0  # an abstention adds nothing
    assert v.majority_vote(votes, ["z", "t", "u"]) == -1
    assert v.majority_vote(votes, ["u"]) is None
    assert v.majority_vote(votes, ["t"]) == 0


def test_weight_forms() -> None:
    assert v.weight(0.7, "accuracy") == pytest.approx(0.7)
    assert v.weight(0.7, "excess") == pytest.approx(0.2)
    assert v.weight(0.4, "excess") == 0.0
    assert v.weight(0.75, "logodds") == pytest.approx(math.log(3))
    assert v.weight(0.3, "logodds") == 0.0
    assert v.weight(1.0, "logodds") == pytest.approx(math.log(99))
    with pytest.raises(ValueError, match="unknown weight form"):
        v.weight(0.7, "squared")


def test_weighted_vote_outweighs_the_majority_and_keeps_ties() -> None:
    votes = {"strong": 1, "weak1": -1, "weak2": -1, "idle": 0, "off": None}
    weights = {"strong": 0.95, "weak1": 0.4, "weak2": 0.4, "idle": 0.9}
    members = ["strong", "weak1", "weak2", "idle", "off"]
    assert v.majority_vote(votes, members) == -1
    assert v.weighted_vote(votes, members, weights) == 1  # 0.95 > 0.8
    assert v.weighted_vote(votes, members, {**weights, "weak2": 0.55}) == 0  # exact tie
    assert v.weighted_vote(votes, ["strong", "weak1"], {"weak1": 0.5}) == -1  # unweighted: 0
    assert v.weighted_vote(votes, ["off"], weights) is None


def _calibration(tmp_path: Path, body: dict) -> str:
    path = tmp_path / "meta_eval.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_ensemble_votes_without_calibration_reports_pwv_unavailable() -> None:
    out = v.ensemble_votes({"a": 1, "b": -1, "c": 1}, {"all": ["a", "b", "c"]})
    assert out["votes"] == {"mv:all": 1, "pwv:all": None, "lr:all": None}
    assert out["calibration"]["available"] is False
    assert "no calibration" in out["calibration"]["stacking"]["reason"]
    assert "no calibration" in out["calibration"]["reason"]


def test_ensemble_votes_reads_weights_and_refuses_calibration_rows(tmp_path: Path) -> None:
    path = _calibration(
        tmp_path,
        {"split": "calib", "accuracy": {"a": 0.9, "b": 0.6, "c": 0.55}, "ids": ["seen"]},
    )
    sets = {"all": ["a", "b", "c"], "ab": ["a", "b"]}
    out = v.ensemble_votes({"a": 1, "b": -1, "c": -1}, sets, path, "accuracy", "new")
    assert out["votes"] == {
        "mv:all": -1,
        "mv:ab": 0,
        "pwv:all": -1,
        "pwv:ab": 1,
        "lr:all": None,  # this file has no stacking fit
        "lr:ab": None,
    }
    assert "no stacking fit" in out["calibration"]["stacking"]["reason"]
    assert out["calibration"]["split"] == "calib"
    assert out["calibration"]["weights"] == {"a": 0.9, "b": 0.6, "c": 0.55}
    logodds = v.ensemble_votes({"a": 1, "b": -1, "c": -1}, sets, path, "logodds", "new")
    assert logodds["votes"]["pwv:all"] == 1  # log-odds 2.20 > 0.41 + 0.20
    seen = v.ensemble_votes({"a": 1, "b": -1, "c": -1}, sets, path, "accuracy", "seen")
    assert seen["votes"]["pwv:all"] is None
    assert "calibration split" in seen["calibration"]["reason"]


def test_calibration_file_shapes(tmp_path: Path) -> None:
    nested = _calibration(tmp_path, {"metrics": {"bleu": {"accuracy": 0.7, "n": 10}}})
    assert v.load_calibration(nested)["accuracy"] == {"bleu": 0.7}
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "graph": "style-ensemble",
                "accuracy": {"metrics": {}, "meta_eval": {"accuracy": {"bleu": 0.6}, "ids": []}},
            }
        )
    )
    assert v.load_calibration(summary)["accuracy"] == {"bleu": 0.6}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"something": 1}))
    with pytest.raises(ValueError, match=r"docs/metrics\.md"):
        v.load_calibration(bad)


# -- accuracy ------------------------------------------------------------------------------


def test_style_accuracy_strict_per_setting_and_mean() -> None:
    rows = [
        {"id": "1", "setting": "DD", "positive": "a", "votes": {"m": 1, "n": None}},
        {"id": "2", "setting": "DD", "positive": "b", "votes": {"m": -1, "n": None}},
        {"id": "3", "setting": "AA", "positive": "a", "votes": {"m": 0, "n": None}},  # tie
        {"id": "4", "setting": "AA", "positive": "b", "votes": {"m": -1, "n": None}},
        {"id": "5", "setting": "LLM", "positive": "a", "votes": {"m": -1, "n": None}},
        {"id": "6", "setting": "LLM", "positive": "x", "votes": {"m": 1, "n": None}},
    ]
    rows[0]["unavailable"] = {"n": "unavailable: WordNet data not installed"}
    report = v.style_accuracy(rows, split="calib")
    m = report["metrics"]["m"]
    assert m["per_setting"] == {"AA": 0.5, "DD": 1.0, "LLM": 0.0}
    assert m["mean"] == pytest.approx(0.5)
    assert m["overall"] == pytest.approx(0.6)
    assert m["ties_or_abstentions"] == 1
    assert report["metrics"]["n"]["available"] is False
    assert report["metrics"]["n"]["reason"] == "unavailable: WordNet data not installed"
    assert report["rows_without_truth"] == 1
    assert report["meta_eval"] == {
        "split": "calib",
        "accuracy": {"m": 0.5},
        "n": 5,
        "ids": ["1", "2", "3", "4", "5"],
    }


# -- the graph -----------------------------------------------------------------------------


def test_judge_prompts_never_see_the_ground_truth() -> None:
    graph = compile_graph(GRAPH)
    env_names: set[str] = set()
    for node in graph.nodes.values():
        if node.is_llm:
            for prompt in (node.prompt, node.system):
                if prompt is not None:
                    env_names |= prompt.names
            assert not {"positive", "setting"} & node.deps
    assert {"reference", "candidate_a", "candidate_b", "shown"} <= env_names
    assert not {"positive", "setting"} & env_names


def _always(verdict: str):
    """A judge that always gives `verdict` (and answers the client's canary validly)."""

    def respond(body: dict) -> Reply:
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
        if "verdict" not in schema.get("properties", {}):
            return schema_responder(body)
        return Reply(content=json.dumps({"reason": "style", "verdict": verdict}))

    return respond


def _run(
    tmp_path: Path, server: FakeServer, name: str = "run", **params: object
) -> tuple[list[dict], dict]:
    outcome = run_graph(
        GRAPH,
        EXAMPLES,
        tmp_path / name,
        server.base_url,
        cache=tmp_path / "cache.sqlite",
        params=dict(params),
    )
    lines = (outcome.folder / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], outcome.summary


def test_style_graph_end_to_end_with_calibration(tmp_path: Path) -> None:
    pytest.importorskip("sacrebleu")
    pytest.importorskip("rouge_score")
    pytest.importorskip("sentence_transformers")
    with FakeServer(_always("A")) as server:
        results, summary = _run(tmp_path, server, wordnet_dir=str(tmp_path / "no-wordnet"))
        assert all(r["status"] == "ok" for r in results) and len(results) >= 12
        assert {r["setting"] for r in results} >= {"DD", "AA", "LLM"}
        for r in results:
            # "A" always names the text shown first; the vote follows the shuffled order.
            assert r["votes"]["judge"] == (1 if r["judge"]["shown_first"] == ["a"] else -1)
            assert r["votes"]["meteor"] is None
        shown = {r["judge"]["shown_first"][0] for r in results}
        assert shown == {"a", "b"}
        rows = {r["id"]: r for r in map(json.loads, EXAMPLES.read_text().splitlines())}
        prompts = [
            req["messages"][-1]["content"]
            for req in server.requests
            if "verdict" in json.dumps(req.get("response_format"))
        ]
        for r in results:
            row = rows[r["id"]]
            (prompt,) = [p for p in prompts if row["reference"] in p]
            first = row["candidate_" + r["judge"]["shown_first"][0]]
            assert prompt.split("## Text A\n", 1)[1].startswith(first)
        acc = summary["accuracy"]
        assert acc["metrics"]["meteor"]["reason"] == "unavailable: WordNet data not installed"
        assert acc["ensembles"]["pwv:all"]["available"] is False
        for name in ("bleu", "rouge1", "rougeL", "embedding", "judge"):
            col = acc["metrics"][name]
            assert set(col["per_setting"]) == {"DD", "AA", "LLM"}
            assert col["mean"] == pytest.approx(sum(col["per_setting"].values()) / 3, abs=1e-3)

        # This run calibrates a second one; its own rows are refused, other rows weighted.
        calibration = tmp_path / "run" / "summary.json"
        (tmp_path / "calib_summary.json").write_text(calibration.read_text())
        again, summary2 = _run(
            tmp_path, server, "again", calibration=str(tmp_path / "calib_summary.json")
        )
        assert all(r["ensembles"]["pwv:all"] is None for r in again)
        assert all(r["ensembles"]["lr:all"] is None for r in again)
        assert "calibration split" in summary2["accuracy"]["ensembles"]["pwv:all"]["reason"]
        assert "calibration split" in summary2["accuracy"]["ensembles"]["lr:all"]["reason"]

        meta = json.loads(calibration.read_text())["accuracy"]["meta_eval"]
        meta["ids"] = []
        (tmp_path / "meta_eval.json").write_text(json.dumps(meta))
        weighted, summary3 = _run(
            tmp_path, server, "weighted", calibration=str(tmp_path / "meta_eval.json")
        )
        assert all(r["ensembles"]["pwv:all"] in (-1, 0, 1) for r in weighted)
        assert summary3["accuracy"]["calibration"]["weights"]["bleu"] == pytest.approx(
            meta["accuracy"]["bleu"]
        )
        assert all(r["ensembles"]["lr:all"] is None for r in weighted)  # no stacking block

        # The stacking aggregate's fit drives lr:NAME once the rows are not its own.
        body = json.loads(calibration.read_text())
        assert set(body["stacking"]["fit"]["sets"]) == {"ngram", "non_llm", "llm", "all"}
        assert body["stacking"]["heldout"]["sets"]["all"]["verdict"]
        body["stacking"]["fit"]["ids"] = body["accuracy"]["meta_eval"]["ids"] = []
        (tmp_path / "stacked.json").write_text(json.dumps(body))
        stacked, summary4 = _run(
            tmp_path, server, "stacked", calibration=str(tmp_path / "stacked.json")
        )
        assert all(r["ensembles"]["lr:all"] in (-1, 0, 1) for r in stacked)
        assert summary4["accuracy"]["ensembles"]["lr:all"]["available"] is True


def test_style_graph_both_orders_asks_twice(tmp_path: Path) -> None:
    pytest.importorskip("sacrebleu")
    pytest.importorskip("rouge_score")
    pytest.importorskip("sentence_transformers")
    with FakeServer(_always("A")) as server:
        results, summary = _run(tmp_path, server, both_orders=True)
    # A judge that always says "A" contradicts itself across orders: it never votes.
    assert all(r["votes"]["judge"] == 0 for r in results)
    assert all(len(r["judge"]["answers"]) == 2 for r in results)
    assert summary["accuracy"]["judge"]["order_inconsistent"] == len(results)
    assert summary["accuracy"]["metrics"]["judge"]["mean"] == 0.0
