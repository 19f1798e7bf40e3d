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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from ..compute import field_value
from ..errors import ConfigurationError, LabelError
from ..stats import (
    SMALL_SAMPLE,
    PPIMean,
    bootstrap_t_interval,
    cluster_index,
    cluster_interval,
    labels_for_width,
    ppi_mean,
)
from ..store import RunReader
from .groups import cluster_keys, cluster_labels, run_inputs
from .metaeval import label_truth, read_labels

__all__ = ["Estimation", "Share", "Value", "estimate_mean"]

ALPHA = 0.05
Interval = Literal["normal", "bootstrap-t", "cluster"]
METHODS: dict[str, str] = {
    "normal": "PPI++ (power-tuned λ), normal interval (ppi-python's)",
    "bootstrap-t": "PPI++ (power-tuned λ), bootstrap-t interval (fewer than 100 labels)",
    "cluster": "PPI++ (power-tuned λ), whole clusters resampled",
}


class Value(BaseModel):
    """One estimate and its two-sided 95% interval `[low, high]`."""

    value: float
    ci: tuple[float, float]
    se: float  # with clusters: the interval's half-width over the normal quantile


class Share(BaseModel):
    """The three estimates of one quantity (the mean, or one category's share)."""

    ppi: Value
    classical: Value
    naive: Value
    lam: float  # λ the PPI++ estimate used: 0 ignores the judge, 1 trusts its errors to average out
    effective_labels: float  # labels a labels-only estimate would need for the PPI++ width


class Estimation(BaseModel):
    """`estimate`'s answer: for a numeric field the mean (`ppi`, `classical`, `naive`, `lam`,
    `effective_labels` at the top; the same for a difference of two runs and a win rate),
    for a categorical one each value's share (`shares`)."""

    run: str
    other_run: str | None = None  # run B of a difference B − A
    labels: str
    field: str
    label_field: str | None
    kind: Literal["mean", "shares", "difference", "win_rate"]
    win: str | None = None  # the side whose win rate is estimated (ties count half)
    cluster: str | None = None  # the row field whose clusters every interval resamples
    clusters: int | None = None
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
    width: float | None = None  # the interval width asked for (the label question)
    labels_needed: int | None = None  # PPI++ labels for that width (None: out of reach)
    labels_needed_classical: int | None = None  # labels alone for that width
    needed_notes: list[str] = []
    alpha: float = ALPHA
    small_sample: Literal["auto", "off"] = "auto"  # what was asked (docs/estimate.md)
    interval: Interval = "normal"  # the form the PPI++ and classical intervals took
    method: str = METHODS["normal"]
    notes: list[str] = []
    kept: str | None = None  # where `--keep` wrote this record in the run folder

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


@dataclass(frozen=True)
class _Clusters:
    """Each example's cluster number (`--cluster`) and the resampling's seed."""

    of: dict[str, int]
    seed: int

    def __call__(self, ids: Sequence[str]) -> np.ndarray:
        return np.asarray([self.of[k] for k in ids], dtype=np.intp)


@dataclass(frozen=True)
class _Parts:
    """The examples of one estimate: labelled, unlabelled, every judged one; plan weights."""

    labelled: list[str]
    rest: list[str]
    scored: list[str]
    w: np.ndarray | None
    clusters: _Clusters | None
    bootstrap_t: bool = False  # few labels: PPI++ and classical intervals by bootstrap-t
    seed: int = 0


def _share(
    y: np.ndarray,
    f: np.ndarray,
    f_rest: np.ndarray,
    f_every: np.ndarray,
    parts: _Parts,
    alpha: float,
) -> Share:
    """PPI++, classical (λ = 0) and naive of one quantity. Naive is the judge's mean over
    every scored example, with the interval of that mean: it says nothing of the judge's
    bias, which is what the other two correct. With clusters, each interval comes from
    resampling whole clusters (`stats.cluster_interval`)."""
    w = parts.w
    tuned = ppi_mean(y, f, f_rest, alpha=alpha, w=w)
    classical = ppi_mean(y, f, f_rest, alpha=alpha, lam=0.0, w=w)
    naive = ppi_mean(f_every, f_every, f_every, alpha=alpha, lam=0.0)
    values = [_value(tuned), _value(classical), _value(naive)]
    if parts.bootstrap_t:
        found_t = [
            bootstrap_t_interval(y, f, f_rest, lam=lam, alpha=alpha, seed=parts.seed)
            for lam in (None, 0.0)
        ]
        values[:2] = [
            v.model_copy(update={"ci": (float(lo), float(hi))})
            for v, (lo, hi) in zip(values[:2], found_t, strict=True)
        ]
    if parts.clusters is not None:
        of, seed = parts.clusters, parts.clusters.seed
        lab, rest, every = of(parts.labelled), of(parts.rest), of(parts.scored)
        lam = float(tuned.lam)
        found = [
            cluster_interval(y, f, f_rest, lab, rest, lam, w=w, alpha=alpha, seed=seed),
            cluster_interval(y, f, f_rest, lab, rest, 0.0, w=w, alpha=alpha, seed=seed),
            cluster_interval(f_every, f_every, f_every, every, every, 0.0, alpha=alpha, seed=seed),
        ]
        z = float(tuned.high - tuned.value) / float(tuned.se) if float(tuned.se) > 0 else 1.0
        values = [
            v.model_copy(update={"ci": (float(lo), float(hi)), "se": float(hi - lo) / (2 * z)})
            for v, (_, lo, hi) in zip(values, found, strict=True)
        ]
    return Share(
        ppi=values[0],
        classical=values[1],
        naive=values[2],
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


TIES = frozenset({"tie", "draw", "equal", "same", "both", "neither"})


def _read(
    path: Path, label_field: str | None
) -> tuple[bool, dict[str, list[Any]], dict[str, float]]:
    """A labels file: whether its labels are scores, each id's labels, and each id's plan
    probability (empty when the labels carry none)."""
    items = read_labels(path, label_field)
    kinds = {"score" in item for item in items}
    if len(kinds) != 1:
        raise LabelError(f"{path}: mixes score and choice labels; estimate needs one kind")
    plan = [("probability" in item) for item in items]
    if any(plan) and not all(plan):
        raise LabelError(f"{path}: some labels carry a 'probability' and some do not")
    by_id: dict[str, list[Any]] = {}
    probability: dict[str, float] = {}
    for item in items:
        by_id.setdefault(item["id"], []).append(label_truth(item))
        if any(plan):
            probability[item["id"]] = _probability(item, path)
    return kinds == {True}, by_id, probability


def _win(value: Any, side: str) -> float:
    """A pairwise verdict as a win for `side`: 1 when it won, ½ for a tie, 0 otherwise."""
    code = _category(value)
    return 1.0 if code == _category(side) else 0.5 if code in TIES else 0.0


def _paired(
    folders: list[Path], paths: list[Path], field: str, label_field: str | None
) -> tuple[dict[str, Any], int, dict[str, list[Any]]]:
    """Run B minus run A per example, for the judge and for the people (each file labels
    its run; an example is labelled when both files label it)."""
    (a, missing_a), (b, missing_b) = (judge_answers(x, field) for x in folders)
    answers = {
        k: float(b[k]) - float(a[k]) for k in a if k in b and _numeric(a[k]) and _numeric(b[k])
    }
    read = [_read(path, label_field) for path in paths]
    for path, (numeric, _, probability) in zip(paths, read, strict=True):
        if not numeric:
            raise LabelError(f"{path}: a difference of two runs needs score labels")
        if probability:
            raise LabelError(f"{path}: a label plan's probabilities apply to one run's estimate")
    first, second = read[0][1], read[1][1]
    by_id = {
        k: [float(np.mean(second[k])) - float(np.mean(first[k]))] for k in first if k in second
    }
    missing = len(set(a) | set(b)) - len(answers) + missing_a + missing_b
    return answers, missing, by_id


def estimate_mean(
    runs: str | Path | Sequence[str | Path],
    labels: str | Path | Sequence[str | Path],
    *,
    field: str,
    label_field: str | None = None,
    win: str | None = None,
    cluster: str | None = None,
    alpha: float = ALPHA,
    seed: int = 0,
    width: float | None = None,
    small_sample: Literal["auto", "off"] = "auto",
) -> Estimation:
    """The PPI++ mean of `field` over a run (the share of each value for a categorical
    field; the win rate of `win`, ties counting half, for a pairwise verdict) from the
    judge's answers and the human labels, with the classical and naive estimates beside
    it. Two runs (and a labels file for each) give the mean difference B − A over their
    shared examples. `cluster` names a row field (a user) whose clusters are resampled
    whole for every interval. With `width`, the labels are a pilot: the record also says how
    many labels a PPI++ interval of that total width needs (`labels_needed`), and how many
    the labels alone would. `small_sample` "auto" gives the PPI++ and classical intervals
    by bootstrap-t below 100 unweighted, unclustered labels; "off" keeps ppi-python's normal
    interval. See the module for which examples count as unlabelled."""
    if small_sample not in ("auto", "off"):
        raise ConfigurationError(f"--small-sample must be auto or off, got {small_sample!r}")
    folders = [Path(x) for x in ([runs] if isinstance(runs, str | Path) else runs)]
    paths = [Path(x) for x in ([labels] if isinstance(labels, str | Path) else labels)]
    if len(folders) not in (1, 2) or len(paths) != len(folders):
        raise ConfigurationError(
            f"estimate takes one run or two, and a labels file for each: got {len(folders)} "
            f"run(s) and {len(paths)} labels file(s)"
        )
    path = paths[0]
    if len(folders) == 2:
        if win is not None:
            raise ConfigurationError("--win-rate is for one pairwise run, not two runs")
        answers, missing, by_id = _paired(folders, paths, field, label_field)
        numeric, kind = True, "difference"
        probability: dict[str, float] = {}
    else:
        numeric, by_id, probability = _read(path, label_field)
        answers, missing = judge_answers(folders[0], field)
        kind = "mean" if numeric else "shares"
        if win is not None:
            _check_side(answers, win, field, folders[0])
            answers = {k: _win(v, win) for k, v in answers.items()}
            by_id = {k: [_win(v, win) for v in vs] for k, vs in by_id.items()}
            numeric, kind = True, "win_rate"
    weighted = bool(probability)
    usable = (lambda v: _numeric(v)) if numeric else (lambda v: True)
    scored = [k for k, v in answers.items() if usable(v)]
    missing += len(answers) - len(scored)
    labelled = [k for k in by_id if k in scored]
    unmatched = len(by_id) - len(labelled)
    where = " and ".join(str(x) for x in folders)
    if len(labelled) < 2:
        raise LabelError(
            f"{path}: {len(labelled)} of its {len(by_id)} labelled id(s) have an answer in "
            f"{field!r} in {where}; an estimate needs at least 2"
        )
    rest = scored if weighted else [k for k in scored if k not in by_id]
    if not rest:
        raise LabelError(
            f"{path}: every scored example of {where} is labelled, so the judge adds "
            "nothing: the labels' own mean is the estimate"
        )
    w = np.asarray([1.0 / probability[k] for k in labelled]) if weighted else None
    clusters = None if cluster is None else _clusters(folders[0], cluster, scored, seed)
    small = (
        small_sample == "auto" and len(labelled) < SMALL_SAMPLE and not weighted and not clusters
    )
    parts = _Parts(labelled, rest, scored, w, clusters, small, seed)
    interval: Interval = "cluster" if clusters else "bootstrap-t" if small else "normal"
    out: dict[str, Any] = {
        "run": str(folders[0]),
        "other_run": str(folders[1]) if len(folders) == 2 else None,
        "labels": ", ".join(str(x) for x in paths),
        "field": field,
        "label_field": label_field,
        "kind": kind,
        "win": win,
        "cluster": cluster,
        "clusters": None if clusters is None else len(set(clusters.of.values())),
        "weighted": weighted,
        "n_labels": len(labelled),
        "n_unlabelled": len(rest),
        "n_examples": len(scored),
        "missing": missing,
        "unmatched": unmatched,
        "alpha": alpha,
        "small_sample": small_sample,
        "interval": interval,
        "method": METHODS[interval],
        "notes": _notes(len(labelled), unmatched, path, interval, weighted),
    }
    if width is not None and not numeric:
        raise ConfigurationError(
            f"--width: the labels needed are for a mean; {field!r} is categorical "
            "(a --win-rate side makes it one)"
        )
    if numeric:
        y = np.asarray([np.mean(by_id[k]) for k in labelled])
        f, f_rest = _numbers(answers, labelled), _numbers(answers, rest)
        share = _share(y, f, f_rest, _numbers(answers, scored), parts, alpha)
        out.update(share.model_dump())
        if width is not None:
            out.update(_needed(y, f, _numbers(answers, scored), width, alpha, parts))
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
        shares[names[code]] = _share(y, f, f_rest, every, parts, alpha)
    return Estimation.model_validate({**out, "shares": shares})


def _needed(
    y: np.ndarray, f: np.ndarray, f_every: np.ndarray, width: float, alpha: float, parts: _Parts
) -> dict[str, Any]:
    """The label question from a pilot (`stats.labels_for_width`), the judge's answers on
    the whole run as the unlabelled part, and the labels-only answer beside it."""
    try:
        needed: int | None = labels_for_width(y, f, f_every, width, alpha=alpha)
        reason = None
    except ValueError as exc:
        needed, reason = None, str(exc)
    alone = labels_for_width(y, f, f_every, width, alpha=alpha, lam=0.0)
    notes = [] if reason is None else [reason]
    if parts.w is not None or parts.clusters is not None:
        notes.append("labels needed assume labels drawn at random, without plan or clusters")
    return {
        "width": width,
        "labels_needed": needed,
        "labels_needed_classical": alone,
        "needed_notes": notes,
    }


def _check_side(answers: dict[str, Any], side: str, field: str, run: Path) -> None:
    given = sorted({_category(v) for v in answers.values()})
    if _category(side) not in given:
        raise ConfigurationError(
            f"--win-rate {side!r}: no example of {run} has it in {field!r} "
            f"(its values: {', '.join(given[:10])})"
        )


def _clusters(run: Path, field: str, ids: Sequence[str], seed: int) -> _Clusters:
    """Each scored example's cluster number by the row field `field` (compare's reading)."""
    keys = cluster_keys(RunReader(run).latest_results(), field, run_inputs(run))
    index = cluster_index(cluster_labels(ids, keys))
    return _Clusters(dict(zip(ids, index.tolist(), strict=True)), seed)


def _numbers(answers: dict[str, Any], ids: Sequence[str]) -> np.ndarray:
    return np.asarray([float(answers[k]) for k in ids])


def _notes(n: int, unmatched: int, path: Path, interval: Interval, weighted: bool) -> list[str]:
    notes = []
    if n < SMALL_SAMPLE and interval == "bootstrap-t":
        notes.append(
            f"{n} labels: intervals by bootstrap-t, the small-sample form "
            "(--small-sample off gives ppi-python's normal interval)"
        )
    elif n < SMALL_SAMPLE and interval == "normal":
        notes.append(
            f"{n} labels: with fewer than {SMALL_SAMPLE}, the normal interval can fall short "
            "of 95% for skewed scores or rare categories"
            + (
                " (the bootstrap-t form takes no plan weights)"
                if weighted
                else " (--small-sample auto: bootstrap-t)"
            )
        )
    if unmatched:
        notes.append(f"{unmatched} labelled id(s) of {path} have no usable answer in the run")
    return notes
