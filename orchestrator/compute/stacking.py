"""Stacked (logistic-regression) style ensembles, and a held-out check of every ensemble.

MV and PWV weight each metric by its own accuracy, so several correlated weaker metrics can
outvote a dominant one. Stacking fits all weights together by likelihood on a calibration
run's votes. The held-out report checks whether any ensemble beats the best single metric.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from statistics import fmean
from typing import Any

from .registry import register
from .votes import Vote, is_correct, majority_vote, weight, weighted_vote

Row = tuple[str, Mapping[str, Vote]]  # (which candidate is positive, 'a' or 'b'; votes)
ENSEMBLES = ("mv", "pwv", "lr")
FEATURES = "member votes +1/0/-1 (unavailable = 0), no intercept"


def _label(positive: str) -> float:
    return 1.0 if positive == "a" else -1.0


def available_members(rows: Sequence[Row], members: Sequence[str]) -> list[str]:
    """The members with at least one vote in `rows` (METEOR without WordNet has none)."""
    return [m for m in members if any(votes.get(m) is not None for _, votes in rows)]


def fit_set(rows: Sequence[Row], members: Sequence[str], l2: float = 1.0) -> dict[str, Any]:
    """Stacking weights for one metric set, fit on the rows where any member voted."""
    used = available_members(rows, members)
    usable = [(p, v) for p, v in rows if any(v.get(m) is not None for m in used)]
    if not usable:
        return {"members": [], "weights": {}, "n": 0, "reason": "no member voted on any row"}
    # Here, not at the top: every command that compiles a graph imports this module (the
    # function registry loads them all); numpy's import took 0.16-0.33 s (`-X importtime`).
    import numpy as np

    from ..stats import fit_logistic

    x = np.array([[float(v.get(m) or 0) for m in used] for _, v in usable])
    y = np.array([_label(p) for p, _ in usable])
    w, converged = fit_logistic(x, y, l2)
    return {
        "members": used,
        "weights": {m: float(w[i]) for i, m in enumerate(used)},
        "n": len(usable),
        "converged": converged,
    }


def _accuracy(rows: Sequence[Row], voter: Callable[[Mapping[str, Vote]], Vote]) -> float:
    """Strict accuracy over all rows: a tie, an abstention or no vote at all is wrong."""
    return fmean(is_correct(voter(votes), positive) for positive, votes in rows) if rows else 0.0


def _single(member: str) -> Callable[[Mapping[str, Vote]], Vote]:
    return lambda votes: votes.get(member)


def score_split(
    fit: Sequence[Row],
    test: Sequence[Row],
    members: Sequence[str],
    l2: float = 1.0,
    weight_form: str = "accuracy",
) -> dict[str, Any]:
    """Fit on `fit`, score `test`: the best single member (chosen on `fit`), MV, PWV, LR.

    The best single member is the one with the highest accuracy on the fit half; on a tie,
    the first in set order. PWV weights come from the fit-half accuracies too.
    """
    on_fit = {m: _accuracy(fit, _single(m)) for m in members}
    best = max(members, key=lambda m: on_fit[m])
    pwv = {m: weight(a, weight_form) for m, a in on_fit.items()}
    lr = fit_set(fit, members, l2)["weights"]
    voters: dict[str, Callable[[Mapping[str, Vote]], Vote]] = {
        "best_single": _single(best),
        "mv": lambda v: majority_vote(v, members),
        "pwv": lambda v: weighted_vote(v, members, pwv),
        "lr": lambda v: weighted_vote(v, members, lr),
    }
    return {
        "best_single": best,
        "accuracy": {name: round(_accuracy(test, fn), 4) for name, fn in voters.items()},
    }


def _summarise(splits: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over splits, and how often each ensemble beats, ties or trails the best single."""
    mean = {
        name: round(fmean(s["accuracy"][name] for s in splits), 4)
        for name in ("best_single", *ENSEMBLES)
    }
    picked: dict[str, int] = {}
    for s in splits:
        picked[s["best_single"]] = picked.get(s["best_single"], 0) + 1
    versus: dict[str, Any] = {}
    for name in ENSEMBLES:
        diffs = [s["accuracy"][name] - s["accuracy"]["best_single"] for s in splits]
        wins = sum(d > 1e-9 for d in diffs)
        losses = sum(d < -1e-9 for d in diffs)
        versus[name] = {
            "wins": wins,
            "ties": len(diffs) - wins - losses,
            "losses": losses,
            "share_wins": round(wins / len(diffs), 4),
            # "Beats" needs both a higher mean and more wins than losses over the splits.
            "beats_best_single": mean[name] > mean["best_single"] and wins > losses,
        }
    winners = [n for n in ENSEMBLES if versus[n]["beats_best_single"]]
    verdict = (
        f"{', '.join(winners)} beat(s) the best single metric on held-out halves"
        if winners
        else "no ensemble beats the best single metric on held-out halves"
    )
    return {
        "mean": mean,
        "best_single_picked": picked,
        "versus_best_single": versus,
        "verdict": verdict,
    }


def heldout_report(
    rows: Sequence[Row],
    sets: Mapping[str, Sequence[str]],
    splits: int = 200,
    seed: int = 0,
    l2: float = 1.0,
    weight_form: str = "accuracy",
) -> dict[str, Any]:
    """Over `splits` seeded random half splits, fit on one half and score the other, per set."""
    n = len(rows)
    info: dict[str, Any] = {
        "splits": splits,
        "seed": seed,
        "fit_rows": n // 2,
        "test_rows": n - n // 2,
        "l2": l2,
        "weight_form": weight_form,
        "accuracy": "strict, pooled over the held-out half; no vote counts wrong",
    }
    if n < 4 or splits < 1:
        return {**info, "available": False, "reason": f"{n} rows: too few for half splits"}
    rng = random.Random(seed)
    halves = []
    for _ in range(splits):
        order = list(range(n))
        rng.shuffle(order)
        halves.append(([rows[i] for i in order[: n // 2]], [rows[i] for i in order[n // 2 :]]))
    out: dict[str, Any] = {}
    for name, members in sets.items():
        used = available_members(rows, members)
        if not used:
            out[name] = {"available": False, "reason": "no member voted on any row"}
            continue
        per_split = [score_split(fit, test, used, l2, weight_form) for fit, test in halves]
        out[name] = {"available": True, "members": used, **_summarise(per_split)}
        out[name]["splits"] = per_split
    return {**info, "available": True, "sets": out}


def truth_rows(
    results: Sequence[Mapping[str, Any]], votes_field: str = "votes"
) -> tuple[list[Row], list[str]]:
    """(positive, votes) for every result with a/b truth, and the ids of those results."""
    rows: list[Row] = []
    ids: list[str] = []
    for result in results:
        positive = str(result.get("positive", "")).lower()
        if positive not in ("a", "b"):
            continue
        rows.append((positive, dict(result.get(votes_field) or {})))
        if result.get("id") is not None:
            ids.append(str(result["id"]))
    return rows, ids


@register("style_stacking")
def style_stacking(
    results: list[Mapping[str, Any]],
    sets: Mapping[str, Sequence[str]],
    l2: float = 1.0,
    splits: int = 200,
    seed: int = 0,
    weight_form: str = "accuracy",
    votes_field: str = "votes",
    split: str | None = None,
) -> dict[str, Any]:
    """Stacking weights per metric set (`fit`) and a held-out check of every ensemble.

    A later run reads `fit` for its lr:NAME votes; `heldout` compares the best single
    metric with MV, PWV and LR over seeded random half splits of these rows.
    """
    rows, ids = truth_rows(results, votes_field)
    fitted = {}
    for name, members in sets.items():
        entry = fit_set(rows, members, l2)
        entry["weights"] = {m: round(w, 6) for m, w in entry["weights"].items()}
        fitted[name] = entry
    fit = {
        "split": split,
        "l2": l2,
        "features": FEATURES,
        "n": len(rows),
        "sets": fitted,
        "ids": ids,
    }
    return {"fit": fit, "heldout": heldout_report(rows, sets, splits, seed, l2, weight_form)}
