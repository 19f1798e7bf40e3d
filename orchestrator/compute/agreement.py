"""Jury labels and inter-judge agreement (PerQ): label rules, Fleiss' kappa (the arithmetic
is `orchestrator.stats.fleiss_kappa`), Krippendorff's α over every item two judges or more
scored, pairwise agreement."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations
from statistics import fmean
from typing import Any

from .registry import register
from .statistics import krippendorff_alpha

log = logging.getLogger(__name__)
# Below this share of the items, a κ over the items every judge scored is worth a warning.
FEW_COMPLETE = 0.5


def judge_score(value: Any, field: str = "score") -> int | None:
    """A judge's score, or None when it abstained (failed call, missing or non-integer)."""
    if not isinstance(value, Mapping) or value.get("failed"):
        return None
    score = value.get(field)
    if isinstance(score, bool) or not isinstance(score, int):
        return None
    return score


def label_from_votes(votes: Sequence[int | None]) -> tuple[int | None, str]:
    """The jury label and the rule that produced it.

    A score given by two or more judges wins (with three judges at most one can). Three
    different scores give the lowest; two votes that disagree give the lower one; fewer
    than two votes give no label.
    """
    present = [v for v in votes if v is not None]
    if len(present) < 2:
        return None, "n/a"
    counts = Counter(present)
    top, count = counts.most_common(1)[0]
    if count == len(present):
        return top, "unanimous"
    if count >= 2 and list(counts.values()).count(count) == 1:
        return top, "majority"
    return min(present), "lowest"


@register("jury_label")
def jury_label(judges: Mapping[str, Any], field: str = "score") -> dict[str, Any]:
    """Combine the judges' outputs (by node name) into one label; a failed judge abstains.

    Returns {"label", "rule", "scores": {judge: score or null}}. A score two or more
    judges give wins ("unanimous" or "majority"); otherwise the lowest ("lowest"); fewer
    than two scores give no label ("n/a").
    """
    scores = {name: judge_score(value, field) for name, value in judges.items()}
    label, rule = label_from_votes(list(scores.values()))
    return {"label": label, "rule": rule, "scores": scores}


def rating_table(ratings: Sequence[Sequence[int]], categories: Sequence[int]) -> list[list[int]]:
    """Items x categories counts from each item's list of ratings."""
    index = {c: i for i, c in enumerate(categories)}
    table = []
    for position, item in enumerate(ratings):
        row = [0] * len(categories)
        for rating in item:
            if rating not in index:
                raise ValueError(
                    f"rating {rating!r} of item {position} is not among categories "
                    f"{list(categories)}; pass `categories` listing every possible score"
                )
            row[index[rating]] += 1
        table.append(row)
    return table


def _categories(categories: Sequence[int] | None, seen: Sequence[Any]) -> list[Any]:
    """The score categories as given (checked), or the distinct scores seen when None."""
    if categories is None:
        try:
            return sorted(set(seen))
        except TypeError:  # numbers mixed with text: any fixed order will do
            return sorted(set(seen), key=str)
    if isinstance(categories, str | bytes | Mapping) or not isinstance(categories, Sequence):
        raise ValueError(f"categories must be a list of scores, got {type(categories).__name__}")
    found = list(categories)
    if not found or len(set(found)) != len(found):
        raise ValueError(f"categories must list distinct scores, got {found}")
    return found


def _which(result: Mapping[str, Any], position: int) -> str:
    """A result named for an error message: its id when it has one, else its position."""
    return f"result {result['id']!r}" if result.get("id") is not None else f"result {position}"


def _check_scores(
    values: Sequence[tuple[str, Any]], categories: Sequence[Any], as_text: bool = False
) -> None:
    """Refuse a score or label outside `categories`: it would be dropped from every count.

    The default categories are PerQ's 0-3; a 1-5 rubric must say so, and the message
    names the offending value and where it was found. Labels are counted by their text
    (`as_text`), so a label "2" matches the category 2 as it always has.
    """
    allowed = {str(c) for c in categories} if as_text else set(categories)
    for where, value in values:
        if (str(value) if as_text else value) not in allowed:
            raise ValueError(
                f"{where} is {value!r}, which is not among categories {list(categories)}; "
                "pass `categories` listing every score the judges may give (e.g. [1, 2, 3, 4, 5])"
            )


@register("jury_agreement")
def jury_agreement(
    results: list[Mapping[str, Any]],
    scores_field: str = "scores",
    label_field: str = "label",
    categories: Sequence[int] | None = (0, 1, 2, 3),
) -> dict[str, Any]:
    """Label distribution, full and pairwise agreement, Fleiss' kappa, Krippendorff's α,
    per-judge abstain rate.

    Agreement statistics use the items every judge in question scored; Fleiss' kappa uses
    only items scored by all judges (it needs a fixed number of raters), and
    `fleiss_kappa_items` says how many that is: one judge abstaining often leaves κ resting
    on a few items. Krippendorff's α (nominal, as κ) takes every item two judges or more
    scored (`alpha_items`), so an abstention costs one rating, not the item. `categories` are
    the possible scores; as an aggregate not given them, it takes the scale the graph's
    judges declare (their bounded integer outputs, e.g. 1-5) when they share one, and
    otherwise PerQ's 0-3; null means the scores seen. A score or label outside them is a
    ValueError, since it could be counted nowhere.
    """
    rows = [r.get(scores_field) or {} for r in results]
    judges = sorted({name for r in rows for name in r})
    total = len(rows)
    scored = [
        (f"{scores_field}[{name!r}] of {_which(result, i)}", value)
        for i, (result, r) in enumerate(zip(results, rows, strict=True))
        for name, value in r.items()
        if value is not None
    ]
    labelled = [
        (f"{label_field} of {_which(r, i)}", r.get(label_field))
        for i, r in enumerate(results)
        if r.get(label_field) is not None
    ]
    seen = [v for _, v in scored]
    known_text = {str(x) for x in seen}  # once, not per label: it was quadratic in items
    seen += [v for _, v in labelled if str(v) not in known_text]
    categories = _categories(categories, seen)
    _check_scores(scored, categories)
    _check_scores(labelled, categories, as_text=True)
    labels = Counter(
        "n/a" if r.get(label_field) is None else str(r.get(label_field)) for r in results
    )
    distribution = {str(c): labels.get(str(c), 0) for c in categories}
    distribution["n/a"] = labels.get("n/a", 0)

    complete = [[r[j] for j in judges] for r in rows if all(r.get(j) is not None for j in judges)]
    pairwise: dict[str, float | None] = {}
    for a, b in combinations(judges, 2):
        both = [(r[a], r[b]) for r in rows if r.get(a) is not None and r.get(b) is not None]
        pairwise[f"{a}~{b}"] = round(fmean(x == y for x, y in both), 4) if both else None
    known = [v for v in pairwise.values() if v is not None]
    # Here, not at the top: `stats` brings numpy, and this module is imported by every
    # command that compiles a graph (the function registry); numpy's import took 0.16-0.33 s
    # (`-X importtime`), a validate ~1.1 s of CPU in all.
    from ..stats import fleiss_kappa

    kappa = fleiss_kappa(rating_table(complete, categories)) if complete else None
    rated = [[v for v in r.values() if v is not None] for r in rows]
    pairable = [item for item in rated if len(item) >= 2]
    alpha = krippendorff_alpha(pairable, "nominal") if pairable else None
    if total and len(complete) < FEW_COMPLETE * total:
        log.warning(
            "jury_agreement: Fleiss' κ rests on the %d of %d items every judge scored; "
            "Krippendorff's α uses the %d items two judges or more scored",
            len(complete),
            total,
            len(pairable),
        )
    return {
        "items": total,
        "judges": judges,
        "label_distribution": distribution,
        "label_share": {k: round(v / total, 4) for k, v in distribution.items()} if total else {},
        "full_agreement": round(fmean(len(set(r)) == 1 for r in complete), 4) if complete else None,
        "items_all_judges": len(complete),
        "pairwise_agreement": {"mean": round(fmean(known), 4) if known else None, **pairwise},
        "fleiss_kappa": round(kappa, 4) if kappa is not None else None,
        "fleiss_kappa_items": len(complete),
        "krippendorff_alpha": round(alpha, 4) if alpha is not None else None,
        "alpha_items": len(pairable),
        "abstain_rate": {
            j: round(sum(r.get(j) is None for r in rows) / total, 4) if total else None
            for j in judges
        },
    }


@register("label_summary")
def label_summary(
    results: list[Mapping[str, Any]],
    field: str = "label",
    reference_field: str | None = None,
    categories: Sequence[int] | None = (0, 1, 2, 3),
) -> dict[str, Any]:
    """Distribution of a label column and, when rows carry a reference label (e.g. the
    jury's), the exact-agreement rate with it on the rows that have both. A label outside
    `categories` (as in `jury_agreement`: the judges' declared scale, else 0-3; null: the
    labels seen) is a ValueError."""
    present = [
        (f"{field} of {_which(r, i)}", r.get(field))
        for i, r in enumerate(results)
        if r.get(field) is not None
    ]
    categories = _categories(categories, [v for _, v in present])
    _check_scores(present, categories, as_text=True)
    labels = Counter("n/a" if r.get(field) is None else str(r.get(field)) for r in results)
    out: dict[str, Any] = {
        "items": len(results),
        "label_distribution": {
            **{str(c): labels.get(str(c), 0) for c in categories},
            "n/a": labels.get("n/a", 0),
        },
    }
    if reference_field:
        pairs = [
            (r.get(field), r.get(reference_field))
            for r in results
            if r.get(field) is not None and r.get(reference_field) is not None
        ]
        out["reference"] = {
            "field": reference_field,
            "items": len(pairs),
            "agreement": round(fmean(a == b for a, b in pairs), 4) if pairs else None,
        }
    return out
