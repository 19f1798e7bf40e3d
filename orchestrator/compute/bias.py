"""Position bias of pairwise judges: how often the first (or second) slot wins, and how
often a judge gives the same answer whichever order the pair was shown in."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .pairwise import TIE, plurality
from .ratings import ALL, by_dimension
from .registry import register


def _bias_stats(votes: list[dict[str, Any]]) -> dict[str, Any]:
    picked = Counter(v["picked_position"] for v in votes)
    total = len(votes)
    decisive = picked["first"] + picked["second"]
    by_comparison: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for v in votes:
        key = (v.get("case"), v.get("dimension"), v["pair"])
        by_comparison.setdefault(key, {}).setdefault(str(v.get("order")), []).append(v)
    both = flips = inconsistent = 0
    for orders in by_comparison.values():
        if "ab" not in orders or "ba" not in orders:
            continue
        both += 1
        winners = []
        for order in ("ab", "ba"):
            group = orders[order]
            a, b = group[0]["a"], group[0]["b"]
            counts = Counter(v["winner"] for v in group)
            winners.append(plurality(counts[a], counts[b], a, b))
        if winners[0] != winners[1]:
            inconsistent += 1
            if TIE not in winners:
                flips += 1
    return {
        "votes": total,
        "first_rate": picked["first"] / total if total else None,
        "second_rate": picked["second"] / total if total else None,
        "tie_rate": picked[TIE] / total if total else None,
        "first_rate_decisive": picked["first"] / decisive if decisive else None,
        "comparisons_both_orders": both,
        "flip_rate": flips / both if both else None,
        "inconsistent_rate": inconsistent / both if both else None,
    }


@register("position_bias")
def position_bias(votes: list[dict[str, Any]]) -> dict[str, Any]:
    """Per judge and dimension: how often each position is picked, ties, and order flips.

    `first_rate` counts every vote; `first_rate_decisive` leaves ties out. A comparison
    shown in both orders *flips* when each order's plurality picks a different generator
    (the judge followed the position); `inconsistent_rate` also counts a tie in one
    order against a win in the other. Votes from different cases need a `case` key.

    Returns {judge: {dimension: {votes, first_rate, second_rate, tie_rate,
    first_rate_decisive, comparisons_both_orders, flip_rate, inconsistent_rate}}}.
    """
    tables: dict[str, Any] = {}
    by_judge: dict[str, list[dict[str, Any]]] = {}
    for vote in votes:
        by_judge.setdefault(str(vote.get("judge") or "judge"), []).append(vote)
    for judge, group in by_judge.items():
        dimensions = by_dimension(group)
        table = {dim: _bias_stats(items) for dim, items in dimensions.items()}
        if len(dimensions) > 1:
            table[ALL] = _bias_stats(group)
        tables[judge] = table
    return tables


@register("same_answer_rate")
def same_answer_rate(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Share of examples whose verdicts are identical across all dimensions (aspect collapse)."""
    usable = [v for v in verdicts if isinstance(v, dict) and len(v) > 1]
    same = sum(len(set(map(str, v.values()))) == 1 for v in usable)
    return {"examples": len(usable), "same": same, "rate": same / len(usable) if usable else None}
