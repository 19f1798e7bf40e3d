"""Meta-evaluation against labels: correlations equal scipy's, accuracies by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest
from rich.console import Console
from scipy import stats
from typer.testing import CliRunner

from orchestrator.analysis.metaeval import LabelError, meta_eval, meta_eval_table
from orchestrator.cli import app
from orchestrator.ui.tables import rich_table

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


def test_the_table_shows_each_measure(score_run: tuple[Path, Path]) -> None:
    run, labels = score_run
    table = meta_eval_table(meta_eval(run, labels, baseline="profile_mean"))
    kendall = next(row for row in table.rows if row[1] == "kendall")
    assert kendall[4] == str(len(PREDICTED)) and "(profile_mean)" in kendall[3]
    console = Console(record=True, width=140)
    console.print(rich_table(table))
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


@pytest.mark.parametrize("score", ["NaN", "Infinity", [1, 2], True, "high", {"value": 3}], ids=repr)
@pytest.mark.parametrize("listed", [False, True], ids=["line", "labels-list"])
def test_a_score_that_is_not_a_finite_number_is_refused_by_every_reader(
    tmp_path: Path, score: Any, listed: bool
) -> None:
    """Issue 35 item 10: meta-eval, calibrate and align read labels through one reader,
    which refuses a score label that is NaN, infinite, a list or true/false, naming the
    line."""
    from orchestrator.analysis.align.labels import read_truth
    from orchestrator.analysis.calibrate import calibrate

    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "results.jsonl", [{"id": "x", "status": "ok", "score": 1}])
    bad = {"id": "y", "labels": [{"annotator": "a", "score": score}]} if listed else None
    bad = bad or {"id": "y", "score": score}
    labels = tmp_path / "l.jsonl"
    labels.write_text(json.dumps({"id": "x", "score": 1}) + "\n" + json.dumps(bad) + "\n")
    where = r"l\.jsonl:2: " + (r"labels\[1\]: " if listed else "")
    said = f"{where}'score' must be a finite number"
    with pytest.raises(LabelError, match=said):
        meta_eval(run, labels)
    with pytest.raises(LabelError, match=said):
        calibrate(run, labels, node="judge", field="score", risk=0.1)
    with pytest.raises(LabelError, match=said):
        read_truth(labels, "score")


def test_a_score_written_as_a_numeric_string_is_read_as_its_number(tmp_path: Path) -> None:
    from orchestrator.analysis.metaeval import read_labels

    labels = tmp_path / "l.jsonl"
    labels.write_text(json.dumps({"id": "x", "score": " 7 "}) + "\n")
    assert read_labels(labels) == [{"id": "x", "score": 7.0}]


# -- bootstrap intervals, Krippendorff's alpha, several annotators -----------------------

RESAMPLES = 500


def score_files(
    tmp_path: Path, predicted: list[float], labels: list[dict[str, Any]]
) -> tuple[Path, Path]:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    rows = [{"id": f"e{i}", "status": "ok", "score": p} for i, p in enumerate(predicted)]
    write_jsonl(run / "results.jsonl", rows)
    return run, write_jsonl(tmp_path / "labels.jsonl", labels)


def noisy_pair(n: int = 20, seed: int = 1) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 11, size=n)
    return [float(v) for v in truth + rng.integers(-3, 4, size=n)], [float(v) for v in truth]


def scipy_ci(data: tuple[Any, ...], statistic: Any, seed: int = 0) -> list[float]:
    found = stats.bootstrap(
        data,
        statistic,
        paired=True,
        vectorized=False,
        method="percentile",
        n_resamples=RESAMPLES,
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return [found.low, found.high]


def test_score_intervals_equal_scipy_bootstrap_on_the_same_resamples(tmp_path: Path) -> None:
    predicted, truth = noisy_pair()
    run, labels = score_files(
        tmp_path, predicted, [{"id": f"e{i}", "score": t} for i, t in enumerate(truth)]
    )
    result = meta_eval(run, labels, resamples=RESAMPLES, seed=7)
    scores = result["scores"]
    assert result["bootstrap"] == {
        "method": "percentile",
        "unit": "example",
        "resamples": RESAMPLES,
        "seed": 7,
        "confidence": 0.95,
    }
    data = (np.asarray(predicted), np.asarray(truth))
    for name, fn in (
        ("pearson", stats.pearsonr),
        ("spearman", stats.spearmanr),
        ("kendall", stats.kendalltau),
    ):
        expected = scipy_ci(data, lambda x, y, fn=fn: fn(x, y).statistic, seed=7)
        assert scores[f"{name}_ci"] == pytest.approx(expected, abs=1e-12)
        low, high = scores[f"{name}_ci"]
        assert low < scores[name]["r"] < high
    mae_ci = scipy_ci(data, lambda x, y: np.abs(x - y).mean(), seed=7)
    assert scores["mae_ci"] == pytest.approx(mae_ci, abs=1e-12)
    # α against the krippendorff package, point estimate and interval.
    reference = krippendorff.alpha(
        reliability_data=[predicted, truth], level_of_measurement="interval"
    )
    assert scores["alpha_level"] == "interval"
    assert scores["alpha"] == pytest.approx(reference)
    alpha_ci = scipy_ci(
        data,
        lambda x, y: krippendorff.alpha(reliability_data=[x, y], level_of_measurement="interval"),
        seed=7,
    )
    assert scores["alpha_ci"] == pytest.approx(alpha_ci, abs=1e-9)
    again = meta_eval(run, labels, resamples=RESAMPLES, seed=7)["scores"]
    other = meta_eval(run, labels, resamples=RESAMPLES, seed=8)["scores"]
    assert again["pearson_ci"] == scores["pearson_ci"] != other["pearson_ci"]


def test_level_option_picks_the_alpha_distance(tmp_path: Path) -> None:
    predicted, truth = noisy_pair()
    run, labels = score_files(
        tmp_path, predicted, [{"id": f"e{i}", "score": t} for i, t in enumerate(truth)]
    )
    scores = meta_eval(run, labels, level="ordinal", resamples=50)["scores"]
    reference = krippendorff.alpha(
        reliability_data=[predicted, truth], level_of_measurement="ordinal"
    )
    assert scores["alpha_level"] == "ordinal"
    assert scores["alpha"] == pytest.approx(reference)
    with pytest.raises(ValueError, match="level must be one of"):
        meta_eval(run, labels, level="cardinal")


def test_accuracy_interval_equals_scipy_and_alpha_is_nominal(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    truth = rng.choice(["A", "B", "tie"], size=30)
    flip = rng.random(30) < 0.3
    predicted = np.where(flip, rng.choice(["A", "B"], size=30), truth)
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"id": str(i), "status": "ok", "choice": str(p)} for i, p in enumerate(predicted)]
    write_jsonl(run / "results.jsonl", rows)
    labels = write_jsonl(
        tmp_path / "l.jsonl", [{"id": str(i), "choice": str(t)} for i, t in enumerate(truth)]
    )
    choices = meta_eval(run, labels, resamples=RESAMPLES)["choices"]
    correct = (predicted == truth).astype(float)
    expected = scipy_ci((correct,), lambda c: c.mean())
    assert choices["accuracy"] == pytest.approx(correct.mean())
    assert choices["accuracy_ci"] == pytest.approx(expected, abs=1e-12)
    codes = {"a": 0.0, "b": 1.0, "tie": 2.0}
    coded = [[codes[str(v).casefold()] for v in series] for series in (predicted, truth)]
    reference = krippendorff.alpha(reliability_data=coded, level_of_measurement="nominal")
    assert choices["alpha_level"] == "nominal"
    assert choices["alpha"] == pytest.approx(reference)
    assert choices["humans"]["reason"].startswith("one human label per example")


def test_per_key_intervals_resample_whole_examples(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows, labels = [], []
    for i in range(12):
        rows.append(
            {"id": str(i), "status": "ok", "choices": {"x": "A", "y": "A" if i % 3 else "B"}}
        )
        labels += [{"id": str(i), "aspect": "x", "choice": "A" if i % 4 else "B"}]
        labels += [{"id": str(i), "aspect": "y", "choice": "A"}]
    write_jsonl(run / "results.jsonl", rows)
    choices = meta_eval(run, write_jsonl(tmp_path / "l.jsonl", labels), resamples=300)["choices"]
    for key in ("x", "y"):
        tally = choices["per_key"][key]
        low, high = tally["accuracy_ci"]
        assert 0.0 <= low <= tally["accuracy"] <= high <= 1.0 and low < high
    low, high = choices["macro_accuracy_ci"]
    assert low <= choices["macro_accuracy"] <= high
    assert choices["accuracy_decisive_ci"] == choices["accuracy_ci"]  # no tie predicted


def annotated_labels(
    truth: list[float], extra: dict[str, list[float]], as_list: bool = False
) -> list[dict[str, Any]]:
    """Two annotators who both give the truth, plus any `extra` annotators."""
    raters = {"ann": truth, "bob": truth, **extra}
    if as_list:
        return [
            {"id": f"e{i}", "labels": [{"annotator": a, "score": v[i]} for a, v in raters.items()]}
            for i in range(len(truth))
        ]
    return [
        {"id": f"e{i}", "annotator": a, "score": v[i]}
        for a, v in raters.items()
        for i in range(len(truth))
    ]


def test_agreeing_annotators_give_a_ceiling_of_one(tmp_path: Path) -> None:
    predicted, truth = noisy_pair()
    run, labels = score_files(tmp_path, predicted, annotated_labels(truth, {}))
    scores = meta_eval(run, labels, resamples=200)["scores"]
    humans = scores["humans"]
    assert humans["annotators"] == ["ann", "bob"] and humans["units"] == 20
    assert humans["alpha_all_humans"] == pytest.approx(1.0)
    assert humans["human_human"]["alpha"] == pytest.approx(1.0)
    assert humans["human_human"]["pearson_ci"] == pytest.approx([1.0, 1.0])
    # Both humans give the truth, so the consensus and each human are the truth.
    single = meta_eval(
        run,
        write_jsonl(
            tmp_path / "one.jsonl", [{"id": f"e{i}", "score": t} for i, t in enumerate(truth)]
        ),
        resamples=200,
    )["scores"]
    assert scores["consensus"] == "mean" and scores["labels"] == 40 and scores["n"] == 20
    assert scores["pearson"] == single["pearson"]
    assert humans["judge_consensus"]["alpha"] == pytest.approx(single["alpha"])
    assert humans["judge_human"]["alpha"] == pytest.approx(single["alpha"])
    assert humans["verdicts"]["alpha"] == "below"
    assert "below the human–human range [1.000, 1.000]" in humans["verdict"]


def test_a_random_annotator_lowers_the_ceiling(tmp_path: Path) -> None:
    predicted, truth = noisy_pair()
    noise = [float(v) for v in np.random.default_rng(5).integers(1, 11, size=len(truth))]
    run, labels = score_files(
        tmp_path, predicted, annotated_labels(truth, {"cat": noise}, as_list=True)
    )
    humans = meta_eval(run, labels, resamples=200)["scores"]["humans"]
    reference = krippendorff.alpha(
        reliability_data=[truth, truth, noise], level_of_measurement="interval"
    )
    assert humans["annotators"] == ["ann", "bob", "cat"]
    assert humans["alpha_all_humans"] == pytest.approx(reference)
    assert humans["alpha_all_humans"] < 0.9
    pairs = [1.0, stats.pearsonr(truth, noise).statistic, stats.pearsonr(truth, noise).statistic]
    assert humans["human_human"]["pearson"] == pytest.approx(sum(pairs) / 3)
    low, high = humans["human_human"]["alpha_ci"]
    assert low <= humans["human_human"]["alpha"] <= high < 1.0


def test_a_judge_as_good_as_the_humans_is_within_the_range(tmp_path: Path) -> None:
    _, truth = noisy_pair()
    run, labels = score_files(tmp_path, truth, annotated_labels(truth, {}))
    result = meta_eval(run, labels, resamples=100)
    humans = result["scores"]["humans"]
    assert set(humans["verdicts"].values()) == {"within"}
    assert "within the human–human range" in humans["verdict"]
    console = Console(record=True, width=200)
    console.print(rich_table(meta_eval_table(result)))
    text = console.export_text()
    assert "alpha: human–human" in text and "1.000 [1.000, 1.000]" in text
    assert "within the human–human range" in text


def test_choice_annotators_vote_and_ties_are_counted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    judge = ["A", "B", "A", "B", "A", "A"]
    rows = [{"id": str(i), "status": "ok", "choice": c} for i, c in enumerate(judge)]
    write_jsonl(run / "results.jsonl", rows)
    votes = {"x": "AABBAB", "y": "ABBBBA", "z": "AAABA"}  # z skips the last example
    labels = [
        {"id": str(i), "annotator": name, "choice": v}
        for name, given in votes.items()
        for i, v in enumerate(given)
    ]
    labels += [
        {"id": "6", "annotator": "x", "choice": "A"},
        {"id": "6", "annotator": "y", "choice": "B"},
    ]
    choices = meta_eval(run, write_jsonl(tmp_path / "l.jsonl", labels), resamples=100)["choices"]
    # Majorities: A, A, B, B, A, and example 5 is A vs B → no majority; 6 ties too.
    assert choices["consensus"] == "majority" and choices["no_majority"] == 2
    assert (choices["n"], choices["correct"]) == (5, 3)
    humans = choices["humans"]
    agree = {("x", "y"): 3 / 6, ("x", "z"): 4 / 5, ("y", "z"): 2 / 5}  # on examples 0–5
    assert humans["human_human"]["agreement"] == pytest.approx(sum(agree.values()) / 3)
    assert humans["units"] == 6  # example 6 has no result


def test_single_annotator_files_report_no_ceiling(score_run: tuple[Path, Path]) -> None:
    run, labels = score_run
    result = meta_eval(run, labels, resamples=50)
    assert result["scores"]["humans"] == {
        "reason": "one human label per example: no human–human agreement to compare the run with"
    }
    console = Console(record=True, width=200)
    console.print(rich_table(meta_eval_table(result)))
    text = console.export_text()
    assert "one human label per example" in text
    kendall = result["scores"]["kendall"]["r"]
    low, high = result["scores"]["kendall_ci"]
    assert f"{kendall:.3f} [{low:.3f}, {high:.3f}]" in text


def test_a_labels_list_needs_scores(tmp_path: Path) -> None:
    run, labels = score_files(tmp_path, [1.0], [{"id": "e0", "labels": [{"annotator": "a"}]}])
    with pytest.raises(LabelError, match=r"labels\.jsonl:1: labels\[1\] needs 'score'"):
        meta_eval(run, labels)


def test_cli_passes_resamples_seed_and_level(tmp_path: Path) -> None:
    predicted, truth = noisy_pair()
    run, labels = score_files(
        tmp_path, predicted, [{"id": f"e{i}", "score": t} for i, t in enumerate(truth)]
    )
    args = ["meta-eval", str(run), "--labels", str(labels), "--resamples", "60", "--seed", "4"]
    done = CliRunner().invoke(app, [*args, "--level", "ordinal"])
    assert done.exit_code == 0, done.output
    saved = json.loads((run / "meta_eval.json").read_text())
    assert saved["bootstrap"]["resamples"] == 60 and saved["bootstrap"]["seed"] == 4
    assert saved["scores"]["alpha_level"] == "ordinal"
    refused = CliRunner().invoke(app, [*args, "--level", "cardinal"])
    assert refused.exit_code != 0 and "level must be one of" in refused.output
