"""A run's mean (or its shares per category) from the judge and a few human labels: the
PPI++ estimate next to the labels-only (classical) and judge-only (naive) ones.

Which examples are "unlabelled" depends on the labels file. Labels without a `probability`
are a random subset: the run's other examples are the unlabelled part. Labels with one came
from a label plan (`label-plan`): every example of the run is the unlabelled part and each
label weighs 1/π, as active inference asks. The arithmetic is `stats.ppi_mean`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from ..compute import field_value
from ..errors import ConfigurationError, LabelError
from ..stats import PPIMean, ppi_mean
from ..store import RunReader
from .metaeval import label_truth, read_labels

__all__ = ["Estimation", "Share", "Value", "estimate_mean"]

SMALL = 50  # labels below which coverage is not checked by simulation (docs/estimate.md)
ALPHA = 0.05


class Value(BaseModel):
    """One estimate and its two-sided 95% interval `[low, high]`."""

    value: float
    ci: tuple[float, float]
    se: float


class Share(BaseModel):
    """The three estimates of one quantity (the mean, or one category's share)."""

    ppi: Value
    classical: Value
    naive: Value
    lam: float  # λ the PPI++ estimate used: 0 ignores the judge, 1 trusts its errors to average out
    effective_labels: float  # labels a labels-only estimate would need for the PPI++ width


class Estimation(BaseModel):
    """`estimate`'s answer: for a numeric field the mean (`ppi`, `classical`, `naive`, `lam`,
    `effective_labels` at the top), for a categorical one each value's share (`shares`)."""

    run: str
    labels: str
    field: str
    label_field: str | None
    kind: Literal["mean", "shares"]
    weighted: bool  # labels carried a plan's inclusion probabilities
    n_labels: int  # labelled examples with a judge answer
    n_unlabelled: int  # the unlabelled part (every example of the run when weighted)
    n_examples: int  # examples of the run with a judge answer
    missing: int  # ok examples of the run without a usable answer in `field`
    unmatched: int  # labelled ids with no usable answer in the run
    ppi: Value | None = None
    classical: Value | None = None
    naive: Value | None = None
    lam: float | None = None
    effective_labels: float | None = None
    shares: dict[str, Share] = {}
    alpha: float = ALPHA
    method: str = (
        "PPI++ (power-tuned λ), normal interval; classical: labels only; naive: judge only"
    )
    notes: list[str] = []

    def parts(self) -> list[tuple[str | None, Share]]:
        """Each estimated quantity: the mean (named None) or every category's share."""
        if self.kind == "shares":
            return list(self.shares.items())
        assert self.ppi and self.classical and self.naive  # a mean always sets them
        assert self.lam is not None and self.effective_labels is not None
        mean = Share(
            ppi=self.ppi,
            classical=self.classical,
            naive=self.naive,
            lam=self.lam,
            effective_labels=self.effective_labels,
        )
        return [(None, mean)]


def _value(found: PPIMean) -> Value:
    return Value(
        value=float(found.value),
        ci=(float(found.low), float(found.high)),
        se=float(found.se),
    )


def _share(
    y: np.ndarray,
    f: np.ndarray,
    f_rest: np.ndarray,
    f_every: np.ndarray,
    w: np.ndarray | None,
    alpha: float,
) -> Share:
    """PPI++, classical (λ = 0) and naive of one quantity. Naive is the judge's mean over
    every scored example, with the interval of that mean: it says nothing of the judge's
    bias, which is what the other two correct."""
    tuned = ppi_mean(y, f, f_rest, alpha=alpha, w=w)
    classical = ppi_mean(y, f, f_rest, alpha=alpha, lam=0.0, w=w)
    naive = ppi_mean(f_every, f_every, f_every, alpha=alpha, lam=0.0)
    return Share(
        ppi=_value(tuned),
        classical=_value(classical),
        naive=_value(naive),
        lam=float(tuned.lam),
        effective_labels=float(tuned.effective_labels),
    )


def _category(value: Any) -> str:
    return str(value).strip().casefold()


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _probability(label: dict[str, Any], labels: Path) -> float:
    value: Any = label.get("probability")
    if not _numeric(value) or not 0.0 < float(value) <= 1.0:
        raise LabelError(
            f"{labels}: example {label['id']!r} has probability {value!r}; an inclusion "
            "probability is a number in (0, 1]"
        )
    return float(value)


def judge_answers(run: Path, field: str) -> tuple[dict[str, Any], int]:
    """Each ok example's answer in `field` (None left out) and how many ok examples had none."""
    rows = [line for line in RunReader(run).latest_results() if line.status == "ok"]
    answers = {line.id: field_value(line.outputs, field) for line in rows}
    found = {k: v for k, v in answers.items() if v is not None}
    if not found:
        outputs = sorted({name for line in rows for name in line.outputs})
        raise ConfigurationError(
            f"field {field!r}: no ok result of {run} has it "
            f"(its outputs: {', '.join(outputs) or 'none'})"
        )
    return found, len(answers) - len(found)


def estimate_mean(
    run: str | Path,
    labels: str | Path,
    *,
    field: str,
    label_field: str | None = None,
    alpha: float = ALPHA,
) -> Estimation:
    """The PPI++ mean of `field` over the run (the share of each value for a categorical
    field) from the judge's answers and the human labels in `labels`, with the classical
    and naive estimates beside it. See the module for which examples count as unlabelled."""
    folder, path = Path(run), Path(labels)
    items = read_labels(path, label_field)
    answers, missing = judge_answers(folder, field)
    kinds = {"score" in item for item in items}
    if len(kinds) != 1:
        raise LabelError(f"{path}: mixes score and choice labels; estimate needs one kind")
    numeric = kinds == {True}
    plan = [("probability" in item) for item in items]
    weighted = any(plan)
    if weighted and not all(plan):
        raise LabelError(f"{path}: some labels carry a 'probability' and some do not")
    by_id: dict[str, list[Any]] = {}
    probability: dict[str, float] = {}
    for item in items:
        by_id.setdefault(item["id"], []).append(label_truth(item))
        if weighted:
            probability[item["id"]] = _probability(item, path)
    usable = (lambda v: _numeric(v)) if numeric else (lambda v: True)
    scored = [k for k, v in answers.items() if usable(v)]
    missing += len(answers) - len(scored)
    labelled = [k for k in by_id if k in scored]
    unmatched = len(by_id) - len(labelled)
    if len(labelled) < 2:
        raise LabelError(
            f"{path}: {len(labelled)} of its {len(by_id)} labelled id(s) have an answer in "
            f"{field!r} in {folder}; an estimate needs at least 2"
        )
    rest = scored if weighted else [k for k in scored if k not in by_id]
    if not rest:
        raise LabelError(
            f"{path}: every scored example of {folder} is labelled, so the judge adds "
            "nothing: the labels' own mean is the estimate"
        )
    w = np.asarray([1.0 / probability[k] for k in labelled]) if weighted else None
    out: dict[str, Any] = {
        "run": str(folder),
        "labels": str(path),
        "field": field,
        "label_field": label_field,
        "kind": "mean" if numeric else "shares",
        "weighted": weighted,
        "n_labels": len(labelled),
        "n_unlabelled": len(rest),
        "n_examples": len(scored),
        "missing": missing,
        "unmatched": unmatched,
        "alpha": alpha,
        "notes": _notes(len(labelled), unmatched, path),
    }
    if numeric:
        y = np.asarray([np.mean(by_id[k]) for k in labelled])
        f, f_rest = _numbers(answers, labelled), _numbers(answers, rest)
        share = _share(y, f, f_rest, _numbers(answers, scored), w, alpha)
        out.update(share.model_dump())
        return Estimation.model_validate(out)
    given = {_category(v) for k in scored for v in [answers[k]]}
    said = {_category(v): str(v) for k in labelled for v in by_id[k]}
    if not given & said.keys():
        raise LabelError(
            f"{path}: none of the labels' values ({', '.join(sorted(said.values()))}) is an "
            f"answer the run gives in {field!r} ({', '.join(sorted(given)[:10])})"
        )
    names: dict[str, str] = {}
    for value in [answers[k] for k in scored] + [v for k in labelled for v in by_id[k]]:
        names.setdefault(_category(value), str(value))
    shares = {}
    for code in sorted(names):
        y = np.asarray([np.mean([_category(v) == code for v in by_id[k]]) for k in labelled])
        f = np.asarray([_category(answers[k]) == code for k in labelled], dtype=float)
        every = np.asarray([_category(answers[k]) == code for k in scored], dtype=float)
        f_rest = np.asarray([_category(answers[k]) == code for k in rest], dtype=float)
        shares[names[code]] = _share(y, f, f_rest, every, w, alpha)
    return Estimation.model_validate({**out, "shares": shares})


def _numbers(answers: dict[str, Any], ids: Sequence[str]) -> np.ndarray:
    return np.asarray([float(answers[k]) for k in ids])


def _notes(n: int, unmatched: int, path: Path) -> list[str]:
    notes = []
    if n < SMALL:
        notes.append(
            f"{n} labels: the normal interval's coverage is checked by simulation from "
            f"{SMALL} labels up; with fewer it can fall short of 95%"
        )
    if unmatched:
        notes.append(f"{unmatched} labelled id(s) of {path} have no usable answer in the run")
    return notes
