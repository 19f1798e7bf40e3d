"""Calibration for abstention: Learn then Test's guarantee in simulation, and reading
confidences from a run's trace (its binomial p-value: tests/stats/test_intervals.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from scipy.stats import binom

from orchestrator.analysis.calibrate import calibrate, select_threshold
from orchestrator.errors import CalibrationError
from orchestrator.store.records import NodeRun
from orchestrator.store.trace import TraceStore

RISK, DELTA = 0.1, 0.1


def _judges(rng: np.random.Generator, shape: tuple[int, ...], informative: bool):
    """Confidences and errors of a simulated judge: wrong more often when less confident."""
    conf = rng.uniform(size=shape)
    p_wrong = 0.45 * (1.0 - conf) ** 2 if informative else np.full(shape, 0.3)
    return conf, rng.uniform(size=shape) < p_wrong


def test_risk_among_answered_exceeds_the_target_in_at_most_about_delta_of_calibrations() -> None:
    rng = np.random.default_rng(29)
    calibrations, n = 1000, 300
    conf, wrong = _judges(rng, (calibrations, n), informative=True)
    thresholds = select_threshold(conf, wrong, RISK, DELTA)
    assert np.isfinite(thresholds).mean() > 0.9  # an informative judge mostly gets one
    # True risk above t, from a large fresh sample of the same judge.
    fresh_conf, fresh_wrong = _judges(rng, (200_000,), informative=True)
    order = np.argsort(-fresh_conf)
    cum_err = np.cumsum(fresh_wrong[order])
    sorted_conf = fresh_conf[order]
    kept = np.isfinite(thresholds)
    answered = np.searchsorted(-sorted_conf, -thresholds[kept], side="right")
    true_risk = cum_err[answered - 1] / answered
    violations = int((true_risk > RISK).sum())
    # At most δ of all calibrations, within a one-sided binomial allowance (α = 0.001).
    assert violations <= binom.ppf(0.999, calibrations, DELTA), violations
    # Not trivially safe: the chosen thresholds answer a good share.
    assert answered.mean() / fresh_conf.size > 0.3


def test_a_judge_whose_confidence_says_nothing_gets_no_threshold() -> None:
    rng = np.random.default_rng(7)
    conf, wrong = _judges(rng, (200, 300), informative=False)  # 30% wrong at any confidence
    thresholds = select_threshold(conf, wrong, RISK, DELTA)
    assert np.isnan(thresholds).mean() > 0.9


def test_tied_confidences_are_answered_together() -> None:
    conf = np.array([0.9] * 40 + [0.5] * 40)
    wrong = np.array([False] * 40 + [True] * 40)
    assert select_threshold(conf, wrong, RISK, DELTA)[0] == 0.9


# -- from a run folder ---------------------------------------------------------------------


def _run(folder: Path, values: dict[str, object], answers: dict[str, object]) -> Path:
    folder.mkdir()
    lines = [{"id": k, "status": "ok", "score": v} for k, v in answers.items()]
    (folder / "results.jsonl").write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    trace = TraceStore(folder / "traces.sqlite", "run-1", "gh", "key")
    for example, value in values.items():
        trace.record(NodeRun(example_id=example, node="judge", value=value))
    trace.close()
    return folder


def _labels(path: Path, scores: dict[str, int]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps({"id": k, "score": v}) for k, v in scores.items()))
    return path


def _with_logprob(score: int, p: float) -> dict[str, object]:
    tokens = [
        {"token": '{"score": ', "logprob": 0.0},
        {"token": str(score), "logprob": math.log(p)},
    ]
    return {"score": score, "_logprobs": [*tokens, {"token": "}", "logprob": 0.0}]}


def test_a_run_with_logprobs_is_calibrated(tmp_path: Path) -> None:
    ids = [f"e{i}" for i in range(120)]
    # Confident and right on 100, unsure and wrong on 20.
    values = {k: _with_logprob(4, 0.95 if i < 100 else 0.4) for i, k in enumerate(ids)}
    answers = {k: 4 for k in ids}
    truth = {k: 4 if i < 100 else 1 for i, k in enumerate(ids)}
    run = _run(tmp_path / "run", values, answers)
    labels = _labels(tmp_path / "l.jsonl", truth)
    found = calibrate(run, labels, node="judge", field="score", risk=0.1, delta=0.1)
    assert found.source == "logprobs"
    assert found.threshold == pytest.approx(0.95)
    assert found.coverage == pytest.approx(100 / 120)
    assert found.risk == 0.0 and found.n == 120


def test_samples_agreement_and_tolerance(tmp_path: Path) -> None:
    ids = [f"e{i}" for i in range(120)]
    agree = [{"score": 4}] * 5
    split = [{"score": 4}, {"score": 1}, {"score": 2}, {"score": 5}, {"score": 4}]
    values = {k: agree if i < 100 else split for i, k in enumerate(ids)}
    truth = {k: 5 if i < 100 else 1 for i, k in enumerate(ids)}  # off by one on the first 100
    run = _run(tmp_path / "run", values, {k: 4 for k in ids})
    labels = _labels(tmp_path / "l.jsonl", truth)
    strict = calibrate(run, labels, node="judge", field="score", risk=0.1)
    assert strict.threshold is None and strict.coverage == 0.0 and strict.message
    lenient = calibrate(run, labels, node="judge", field="score", risk=0.1, tolerance=1)
    assert lenient.source == "samples" and lenient.threshold == 1.0


def test_a_run_without_logprobs_or_samples_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", {"e1": {"score": 4}}, {"e1": 4})
    with pytest.raises(CalibrationError, match=r"logprobs: .*n: "):
        labels = _labels(tmp_path / "l.jsonl", {"e1": 4})
        calibrate(run, labels, node="judge", field="score", risk=0.1)


def test_several_annotators_count_once_by_their_consensus(tmp_path: Path) -> None:
    ids = [f"e{i}" for i in range(60)]
    values = {k: _with_logprob(4, 0.9) for k in ids}
    run = _run(tmp_path / "run", values, {k: 4 for k in ids})
    labels = tmp_path / "l.jsonl"
    # Three people per example: one consensus label each, not three labels.
    lines = [{"id": k, "labels": [{"score": 4}, {"score": 4}, {"score": 4}]} for k in ids]
    labels.write_bytes(b"\n".join(orjson.dumps(x) for x in lines))
    found = calibrate(run, labels, node="judge", field="score", risk=0.1)
    assert found.n == 60 and found.errors == 0
