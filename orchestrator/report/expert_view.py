"""The ExPerT view of a result line: each aspect with what it matched, and the P/R/F
arithmetic redone term by term from the explanation with the compute module's own
functions, beside the scores the run reported."""

from __future__ import annotations

from typing import Any

from ..compute import AGGREGATIONS as EXPERT_AGGREGATIONS
from ..compute import aspect_credit, f1, is_matched, mean_credit
from .values import finite
from .views import register_view

_SCORE_SUFFIXES = {
    "precision": ("precision", "p"),
    "recall": ("recall", "r"),
    "f1": ("f1", "f", "f_1", "fscore", "f_score"),
}


def _canonical(aggregation: str) -> str:
    """The compute module's name for an aggregation as a result's scores spell it
    (`content` and `content_only` are one aggregation)."""
    if aggregation in EXPERT_AGGREGATIONS:
        return aggregation
    if f"{aggregation}_only" in EXPERT_AGGREGATIONS:
        return f"{aggregation}_only"
    raise ValueError(f"unknown ExPerT aggregation {aggregation!r}")


def expert_aggregations(scores: dict[str, Any]) -> list[str]:
    """Aggregation names as the result's scores spell them (the paper's five otherwise)."""
    found: list[str] = []
    known = {a.removesuffix("_only") for a in EXPERT_AGGREGATIONS}
    for key in scores:
        for suffixes in _SCORE_SUFFIXES.values():
            for suffix in suffixes:
                name = key.removesuffix(f"_{suffix}")
                if name != key and name.removesuffix("_only") in known and name not in found:
                    found.append(name)
    return found or list(EXPERT_AGGREGATIONS)


def _reported(scores: dict[str, Any], aggregation: str, part: str) -> float | None:
    for suffix in _SCORE_SUFFIXES[part]:
        value = scores.get(f"{aggregation}_{suffix}")
        if value is not None and finite(value):
            return float(value)
    return None


def _match_target(entry: dict[str, Any], other: list[dict[str, Any]]) -> int | None:
    """Index on the other side of the aspect this entry names as its match."""
    if not is_matched(entry):
        return None
    target = entry.get("matched_id", entry.get("matched_aspect"))
    if target is None:
        target = entry.get("matched_aspect")
    for key in ("id", "aspect", "title"):
        for index, cand in enumerate(other):
            if isinstance(cand, dict) and cand.get(key) is not None and cand.get(key) == target:
                return index
    if isinstance(target, int) and not isinstance(target, bool) and 0 <= target < len(other):
        return target
    return None


def expert_view(result: dict[str, Any]) -> dict[str, Any] | None:
    """Aspect table and the P/R/F arithmetic of an ExPerT result line; None for other graphs."""
    explanation = result.get("explanation")
    if not isinstance(explanation, dict):
        return None
    recall = explanation.get("recall")
    precision = explanation.get("precision")
    if not isinstance(recall, list) or not isinstance(precision, list):
        return None
    recall = [e if isinstance(e, dict) else {"aspect": str(e)} for e in recall]
    precision = [e if isinstance(e, dict) else {"aspect": str(e)} for e in precision]
    found = result.get("scores")
    scores: dict[str, Any] = found if isinstance(found, dict) else {}
    rows = []
    for agg in expert_aggregations(scores):
        canonical = _canonical(agg)
        r_terms = [aspect_credit(e, canonical) for e in recall]
        p_terms = [aspect_credit(e, canonical) for e in precision]
        r, p = mean_credit(recall, canonical), mean_credit(precision, canonical)
        rows.append(
            {
                "aggregation": agg,
                "recall_terms": r_terms,
                "precision_terms": p_terms,
                "recall": r,
                "precision": p,
                "f1": f1(p, r),
                "reported": {part: _reported(scores, agg, part) for part in _SCORE_SUFFIXES},
            }
        )
    # `_matched` is the compute module's verdict, so the page cannot read "matched" its own way.
    return {
        "recall": [
            {**e, "_to": _match_target(e, precision), "_matched": is_matched(e)} for e in recall
        ],
        "precision": [
            {**e, "_to": _match_target(e, recall), "_matched": is_matched(e)} for e in precision
        ],
        "aggregations": rows,
    }


register_view("expert", expert_view, shows=("explanation",))
