"""Votes for triplet (reference, candidate a, candidate b) protocols and their ensembles.

A vote says which candidate a metric puts closer to the reference: +1 for a, -1 for b,
0 for a tie or an abstention (a judge answering Both/None), and None when the metric is
unavailable for the row (e.g. METEOR without WordNet). Accuracy is strict: only a
non-zero vote on the true side is right.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from statistics import fmean
from typing import Any

from .registry import register

Vote = int | None
WEIGHT_FORMS = ("accuracy", "excess", "logodds")
_EPS = 1e-12


def sign_vote(score_a: float | None, score_b: float | None) -> Vote:
    """+1 when a scores higher, -1 when b does, 0 on an exact tie, None if either is missing."""
    if score_a is None or score_b is None:
        return None
    if math.isnan(score_a) or math.isnan(score_b):
        return None
    diff = float(score_a) - float(score_b)
    if abs(diff) <= _EPS:
        return 0
    return 1 if diff > 0 else -1


def _as_score(value: Any) -> float | None:
    """A metric node's value as a number: a plain number, or a dict's `score` when available."""
    if isinstance(value, Mapping):
        if value.get("available") is False:
            return None
        value = value.get("score")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


@register("pair_scores")
def pair_scores(pairs: Mapping[str, Sequence[Any] | None]) -> dict[str, Any]:
    """Normalise each metric's [value for a, value for b] to two numbers (or None).

    Values may be numbers or metric-node dicts; a pair with an unavailable side is None,
    and the reason a node gave (e.g. no WordNet) is kept under `unavailable`.
    """
    scores: dict[str, list[float] | None] = {}
    unavailable: dict[str, str] = {}
    for name, pair in pairs.items():
        values = [_as_score(v) for v in pair] if pair is not None and len(pair) == 2 else None
        if values is None or None in values:
            scores[name] = None
            reasons = [
                str(v.get("reason"))
                for v in pair or []
                if isinstance(v, Mapping) and v.get("reason")
            ]
            unavailable[name] = reasons[0] if reasons else "no score"
        else:
            scores[name] = [v for v in values if v is not None]
    return {"pairs": scores, "unavailable": unavailable}


@register("pair_votes")
def pair_votes(
    pairs: Mapping[str, Sequence[float | None] | None],
    direct: Mapping[str, Vote] | None = None,
) -> dict[str, Vote]:
    """One vote per metric from its [score for a, score for b] pair, plus ready-made votes."""
    votes: dict[str, Vote] = {}
    for name, pair in pairs.items():
        if pair is None or len(pair) != 2:
            votes[name] = None
        else:
            votes[name] = sign_vote(pair[0], pair[1])
    for name, vote in (direct or {}).items():
        votes[name] = vote
    return votes


# -- The A/B judge -------------------------------------------------------------------------


@register("judge_orders")
def judge_orders(key: str, seed: int = 0, both: bool = False) -> list[list[str]]:
    """Display orders for an A/B judge: both, or one chosen by a hash of (seed, key).

    Hashing the example key (not a shared RNG) keeps each example's order the same on
    resume and independent of which examples run first.
    """
    if both:
        return [["a", "b"], ["b", "a"]]
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return [["b", "a"]] if digest[0] & 1 else [["a", "b"]]


@register("judge_vote")
def judge_vote(
    answers: Sequence[Mapping[str, Any] | None],
    orders: Sequence[Sequence[str]],
    field: str = "verdict",
) -> dict[str, Any]:
    """Map the judge's A/B answers back to candidates a/b and combine them into one vote.

    A names the first text shown, B the second. Both/None, a failed call, or two orders
    that disagree give 0 (an abstention in ensembles, wrong for accuracy).
    """
    picks: list[str | None] = []
    raw: list[str | None] = []
    failed = 0
    for answer, order in zip(answers, orders, strict=True):
        if not answer or answer.get("failed"):
            failed += 1
            raw.append(None)
            picks.append(None)
            continue
        verdict = answer.get(field)
        raw.append(verdict)
        picks.append({"A": order[0], "B": order[1]}.get(str(verdict)))
    named = [p for p in picks if p is not None]
    if named and len(named) == len(picks) and len(set(named)) == 1:
        vote = 1 if named[0] == "a" else -1
    else:
        vote = 0
    return {
        "vote": vote,
        "answers": raw,
        "picked": picks,
        "shown_first": [order[0] for order in orders],
        "consistent": len(set(picks)) == 1 if len(picks) > 1 else None,
        "failed": failed,
    }


# -- Ensembles -----------------------------------------------------------------------------


def majority_vote(votes: Mapping[str, Vote], members: Sequence[str]) -> Vote:
    """Sign of the summed votes of `members`; None when no member is available, 0 on a tie."""
    present = [votes[m] for m in members if votes.get(m) is not None]
    if not present:
        return None
    total = sum(v for v in present if v is not None)
    return 0 if total == 0 else (1 if total > 0 else -1)


def weight(accuracy: float, form: str = "accuracy") -> float:
    """A voter's PWV weight from its calibration accuracy.

    accuracy: w = p (the spec's form). excess: w = max(p - 0.5, 0), so a voter at chance
    counts for nothing. logodds: w = max(log(p / (1 - p)), 0) with p clipped to
    [0.01, 0.99], the optimal weight for independent voters, never inverting one.
    """
    if form == "accuracy":
        return float(accuracy)
    if form == "excess":
        return max(float(accuracy) - 0.5, 0.0)
    if form == "logodds":
        p = min(max(float(accuracy), 0.01), 0.99)
        return max(math.log(p / (1 - p)), 0.0)
    raise ValueError(f"unknown weight form '{form}' (use one of {', '.join(WEIGHT_FORMS)})")


def weighted_vote(
    votes: Mapping[str, Vote], members: Sequence[str], weights: Mapping[str, float]
) -> Vote:
    """Sign of the weighted vote sum; None when no member is available, 0 on a tie.

    A member without a weight counts 0. An exact tie (|sum| below 1e-12) is not broken:
    it stays 0, which is wrong for accuracy like any other tie.
    """
    present = [m for m in members if votes.get(m) is not None]
    if not present:
        return None
    total = sum(weights.get(m, 0.0) * (votes[m] or 0) for m in present)
    if abs(total) <= _EPS:
        return 0
    return 1 if total > 0 else -1


def _meta_block(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The meta_eval block: the file itself, or the one inside a style run's summary.json."""
    for value in data.values():
        if isinstance(value, Mapping) and isinstance(value.get("meta_eval"), Mapping):
            return value["meta_eval"]
    return data


def _accuracy_table(meta: Mapping[str, Any]) -> dict[str, float]:
    """Per-metric accuracy from either meta_eval.json shape docs/metrics.md lists."""
    if isinstance(meta.get("accuracy"), Mapping):
        table = meta["accuracy"]
    elif isinstance(meta.get("metrics"), Mapping):
        table = {
            name: entry.get("accuracy") if isinstance(entry, Mapping) else entry
            for name, entry in meta["metrics"].items()
        }
    else:
        raise ValueError("no 'accuracy' or 'metrics' table found")
    out: dict[str, float] = {}
    for name, value in table.items():
        if isinstance(value, Mapping):
            value = value.get("mean", value.get("accuracy"))
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out


def _stacking_fit(data: Mapping[str, Any]) -> tuple[dict[str, dict[str, float]] | None, str]:
    """Stacking weights per set from a calibration summary's `stacking` block, or why not."""
    block = data.get("stacking")
    if not isinstance(block, Mapping):
        return None, "the calibration file has no stacking fit (aggregate style_stacking)"
    if block.get("failed"):
        return None, f"the calibration run's stacking aggregate failed: {block.get('error')}"
    fit = block.get("fit", block)
    if not isinstance(fit, Mapping) or not isinstance(fit.get("sets"), Mapping):
        return None, "the calibration file's stacking block has no fitted sets"
    sets: dict[str, dict[str, float]] = {}
    for name, entry in fit["sets"].items():
        weights = entry.get("weights") if isinstance(entry, Mapping) else None
        if isinstance(weights, Mapping) and weights:
            sets[str(name)] = {str(m): float(w) for m, w in weights.items()}
    return sets, ""


@lru_cache(maxsize=16)
def _load_calibration(path: str, mtime: float) -> dict[str, Any]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a JSON object")
    meta = _meta_block(data)
    stacking, stacking_reason = _stacking_fit(data)
    try:
        accuracy = _accuracy_table(meta)
    except ValueError as exc:
        if stacking is None:
            raise ValueError(f"{path}: {exc} (see docs/metrics.md for the format)") from exc
        accuracy = {}
    ids = {str(i) for i in meta.get("ids") or ()}
    fit = data.get("stacking")
    if isinstance(fit, Mapping) and isinstance(fit.get("fit", fit), Mapping):
        ids |= {str(i) for i in fit.get("fit", fit).get("ids") or ()}
    return {
        "accuracy": accuracy,
        "split": meta.get("split"),
        "ids": frozenset(ids),
        "stacking": stacking,
        "stacking_reason": stacking_reason,
    }


def load_calibration(path: str | Path) -> dict[str, Any]:
    """Read a calibration meta_eval.json (cached per file version)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"calibration file {file} not found")
    return _load_calibration(str(file.resolve()), file.stat().st_mtime)


def _stacked(
    votes: Mapping[str, Vote], sets: Mapping[str, Sequence[str]], cal: Mapping[str, Any]
) -> tuple[dict[str, Vote], dict[str, Any]]:
    """lr:NAME votes from the calibration's stacking weights; None for a set it did not fit."""
    fitted: dict[str, dict[str, float]] = cal["stacking"] or {}
    out: dict[str, Vote] = {}
    missing: dict[str, str] = {}
    for name, members in sets.items():
        weights = fitted.get(name)
        if weights is None:
            missing[name] = f"set '{name}' has no stacking fit in the calibration file"
        elif not set(weights) <= set(members):
            missing[name] = f"set '{name}' was fitted on other members"
            weights = None
        out[f"lr:{name}"] = weighted_vote(votes, members, weights) if weights else None
    info: dict[str, Any] = {
        "available": True,
        "weights": {n: w for n, w in fitted.items() if n in sets and n not in missing},
    }
    if missing:
        info["missing_sets"] = missing
    return out, info


@register("ensemble_votes", reads_files=("calibration",))
def ensemble_votes(
    votes: Mapping[str, Vote],
    sets: Mapping[str, Sequence[str]],
    calibration: str | None = None,
    weight_form: str = "accuracy",
    example_id: str | None = None,
) -> dict[str, Any]:
    """Majority (mv:NAME), performance-weighted (pwv:NAME) and stacked (lr:NAME) votes per set.

    PWV and LR weights come only from a calibration file; without one, or when this row was
    itself in the calibration split, those votes are None and `calibration` says why.
    """
    out: dict[str, Vote] = {}
    for name, members in sets.items():
        out[f"mv:{name}"] = majority_vote(votes, members)
    info: dict[str, Any] = {"source": calibration, "weight_form": weight_form}
    weights: dict[str, float] | None = None
    stacked: dict[str, Vote] = {f"lr:{name}": None for name in sets}
    if not calibration:
        info.update(available=False, reason="no calibration meta_eval.json given")
        info["stacking"] = {"available": False, "reason": "no calibration summary.json given"}
    else:
        cal = load_calibration(calibration)
        if example_id is not None and str(example_id) in cal["ids"]:
            info.update(available=False, reason="this row is in the calibration split")
            info["stacking"] = {"available": False, "reason": info["reason"]}
        else:
            weights = {m: weight(acc, weight_form) for m, acc in cal["accuracy"].items()}
            used = sorted({m for ms in sets.values() for m in ms})
            info.update(
                available=bool(weights),
                split=cal["split"],
                weights={m: round(weights[m], 6) for m in used if m in weights},
                missing=[m for m in used if m not in weights],
            )
            if not weights:
                info["reason"] = "the calibration file has no accuracy table"
            if cal["stacking"] is None:
                info["stacking"] = {"available": False, "reason": cal["stacking_reason"]}
            else:
                stacked, info["stacking"] = _stacked(votes, sets, cal)
    for name, members in sets.items():
        out[f"pwv:{name}"] = weighted_vote(votes, members, weights) if weights else None
    out.update(stacked)
    return {"votes": out, "calibration": info}


# -- Dataset level -------------------------------------------------------------------------


def is_correct(vote: Vote, positive: str) -> bool:
    """Strict: a non-zero vote for the positive candidate."""
    return vote is not None and vote != 0 and (vote > 0) == (positive == "a")


def _score_column(rows: list[tuple[str, str, Vote]], reason: str | None = None) -> dict[str, Any]:
    """Accuracy of one voter over (setting, positive, vote) rows."""
    usable = [(s, p, v) for s, p, v in rows if v is not None]
    if not usable:
        return {"available": False, "n": 0, "unavailable": len(rows), "reason": reason}
    settings = sorted({s for s, _, _ in usable})
    per_setting = {s: fmean(is_correct(v, p) for t, p, v in usable if t == s) for s in settings}
    return {
        "available": True,
        "per_setting": {s: round(a, 4) for s, a in per_setting.items()},
        "mean": round(fmean(per_setting.values()), 4),
        "overall": round(fmean(is_correct(v, p) for _, p, v in usable), 4),
        "n": len(usable),
        "ties_or_abstentions": sum(v == 0 for _, _, v in usable),
        "unavailable": len(rows) - len(usable),
    }


@register("style_accuracy")
def style_accuracy(
    results: list[Mapping[str, Any]],
    votes_field: str = "votes",
    ensembles_field: str = "ensembles",
    split: str | None = None,
) -> dict[str, Any]:
    """Accuracy of every metric and ensemble, per setting and as the mean over settings.

    Also emits a `meta_eval` block (accuracy = mean over settings, plus the row ids) in
    the format `ensemble_votes` reads, so this run can calibrate another run's PWV.
    """
    rows = []
    skipped = 0
    for row in results:
        positive = str(row.get("positive", "")).lower()
        if positive not in ("a", "b"):
            skipped += 1
            continue
        rows.append((str(row.get("setting", "all")), positive, row))
    voters: dict[str, dict[str, list[tuple[str, str, Vote]]]] = {"metrics": {}, "ensembles": {}}
    for section, field in (("metrics", votes_field), ("ensembles", ensembles_field)):
        for setting, positive, row in rows:
            for name, vote in (row.get(field) or {}).items():
                voters[section].setdefault(name, []).append((setting, positive, vote))
    # Why a voter had no vote: the metric node's own reason, or the calibration's for PWV.
    reasons: dict[str, str] = {}
    for _, _, row in rows:
        for name, reason in (row.get("unavailable") or {}).items():
            reasons.setdefault(name, str(reason))
    calibrations = [r["calibration"] for *_, r in rows if isinstance(r.get("calibration"), Mapping)]
    calibration = calibrations[0] if calibrations else None
    stacking = (calibration or {}).get("stacking") or {}
    for name in voters["ensembles"]:
        if calibration and name.startswith("pwv:") and not calibration.get("available"):
            reasons.setdefault(name, str(calibration.get("reason")))
        if name.startswith("lr:") and not stacking.get("available", True):
            reasons.setdefault(name, str(stacking.get("reason")))
        elif name.startswith("lr:") and name[3:] in (stacking.get("missing_sets") or {}):
            reasons.setdefault(name, str(stacking["missing_sets"][name[3:]]))
    report: dict[str, Any] = {
        "settings": {s: sum(1 for t, _, _ in rows if t == s) for s in sorted({r[0] for r in rows})},
        "rows": len(rows),
        "rows_without_truth": skipped,
        "metrics": {n: _score_column(c, reasons.get(n)) for n, c in voters["metrics"].items()},
        "ensembles": {n: _score_column(c, reasons.get(n)) for n, c in voters["ensembles"].items()},
    }
    if calibration:
        keys: tuple[str, ...] = ("source", "split", "weight_form", "available", "reason")
        keys = (*keys, "weights", "missing", "stacking")
        report["calibration"] = {k: calibration.get(k) for k in keys if k in calibration}
    judged: list[Mapping[str, Any]] = [
        r["judge"] for _, _, r in rows if isinstance(r.get("judge"), Mapping)
    ]
    if judged:
        answers = [a for j in judged for a in j.get("answers") or []]
        report["judge"] = {
            "answers": {k: answers.count(k) for k in ("A", "B", "Both", "None")},
            "failed_calls": sum(int(j.get("failed") or 0) for j in judged),
            "order_inconsistent": sum(1 for j in judged if j.get("consistent") is False),
        }
    accuracy = {
        name: col["mean"]
        for section in ("metrics", "ensembles")
        for name, col in report[section].items()
        if col.get("available")
    }
    report["meta_eval"] = {
        "split": split,
        "accuracy": accuracy,
        "n": len(rows),
        "ids": [str(r.get("id")) for _, _, r in rows if r.get("id") is not None],
    }
    return report
