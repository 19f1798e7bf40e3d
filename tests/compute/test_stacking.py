"""Stacked (lr:NAME) style ensembles: the logistic fit, ensemble_votes, the held-out report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from orchestrator.compute import stacking as st
from orchestrator.compute import votes as v
from orchestrator.stats import fit_logistic


def _noisy_rows(n: int, seed: int = 7) -> list[dict]:
    """One member right 95% of the time, three right 55% of the time, independently."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        positive = rng.choice("ab")
        truth = 1 if positive == "a" else -1
        votes = {"sharp": truth if rng.random() < 0.95 else -truth}
        for name in ("n1", "n2", "n3"):
            votes[name] = truth if rng.random() < 0.55 else -truth
        rows.append({"id": f"r{i}", "positive": positive, "votes": votes})
    return rows


SET = {"all": ["sharp", "n1", "n2", "n3"]}


def test_fit_matches_scikit_learn_with_the_same_regularisation() -> None:
    linear_model = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(0)
    for l2 in (0.1, 1.0, 5.0):
        x = np.concatenate(
            [rng.choice([-1.0, 0.0, 1.0], size=(80, 4)), rng.normal(size=(80, 2))], 1
        )
        y = np.where(
            x @ np.array([2.0, 0.3, -0.5, 0.0, 1.0, 0.2]) + rng.normal(size=80) > 0, 1.0, -1.0
        )
        ours, converged = fit_logistic(x, y, l2)
        ref = linear_model.LogisticRegression(
            C=1.0 / l2, fit_intercept=False, tol=1e-12, max_iter=10_000
        ).fit(x, y)
        assert converged
        assert np.allclose(ours, ref.coef_[0], atol=1e-4)
    separable = np.array([[1.0], [-1.0], [1.0]])
    w, converged = fit_logistic(separable, np.array([1.0, -1.0, 1.0]), 1.0)
    assert converged and np.isfinite(w).all() and w[0] > 0  # the penalty keeps it finite
    with pytest.raises(ValueError, match="l2 must be > 0"):
        fit_logistic(separable, np.array([1.0, -1.0, 1.0]), 0.0)


def test_stacking_recovers_the_reliable_member_where_the_majority_is_outvoted() -> None:
    rows, _ = st.truth_rows(_noisy_rows(400))
    fit, test = rows[:200], rows[200:]
    weights = st.fit_set(fit, SET["all"], l2=1.0)["weights"]
    noisy = sum(abs(weights[m]) for m in ("n1", "n2", "n3"))
    assert weights["sharp"] > noisy  # one reliable vote outweighs all three noisy ones
    split = st.score_split(fit, test, SET["all"], l2=1.0)
    acc = split["accuracy"]
    assert split["best_single"] == "sharp"
    # Equal weights would be the majority vote; stacking must follow the reliable member.
    assert acc["lr"] == pytest.approx(acc["best_single"])
    assert acc["lr"] > acc["mv"] + 0.15
    # Rows where the three noisy members all agree against the reliable one: MV is outvoted.
    outvoted = [(p, vs) for p, vs in test if all(vs[m] == -vs["sharp"] for m in ("n1", "n2", "n3"))]
    assert outvoted
    for _, vs in outvoted:
        assert v.majority_vote(vs, SET["all"]) == -vs["sharp"]
        assert v.weighted_vote(vs, SET["all"], weights) == vs["sharp"]


def test_style_stacking_is_deterministic_for_a_seed() -> None:
    results = _noisy_rows(60)
    one = st.style_stacking(results, SET, splits=30, seed=3)
    assert one == st.style_stacking(results, SET, splits=30, seed=3)
    other = st.style_stacking(results, SET, splits=30, seed=4)
    assert one["fit"] == other["fit"]  # the full fit does not depend on the split seed
    assert one["heldout"]["sets"]["all"]["splits"] != other["heldout"]["sets"]["all"]["splits"]
    assert one["fit"]["ids"] == [f"r{i}" for i in range(60)]


def test_heldout_counts_on_constructed_votes() -> None:
    # `good` is always right and `bad` always wrong: MV always ties (wrong), PWV follows
    # `good`, and stacking gives `bad` a negative weight, so it is always right too.
    rows = [(p, {"good": 1 if p == "a" else -1, "bad": -1 if p == "a" else 1}) for p in "abbaab"]
    report = st.heldout_report(rows, {"s": ["good", "bad"]}, splits=12, seed=0)
    s = report["sets"]["s"]
    assert (report["fit_rows"], report["test_rows"]) == (3, 3)
    assert s["best_single_picked"] == {"good": 12}
    assert s["mean"] == {"best_single": 1.0, "mv": 0.0, "pwv": 1.0, "lr": 1.0}
    vs = s["versus_best_single"]
    assert (vs["mv"]["wins"], vs["mv"]["ties"], vs["mv"]["losses"]) == (0, 0, 12)
    assert (vs["pwv"]["ties"], vs["lr"]["ties"]) == (12, 12)
    assert not any(vs[n]["beats_best_single"] for n in ("mv", "pwv", "lr"))
    assert s["verdict"].startswith("no ensemble beats")

    # Three members each wrong on a different pair of rows: the majority is always right,
    # a single member only when both its errors fall in the fit half.
    wrong = {"x": {0, 1}, "y": {2, 3}, "z": {4, 5}}
    rows = []
    for i, p in enumerate("ababab"):
        truth = 1 if p == "a" else -1
        rows.append((p, {m: -truth if i in errs else truth for m, errs in wrong.items()}))
    report = st.heldout_report(rows, {"s": ["x", "y", "z"]}, splits=40, seed=1)
    s = report["sets"]["s"]
    perfect = sum(split["accuracy"]["best_single"] == 1.0 for split in s["splits"])
    mv = s["versus_best_single"]["mv"]
    assert all(split["accuracy"]["mv"] == 1.0 for split in s["splits"])
    assert (mv["wins"], mv["ties"], mv["losses"]) == (40 - perfect, perfect, 0)
    assert mv["share_wins"] == pytest.approx((40 - perfect) / 40)
    assert mv["beats_best_single"] is True and "mv" in s["verdict"]


def _summary(tmp_path: Path, results: list[dict], **extra: object) -> str:
    path = tmp_path / "summary.json"
    body = {"stacking": st.style_stacking(results, SET, splits=5), **extra}
    path.write_text(json.dumps(body))
    return str(path)


def test_lr_votes_from_a_calibration_summary_and_never_on_its_own_rows(tmp_path: Path) -> None:
    path = _summary(tmp_path, _noisy_rows(100))
    against = {"sharp": 1, "n1": -1, "n2": -1, "n3": -1}
    new = v.ensemble_votes(against, SET, path, example_id="fresh")
    assert new["votes"]["lr:all"] == 1 and new["votes"]["mv:all"] == -1
    assert new["calibration"]["stacking"]["available"] is True
    assert set(new["calibration"]["stacking"]["weights"]["all"]) == set(SET["all"])
    assert new["votes"]["pwv:all"] is None  # the file has no accuracy table
    seen = v.ensemble_votes(against, SET, path, example_id="r5")
    assert seen["votes"]["lr:all"] is None
    assert seen["calibration"]["stacking"]["reason"] == "this row is in the calibration split"
    other = v.ensemble_votes(against, {"pair": ["n1", "n2"]}, path, example_id="fresh")
    assert other["votes"]["lr:pair"] is None
    assert "no stacking fit" in other["calibration"]["stacking"]["missing_sets"]["pair"]


def test_lr_is_null_with_a_reason_without_a_fit(tmp_path: Path) -> None:
    none = v.ensemble_votes({"sharp": 1}, SET)
    assert none["votes"]["lr:all"] is None
    assert none["calibration"]["stacking"]["reason"] == "no calibration summary.json given"
    failed = tmp_path / "failed.json"
    failed.write_text(
        json.dumps(
            {
                "accuracy": {"meta_eval": {"accuracy": {"sharp": 0.9}, "ids": []}},
                "stacking": {"failed": True, "error": "boom"},
            }
        )
    )
    out = v.ensemble_votes({"sharp": 1}, SET, str(failed), example_id="x")
    assert out["votes"]["lr:all"] is None and out["votes"]["pwv:all"] == 1
    assert "stacking aggregate failed: boom" in out["calibration"]["stacking"]["reason"]
    rows = [
        {
            "positive": p,
            "votes": {"sharp": 1},
            "ensembles": out["votes"],
            "calibration": out["calibration"],
        }
        for p in "ab"
    ]
    report = v.style_accuracy(rows)
    assert report["ensembles"]["lr:all"]["available"] is False
    assert "stacking aggregate failed" in report["ensembles"]["lr:all"]["reason"]
