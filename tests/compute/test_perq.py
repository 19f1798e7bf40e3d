"""PerQ jury: label rules, Fleiss' kappa, agreement statistics, and the graph end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import run_graph

from orchestrator.compute import agreement as ag
from orchestrator.compute import krippendorff_alpha
from orchestrator.stats import fleiss_kappa

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "graphs" / "perq_jury.yaml"
EXAMPLES = ROOT / "examples" / "perq_jury.jsonl"


@pytest.mark.parametrize(
    ("votes", "label", "rule"),
    [
        ([3, 3, 3], 3, "unanimous"),
        ([2, 2, 3], 2, "majority"),
        ([3, 1, 3], 3, "majority"),
        ([0, 2, 3], 0, "lowest"),
        ([3, 1, 2], 1, "lowest"),
        ([None, 2, 2], 2, "unanimous"),
        ([None, 1, 3], 1, "lowest"),  # two votes that disagree: the lower
        ([3, None, 0], 0, "lowest"),
        ([None, None, 2], None, "n/a"),  # fewer than two votes: no label
        ([None, None, None], None, "n/a"),
    ],
)
def test_label_rules(votes: list[int | None], label: int | None, rule: str) -> None:
    assert ag.label_from_votes(votes) == (label, rule)


def test_jury_label_treats_failed_or_malformed_judges_as_abstaining() -> None:
    out = ag.jury_label(
        {
            "j1": {"reason": "r", "score": 2},
            "j2": {"failed": True, "error": "invalid JSON after 3 attempts"},
            "j3": {"reason": "r", "score": 1},
        }
    )
    assert out == {"label": 1, "rule": "lowest", "scores": {"j1": 2, "j2": None, "j3": 1}}
    assert ag.judge_score({"score": True}) is None
    assert ag.judge_score(None) is None


def test_fleiss_kappa_textbook_table() -> None:
    # Fleiss (1971) as tabulated in the usual worked example: 10 items, 14 raters,
    # 5 categories; P-bar = 0.378, P-bar-e = 0.213, kappa = 0.210.
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    assert fleiss_kappa(table) == pytest.approx(0.210, abs=5e-4)


def test_fleiss_kappa_edges() -> None:
    perfect = ag.rating_table([[0, 0, 0], [3, 3, 3], [1, 1, 1]], [0, 1, 2, 3])
    assert fleiss_kappa(perfect) == pytest.approx(1.0)
    assert fleiss_kappa(ag.rating_table([[2, 2, 2]] * 4, [0, 1, 2, 3])) is None
    assert fleiss_kappa([]) is None
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[1, 1, 0], [3, 0, 0]])
    # Systematic disagreement is below chance.
    assert fleiss_kappa(ag.rating_table([[0, 1], [1, 0]] * 5, [0, 1])) < 0


def test_jury_agreement_statistics() -> None:
    results = [
        {"label": 2, "scores": {"j1": 2, "j2": 2, "j3": 2}},
        {"label": 1, "scores": {"j1": 1, "j2": 3, "j3": 1}},
        {"label": 0, "scores": {"j1": 0, "j2": None, "j3": 3}},
        {"label": None, "scores": {"j1": None, "j2": None, "j3": 3}},
    ]
    out = ag.jury_agreement(results)
    assert out["label_distribution"] == {"0": 1, "1": 1, "2": 1, "3": 0, "n/a": 1}
    assert out["items_all_judges"] == 2
    assert out["full_agreement"] == 0.5
    assert out["pairwise_agreement"]["j1~j2"] == 0.5  # rows 1-2 both voted
    assert out["pairwise_agreement"]["j1~j3"] == pytest.approx(2 / 3, abs=1e-4)  # rows 1-3
    assert out["pairwise_agreement"]["j2~j3"] == 0.5
    assert out["abstain_rate"] == {"j1": 0.25, "j2": 0.5, "j3": 0.0}
    expected = fleiss_kappa(ag.rating_table([[2, 2, 2], [1, 3, 1]], [0, 1, 2, 3]))
    assert out["fleiss_kappa"] == pytest.approx(expected, abs=1e-4)


FIVE_POINT = [
    {"id": "t1", "label": 4, "scores": {"j1": 4, "j2": 5, "j3": 4}},
    {"id": "t2", "label": 1, "scores": {"j1": 1, "j2": 1, "j3": 2}},
    {"id": "t3", "label": 5, "scores": {"j1": 5, "j2": 5, "j3": None}},
]


def test_jury_agreement_names_a_score_outside_the_categories() -> None:
    # A 1-5 rubric with the default PerQ categories (0-3) used to end in a bare KeyError.
    with pytest.raises(ValueError) as caught:
        ag.jury_agreement(FIVE_POINT)
    message = str(caught.value)
    assert "scores['j1'] of result 't1' is 4" in message
    assert "not among categories [0, 1, 2, 3]" in message and "`categories`" in message
    # A label outside the categories is refused the same way (it would be counted nowhere).
    with pytest.raises(ValueError, match=r"label of result 0 is 7, which is not among"):
        ag.jury_agreement([{"label": 7, "scores": {"j1": 1, "j2": 2}}])
    with pytest.raises(ValueError, match="distinct"):
        ag.jury_agreement(FIVE_POINT, categories=[1, 1, 2])
    # Called directly, the table builder says the same instead of raising KeyError.
    with pytest.raises(ValueError, match=r"rating 4 of item 0 is not among categories"):
        ag.rating_table([[4, 1]], [0, 1, 2, 3])


def test_jury_agreement_with_given_or_inferred_categories() -> None:
    out = ag.jury_agreement(FIVE_POINT, categories=[1, 2, 3, 4, 5])
    assert out["label_distribution"] == {"1": 1, "2": 0, "3": 0, "4": 1, "5": 1, "n/a": 0}
    assert out["items_all_judges"] == 2
    expected = fleiss_kappa(ag.rating_table([[4, 5, 4], [1, 1, 2]], [1, 2, 3, 4, 5]))
    assert out["fleiss_kappa"] == pytest.approx(expected, abs=1e-4)
    assert out["pairwise_agreement"]["j1~j2"] == pytest.approx(2 / 3, abs=1e-4)
    # null: the scores seen are the categories (unused ones are simply not listed).
    inferred = ag.jury_agreement(FIVE_POINT, categories=None)
    assert inferred["label_distribution"] == {"1": 1, "2": 0, "4": 1, "5": 1, "n/a": 0}
    assert inferred["fleiss_kappa"] == out["fleiss_kappa"]


def test_label_summary_refuses_a_label_outside_the_categories() -> None:
    rows = [{"id": "x", "label": 2}, {"id": "y", "label": 5}]
    with pytest.raises(ValueError, match=r"label of result 'y' is 5, which is not among"):
        ag.label_summary(rows)
    out = ag.label_summary(rows, categories=[1, 2, 3, 4, 5])
    assert out["label_distribution"] == {"1": 0, "2": 1, "3": 0, "4": 0, "5": 1, "n/a": 0}
    # Labels are counted by their text, so "2" still matches the category 2.
    assert ag.label_summary([{"label": "2"}])["label_distribution"]["2"] == 1


def test_label_summary_against_a_reference_column() -> None:
    rows = [
        {"label": 2, "jury_label": 2},
        {"label": 1, "jury_label": 3},
        {"label": 0, "jury_label": None},
    ]
    out = ag.label_summary(rows, reference_field="jury_label")
    assert out["label_distribution"]["2"] == 1 and out["label_distribution"]["n/a"] == 0
    assert out["reference"] == {"field": "jury_label", "items": 2, "agreement": 0.5}


# -- the graph end to end ------------------------------------------------------------------


def jury_responder(scores_by_seed: dict[int, int | None]):
    """Judges told apart by their seed; a None score makes that judge reply with junk."""

    def respond(body: dict) -> Reply:
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
        if "score" not in schema.get("properties", {}):
            return schema_responder(body)
        score = scores_by_seed[int(body.get("seed") or 0)]
        if score is None:
            return Reply(content="I think it is pretty good, maybe a two?")
        return Reply(content=json.dumps({"reason": "fits", "score": score}))

    return respond


def test_jury_graph_end_to_end_with_a_failing_judge(tmp_path: Path) -> None:
    with FakeServer(jury_responder({1: 2, 2: 3, 3: None})) as server:
        outcome = run_graph(
            GRAPH, EXAMPLES, tmp_path / "run", server.base_url, cache=tmp_path / "cache.sqlite"
        )
        seeds = {r.get("seed") for r in server.requests if r.get("seed") is not None}
    rows = [json.loads(x) for x in (outcome.folder / "results.jsonl").read_text().splitlines()]
    source = [json.loads(x) for x in EXAMPLES.read_text().splitlines()]
    assert len(rows) == len(source) >= 12
    assert {s["platform"] for s in source} == {"X/Twitter", "Telegram", "LinkedIn"}
    assert seeds == {1, 2, 3}
    by_id = {s["id"]: s for s in source}
    for row in rows:
        assert row["status"] == "ok"
        assert row["scores"] == {"judge_1": 2, "judge_2": 3, "judge_3": None}
        assert row["label"] == 2 and row["label_rule"] == "lowest"
        assert row["text"] == by_id[row["id"]]["text"]
        assert row["group"] == by_id[row["id"]]["group"]
        assert row["reasons"]["judge_3"] is None
    agreement = outcome.summary["agreement"]
    assert agreement["abstain_rate"] == {"judge_1": 0.0, "judge_2": 0.0, "judge_3": 1.0}
    assert agreement["label_distribution"]["2"] == len(rows)
    assert agreement["pairwise_agreement"]["judge_1~judge_2"] == 0.0
    assert agreement["items_all_judges"] == 0 and agreement["fleiss_kappa"] is None
    # The failing judge was re-asked before it abstained (retries: 2 -> 3 attempts).
    assert outcome.summary["counts"]["retries"] >= 2 * len(rows)


def _abstaining_jury(items: int, seed: int, abstain: float) -> list[dict[str, Any]]:
    """Three judges of 0–3 scores, each right 70% of the time and else guessing; the third
    abstains on a share `abstain` of the items."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 4, items)
    scores = np.where(rng.random((3, items)) < 0.7, truth, rng.integers(0, 4, (3, items)))
    gone = rng.random(items) < abstain
    return [
        {
            "label": int(truth[i]),
            "scores": {
                "j1": int(scores[0, i]),
                "j2": int(scores[1, i]),
                "j3": None if gone[i] else int(scores[2, i]),
            },
        }
        for i in range(items)
    ]


def test_kappa_says_how_few_items_it_rests_on_and_alpha_keeps_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One juror abstaining 90% of the time leaves Fleiss' κ on about a tenth of the items:
    the output says so (and the log warns); Krippendorff's α rests on every item two
    judges scored, aims at the same agreement and, over 60 seeded juries, varies far less."""
    kappas, alphas, shares = [], [], []
    for seed in range(60):
        results = _abstaining_jury(150, seed, abstain=0.9)
        with caplog.at_level("WARNING", logger="orchestrator.compute.agreement"):
            out = ag.jury_agreement(results)
        complete = sum(r["scores"]["j3"] is not None for r in results)
        assert out["fleiss_kappa_items"] == out["items_all_judges"] == complete
        assert out["alpha_items"] == 150
        with_gaps = [r["scores"] for r in results]
        assert out["krippendorff_alpha"] == pytest.approx(
            krippendorff_alpha(with_gaps, "nominal"), abs=1e-4
        )
        kappas.append(out["fleiss_kappa"])
        alphas.append(out["krippendorff_alpha"])
        shares.append(complete / 150)
    assert 0.07 < float(np.mean(shares)) < 0.13
    assert "rests on the" in caplog.text
    # Every judge scoring every item: the agreement both should find.
    full = ag.jury_agreement(_abstaining_jury(5000, 99, abstain=0.0))
    assert full["fleiss_kappa_items"] == full["alpha_items"] == 5000
    target = full["fleiss_kappa"]
    assert abs(float(np.mean(alphas)) - target) < 0.03
    assert float(np.std(alphas)) < 0.5 * float(np.std(kappas))


def test_the_report_panel_prints_what_kappa_and_alpha_rest_on() -> None:
    from orchestrator.report.jury_view import _resting

    out = ag.jury_agreement(_abstaining_jury(40, 1, abstain=0.9))
    said = _resting(out)
    assert f"on the {out['fleiss_kappa_items']} items every judge scored" in said
    assert "Krippendorff's α" in said and "on the 40 items two judges or more scored" in said
