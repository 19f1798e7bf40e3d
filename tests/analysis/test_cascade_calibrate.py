"""The certified cascade's thresholds (issue 38): over 1,000 seeded calibrations the share
whose true disagreement among automatically answered examples exceeds R stays within a
binomial allowance of δ, while a rule without the test breaks it; a judge whose confidence
says nothing never answers on its own."""

from __future__ import annotations

import math

import numpy as np

from orchestrator.analysis import cascade_thresholds
from orchestrator.analysis.cascade import answering_stage

RISK, DELTA = 0.1, 0.1
CALIBRATIONS, N = 1000, 400
SLOPES = (0.4, 0.25)  # stage k errs with probability SLOPES[k]·(1 − confidence)
# Three standard errors of a share δ over the calibrations: the Monte-Carlo allowance.
ALLOWANCE = 3 * math.sqrt(DELTA * (1 - DELTA) / CALIBRATIONS)


def draw(seed: int, slopes: tuple[float, ...] = SLOPES) -> tuple[np.ndarray, np.ndarray]:
    """(calibrations, stages, examples) confidences, uniform, and errors."""
    rng = np.random.default_rng(seed)
    conf = rng.random((CALIBRATIONS, len(slopes), N))
    chance = np.asarray(slopes)[None, :, None] * (1 - conf)
    return conf, rng.random(conf.shape) < chance


def true_risk(thresholds: np.ndarray, slopes: tuple[float, ...] = SLOPES) -> np.ndarray:
    """The population disagreement among answered examples of each row of thresholds
    (NaN: the stage never answers), exactly: with uniform confidence, a stage with
    threshold t answers 1 − t of what reaches it and errs on slope·(1 − t)²/2 of it."""
    reach = np.ones(len(thresholds))
    answered = np.zeros(len(thresholds))
    errors = np.zeros(len(thresholds))
    for k, slope in enumerate(slopes):
        t = np.nan_to_num(thresholds[:, k], nan=1.0)
        answered += reach * (1 - t)
        errors += reach * slope * (1 - t) ** 2 / 2
        reach = reach * t
    return np.where(answered > 0, errors / np.maximum(answered, 1e-300), 0.0)


def as_array(chosen: list[list[float | None]]) -> np.ndarray:
    return np.asarray([[np.nan if t is None else t for t in row] for row in chosen])


def naive(conf: np.ndarray, wrong: np.ndarray) -> list[float | None]:
    """The loosest thresholds whose error on the examples reaching each stage is at most R,
    untested: what the guarantee is against."""
    reaching = np.ones(conf.shape[1], dtype=bool)
    chosen: list[float | None] = []
    for k in range(conf.shape[0]):
        order = np.argsort(-conf[k, reaching])
        rate = np.cumsum(wrong[k, reaching][order]) / np.arange(1, reaching.sum() + 1)
        ok = np.nonzero(rate <= RISK)[0]
        if not len(ok):
            chosen.append(None)
            continue
        threshold = float(conf[k, reaching][order][ok[-1]])
        chosen.append(threshold)
        reaching &= conf[k] < threshold
    return chosen


def test_the_disagreement_among_answered_exceeds_r_in_at_most_about_delta_of_calibrations() -> None:
    conf, wrong = draw(seed=38)
    chosen = as_array(
        [cascade_thresholds(c, w, RISK, DELTA) for c, w in zip(conf, wrong, strict=True)]
    )
    risk = true_risk(chosen)
    assert np.mean(risk > RISK) <= DELTA + ALLOWANCE
    # Not vacuous: the cascade answers most examples, both stages take part.
    stages = [answering_stage(c, list(t)) for c, t in zip(conf[:50], chosen[:50], strict=True)]
    assert np.mean([np.mean(s >= 0) for s in stages]) > 0.25
    assert np.mean([np.mean(s == 1) for s in stages]) > 0.1
    # And checkable: thresholds taken without the test break the bound most of the time.
    untested = as_array([naive(c, w) for c, w in zip(conf, wrong, strict=True)])
    assert np.mean(true_risk(untested) > RISK) > 0.3


def test_a_useless_judge_never_answers_on_its_own() -> None:
    conf, _ = draw(seed=7)
    rng = np.random.default_rng(8)
    wrong = rng.random(conf.shape) < np.asarray([0.5, 0.0])[None, :, None]  # stage 0: a coin
    wrong[:, 1] = rng.random((CALIBRATIONS, N)) < 0.25 * (1 - conf[:, 1])
    chosen = [
        cascade_thresholds(c, w, RISK, DELTA) for c, w in zip(conf[:300], wrong[:300], strict=True)
    ]
    assert all(row[0] is None for row in chosen)
    assert sum(row[1] is not None for row in chosen) > 150  # the useful one mostly answers


def test_stages_after_a_sure_one_see_only_what_it_passed_on() -> None:
    conf = np.asarray([[0.99] * 60 + [0.1] * 60, [0.2] * 60 + [0.95] * 60])
    wrong = np.zeros_like(conf, dtype=bool)
    wrong[0, 60:] = True  # stage 0 is wrong where it is unsure
    wrong[1, :60] = True  # stage 1 is wrong exactly where stage 0 answers: it never matters
    small, large = cascade_thresholds(conf, wrong, RISK, DELTA)
    assert small == 0.99 and large == 0.95
    assert list(answering_stage(conf, [small, large])) == [0] * 60 + [1] * 60
