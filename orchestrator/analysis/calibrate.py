"""Abstention with a risk guarantee: a confidence threshold picked on labelled examples.

Learn then Test (Angelopoulos, Bates, Candès, Jordan, Lei, 2021): each candidate threshold
t is a null hypothesis "the error rate among examples with confidence ≥ t exceeds R",
tested with the exact binomial tail p = P(Binomial(n_t, R) ≤ errors_t), `stats.binomial_tail`.
Fixed-sequence testing walks the candidates from the most confident down and stops at the
first that it cannot reject at level δ; since the order is fixed before the data are seen,
the chance of keeping any threshold whose true risk exceeds R is at most δ (no
monotonicity needed).

Confidence per example is `compute.confidence.judged`, what an `abstain:` key applies at run
time: the probability of the token where the judge wrote its answer (when the node asked for
`logprobs:`) or the share of the node's n samples that agree with their most common value
(when it asked for `n:` > 1). Whether an answer is wrong is judged on the run's result field,
which may differ from that majority (a median of the samples): the threshold is picked on
the confidence the run will apply and bounds the error of the answer the run reports.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..compute import ASK_FOR_CONFIDENCE, judged, wrong_answer
from ..errors import CalibrationError, LabelError
from ..stats import binomial_tail, fixed_sequence, least_answered
from ..store import RunReader, TraceReader
from .metaeval import annotated, judge_value, label_truth, read_labels
from .metaeval_stats import Bootstrap

__all__ = ["Calibration", "calibrate", "select_threshold"]
log = logging.getLogger(__name__)

NO_CONFIDENCE = (
    "node '{node}' recorded neither token logprobs nor several samples, so there is no "
    "confidence to threshold: rerun with " + ASK_FOR_CONFIDENCE
)
UNMET = "no threshold keeps the error among answered examples at most {risk:g} with "
UNMET += "probability {level:g}: abstain on everything (more labels or a better judge help)"


class Calibration(BaseModel):
    """A chosen confidence threshold, what it answers and how often it errs there."""

    threshold: float | None
    coverage: float  # share of labelled examples with confidence ≥ threshold
    risk: float | None  # empirical error rate among them; None when nothing is answered
    n: int  # labelled examples with an answer and a confidence
    answered: int
    errors: int  # among the answered
    target_risk: float
    delta: float
    tolerance: float
    source: str  # "logprobs" or "samples": where the confidence came from
    method: str = "Learn then Test, fixed-sequence, exact binomial tail"
    message: str | None = None


def select_threshold(
    confidence: np.ndarray, wrong: np.ndarray, risk: float, delta: float
) -> np.ndarray:
    """Learn then Test over rows: each row's chosen threshold, NaN when none is kept.

    `confidence` and `wrong` are (calibrations, examples) arrays (or one row); candidate
    thresholds are the distinct confidences, tested from the highest down, starting at the
    first that answers enough examples to be testable at all.
    """
    conf = np.atleast_2d(np.asarray(confidence, dtype=float))
    bad = np.atleast_2d(np.asarray(wrong, dtype=float))
    order = np.argsort(-conf, axis=1, kind="stable")
    conf_sorted = np.take_along_axis(conf, order, axis=1)
    errors = np.cumsum(np.take_along_axis(bad, order, axis=1), axis=1)
    answered = np.arange(1, conf.shape[1] + 1)[None, :]
    # A threshold sits at the last of a run of equal confidences: ties are answered together.
    last = np.ones_like(conf_sorted, dtype=bool)
    last[:, :-1] = conf_sorted[:, :-1] != conf_sorted[:, 1:]
    # Fewer answers than this cannot reject even with no error, (1 − R)^n > δ: such
    # thresholds leave the sequence before any error is looked at (else the first, with one
    # answer, would always stop it).
    last &= answered >= least_answered(risk, delta)
    index = fixed_sequence(binomial_tail(errors, answered, risk), last, delta)
    chosen = conf_sorted[np.arange(conf.shape[0]), np.maximum(index, 0)]
    return np.where(index >= 0, chosen, np.nan)


def check_bounds(risk: float, delta: float, tolerance: float) -> None:
    """ValueError unless risk and delta are in (0, 1) and tolerance a finite number ≥ 0."""
    if not 0.0 < risk < 1.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"risk and delta must be between 0 and 1, got {risk!r}, {delta!r}")
    # NaN compares false with every distance (no answer is ever wrong), infinity the same
    # way by agreement: either would promise a threshold the labels never tested.
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ValueError(f"tolerance must be a finite number of 0 or more, got {tolerance!r}")


def consensus_labels(
    rows: dict[str, dict[str, Any]], items: list[dict[str, Any]], field: str
) -> list[dict[str, Any]]:
    """One label per example: several people's become their consensus, as meta-eval merges
    them (its bootstrap of the human ceiling is not used here, so a few resamples do)."""
    merged: list[dict[str, Any]] = []
    for kind, level in (("score", "interval"), ("choice", "nominal")):
        some = [x for x in items if ("score" in x) == (kind == "score")]
        if some:
            merged += annotated(rows, some, field, level, Bootstrap(resamples=50))[0]
    return merged


def calibrate(
    run_dir: str | Path,
    labels: str | Path,
    *,
    node: str,
    field: str,
    risk: float,
    delta: float = 0.1,
    tolerance: float = 0.0,
) -> Calibration:
    """The threshold at which `node`'s answers in `field` err on at most `risk` of the
    examples it answers, with probability at least 1 − `delta`, from a labelled run.

    `labels` is a JSONL file as `meta-eval` reads it; an answer further than `tolerance`
    from a score label (or any other choice) is an error. Answers are the run's `field` for
    labelled ok examples; confidence is what `abstain:` applies (`judged`): the probability
    of the answer's token (the node asked for `logprobs:`) or the share of its `n:` samples
    that agree with their most common value, read from `node`'s trace records; a run with
    neither raises CalibrationError. When no
    threshold meets `risk`, `threshold` is None and `coverage` 0. Learn then Test with
    fixed-sequence testing and exact binomial p-values: see the module.
    """
    check_bounds(risk, delta, tolerance)
    folder = Path(run_dir)
    items = read_labels(Path(labels))
    rows = {r.id: r.outputs for r in RunReader(folder).results() if r.status == "ok"}
    reader = RunReader(folder)
    if not reader.has_trace:
        raise CalibrationError(f"{folder}: no trace to read node '{node}' from")
    with TraceReader.open(reader.traces_path) as trace:
        values = {r.example_id: r.value for r in trace.node_runs(node=node) if r.status == "ok"}
    if not values:
        raise CalibrationError(f"{folder}: the trace has no ok run of node '{node}'")
    merged = consensus_labels(rows, items, field)
    confidences, wrong, sources = [], [], set()
    for label in merged:
        answer = judge_value(rows.get(label["id"]), field, label)
        if answer is None or label["id"] not in values:
            continue
        # The run-time measure, not agreement with `answer`: a threshold pasted into
        # `abstain:` must answer exactly the examples counted here.
        found = judged(values[label["id"]], field, tolerance)
        if found is None:
            raise CalibrationError(NO_CONFIDENCE.format(node=node))
        confidences.append(found.confidence)
        sources.add(found.source)
        wrong.append(wrong_answer(answer, label_truth(label), tolerance))
    if not confidences:
        raise LabelError(f"{labels}: no label matches an ok example with a '{field}' answer")
    conf, bad = np.asarray(confidences), np.asarray(wrong)
    chosen = float(select_threshold(conf, bad, risk, delta)[0])
    met = not math.isnan(chosen)
    answered = conf >= chosen if met else np.zeros(len(conf), dtype=bool)
    count, errors = int(answered.sum()), int(bad[answered].sum())
    message = None if met else UNMET.format(risk=risk, level=1 - delta)
    if message:
        log.debug(message)
    return Calibration(
        threshold=chosen if met else None,
        coverage=count / len(conf),
        risk=errors / count if count else None,
        n=len(conf),
        answered=count,
        errors=errors,
        target_risk=risk,
        delta=delta,
        tolerance=tolerance,
        source="+".join(sorted(sources)),
        message=message,
    )
