"""Meta-evaluation against labels: correlations equal scipy's, accuracies by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from scipy import stats

from orchestrator.metaeval import LabelError, format_table, meta_eval

PREDICTED = [7, 3, 9, 5, 5, 8, 2, 6]
TRUE = [8, 2, 7, 6, 4, 9, 3, 3]
PROFILE_MEAN = [6.0, 5.0, 6.5, 4.0, 5.5, 7.0, 3.0, 5.0]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def score_run(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        {"id": f"e{i}", "status": "ok", "score": p, "profile_mean": m, "judge": {"score": p + 1}}
        for i, (p, m) in enumerate(zip(PREDICTED, PROFILE_MEAN, strict=True))
    ]
    lines.append({"id": "broken", "status": "failed", "error": "boom"})
    write_jsonl(run / "results.jsonl", lines)
    labels = [{"id": f"e{i}", "score": t} for i, t in enumerate(TRUE)]
    labels.append({"id": "broken", "score": 5})
    return run, write_jsonl(tmp_path / "labels.jsonl", labels)


def test_score_correlations_equal_scipy(score_run: tuple[Path, Path]) -> None:
    run, labels = score_run
    result = meta_eval(run, labels, baseline="profile_mean")
    scores = result["scores"]
    assert scores["n"] == 8 and scores["missing"] == 1 and scores["missing_ids"] == ["broken"]
    for name, fn in (
        ("pearson", stats.pearsonr),
        ("spearman", stats.spearmanr),
        ("kendall", stats.kendalltau),
    ):
        expected = fn(PREDICTED, TRUE)
        assert scores[name]["r"] == pytest.approx(expected.statistic)
        assert scores[name]["p"] == pytest.approx(expected.pvalue)
        base = fn(PROFILE_MEAN, TRUE)
        assert scores["baseline"][name]["r"] == pytest.approx(base.statistic)
    assert scores["mae"] == pytest.approx(
        sum(abs(p - t) for p, t in zip(PREDICTED, TRUE, strict=True)) / 8
    )
    saved = json.loads((run / "meta_eval.json").read_text())
    assert saved["scores"]["kendall"] == scores["kendall"]
    assert result["examples_failed"] == 1


def test_field_option_reaches_nested_outputs(score_run: tuple[Path, Path]) -> None:
    run, labels = score_run
    shifted = meta_eval(run, labels, field="judge.score")["scores"]
    # A constant shift changes the error, not the correlation.
    assert shifted["field"] == "judge.score"
    assert shifted["pearson"]["r"] == pytest.approx(stats.pearsonr(PREDICTED, TRUE).statistic)
    moved = [abs(p + 1 - t) for p, t in zip(PREDICTED, TRUE, strict=True)]
    assert shifted["mae"] == pytest.approx(sum(moved) / 8)


def test_constant_predictions_give_no_correlation(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(
        run / "results.jsonl", [{"id": str(i), "status": "ok", "score": 1} for i in range(4)]
    )
    labels = write_jsonl(tmp_path / "l.jsonl", [{"id": str(i), "score": i} for i in range(4)])
    scores = meta_eval(run, labels)["scores"]
    assert scores["pearson"] == {"r": None, "p": None}
    assert scores["mae"] == pytest.approx((1 + 0 + 1 + 2) / 4)


def test_per_aspect_accuracy_with_ties_and_a_baseline(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(
        run / "results.jsonl",
        [
            {
                "id": "1",
                "status": "ok",
                "choices": {"ending": "A", "surprise": "B"},
                "profile_choices": {"ending": "A", "surprise": "A"},
            },
            {
                "id": "2",
                "status": "ok",
                "choices": {"ending": "tie", "surprise": "a"},
                "profile_choices": {"ending": "B", "surprise": "B"},
            },
        ],
    )
    labels = write_jsonl(
        tmp_path / "l.jsonl",
        [
            {"id": "1", "aspect": "ending", "choice": "A"},
            {"id": "1", "aspect": "surprise", "choice": "A"},
            {"id": "2", "aspect": "ending", "choice": "B"},
            {"id": "2", "aspect": "surprise", "choice": "A"},
            {"id": "3", "aspect": "ending", "choice": "A"},
        ],
    )
    choices = meta_eval(run, labels, baseline="profile_choices")["choices"]
    assert choices["field"] == "choices"
    assert (choices["n"], choices["correct"], choices["ties"]) == (4, 2, 1)
    assert choices["accuracy"] == 0.5 and choices["accuracy_decisive"] == pytest.approx(2 / 3)
    assert choices["per_key"]["ending"]["accuracy"] == 0.5
    assert choices["per_key"]["surprise"]["accuracy"] == 0.5  # "a" matches "A"
    assert choices["macro_accuracy"] == 0.5
    assert choices["missing"] == 1 and choices["missing_ids"] == ["3"]
    assert choices["baseline"]["accuracy"] == 0.75


def test_pairwise_agreement_picks_the_labelled_pair_and_dimension(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()

    def outcome(pair: str, dimension: str, winner: str) -> dict[str, Any]:
        a, b = pair.split("|")
        return {"pair": pair, "a": a, "b": b, "dimension": dimension, "winner": winner}

    write_jsonl(
        run / "results.jsonl",
        [
            {
                "id": "c1",
                "status": "ok",
                "outcomes": [
                    outcome("big|user", "personalization", "user"),
                    outcome("small|user", "personalization", "small"),
                    outcome("big|user", "quality", "big"),
                ],
            },
        ],
    )
    labels = write_jsonl(
        tmp_path / "l.jsonl",
        [
            {"id": "c1", "dimension": "personalization", "pair": "user|big", "winner": "user"},
            {
                "id": "c1",
                "dimension": "personalization",
                "a": "small",
                "b": "user",
                "winner": "user",
            },
            {"id": "c1", "dimension": "quality", "pair": "big|user", "winner": "big"},
            {"id": "c1", "dimension": "personalization", "winner": "user"},  # ambiguous
        ],
    )
    choices = meta_eval(run, labels)["choices"]
    assert choices["field"] == "outcomes"
    assert (choices["n"], choices["correct"]) == (3, 2)
    assert choices["per_key"]["personalization"]["accuracy"] == 0.5
    assert choices["per_pair"]["big|user"]["accuracy"] == 1.0
    assert choices["per_pair"]["small|user"]["accuracy"] == 0.0
    assert choices["missing"] == 1


def test_format_table_shows_each_measure(score_run: tuple[Path, Path]) -> None:
    run, labels = score_run
    table = format_table(meta_eval(run, labels, baseline="profile_mean"))
    assert isinstance(table, Table)
    console = Console(record=True, width=140)
    console.print(table)
    text = console.export_text()
    expected = stats.kendalltau(PREDICTED, TRUE).statistic
    assert f"{expected:.3f}" in text and "profile_mean" in text and "spearman" in text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not valid JSON"),
        (json.dumps({"score": 3}), "'id'"),
        (json.dumps({"id": "x", "label": 3}), "'score', 'choice' or 'winner'"),
    ],
)
def test_bad_labels_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "results.jsonl", [{"id": "x", "status": "ok", "score": 1}])
    labels = tmp_path / "l.jsonl"
    labels.write_text(json.dumps({"id": "x", "score": 1}) + "\n" + line + "\n")
    with pytest.raises(LabelError, match=f"l.jsonl:2: .*{message}"):
        meta_eval(run, labels)
