"""Length, position and self-preference bias, each with an interval and a p-value.

Pairwise votes are tested per comparison (one pair of texts of one example and dimension),
not per vote: the two orders of one comparison are not independent, so each comparison's
votes add up to one signed count and the sign-flip test runs over those counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...compute.bias import position_bias as position_tables
from ...compute.ratings import ALL
from .record import LengthBias, PositionBias, PreferLonger, SelfPreference
from .stats import (
    BOOTSTRAP_UP_TO,
    Array,
    bootstrap,
    finite,
    sign_flip_p,
    spearman,
    spearman_interval,
    spearman_p,
    welch_p,
)

DECISIVE = ("first", "second")


def length_bias(
    node: str,
    model: str | None,
    field: str,
    judged: str,
    scores: Sequence[float],
    lengths: Sequence[float],
    seed: int = 0,
) -> LengthBias:
    """Spearman of score against judged-text length, its bootstrap interval and p-value."""
    x = np.asarray(scores, dtype=float)
    y = np.asarray(lengths, dtype=float)
    n = int(x.size)
    rho = float(spearman(x, y)) if n >= 3 else float("nan")
    p = float(spearman_p(np.asarray(rho), n)) if np.isfinite(rho) else float("nan")
    if n > BOOTSTRAP_UP_TO:
        ci = spearman_interval(rho, n)
    else:
        ci = bootstrap(lambda idx: spearman(x[idx], y[idx]), n, seed=seed) if n >= 3 else None
    return LengthBias(
        node=node,
        model=model,
        field=field,
        judged=judged,
        n=n,
        spearman=finite(rho),
        ci=ci if np.isfinite(rho) else None,
        p=finite(p),
    )


@dataclass(frozen=True)
class _Units:
    """Per comparison: how many decisive votes, and how many went the way tested."""

    hits: Array  # votes for the tested side (first slot, or longer text)
    total: Array  # decisive votes counted

    def signed(self) -> Array:
        """Each comparison's votes for minus votes against the tested side."""
        return np.asarray(2.0 * self.hits - self.total)

    def rate_ci(self, seed: int) -> tuple[float | None, Any]:
        """The pooled rate hits / total and its bootstrap interval over comparisons."""
        hits, total = self.hits, self.total
        if total.sum() == 0:
            return None, None

        def rate(idx: Any) -> Array:
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.asarray(hits[idx].sum(axis=1) / total[idx].sum(axis=1))

        return float(hits.sum() / total.sum()), bootstrap(rate, int(total.size), seed=seed)


def _comparison(vote: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(vote.get("case")), str(vote.get("dimension")), str(vote.get("pair")))


def _units(counts: dict[tuple[str, str, str], list[float]]) -> _Units:
    values = np.asarray(list(counts.values()), dtype=float).reshape(-1, 2)
    kept = values[values[:, 1] > 0]
    return _Units(hits=kept[:, 0], total=kept[:, 1])


def _p(units: _Units, seed: int) -> float | None:
    if units.total.size == 0:
        return None
    return float(sign_flip_p(units.signed(), seed=seed))


def _table(votes: list[dict[str, Any]]) -> dict[str, Any]:
    """The existing position-bias statistics of one judge's votes (all dimensions pooled)."""
    tables = position_tables(votes)
    table: dict[str, Any] = next(iter(tables.values()), {})
    return dict(table.get(ALL) or next(iter(table.values()), {}))


def position_bias(
    field: str, judge: str, votes: list[dict[str, Any]], seed: int = 0
) -> PositionBias:
    """Share of decisive votes for the first slot (tested against one half), plus the flip
    and inconsistency rates of comparisons shown in both orders."""
    counts: dict[tuple[str, str, str], list[float]] = {}
    for vote in votes:
        cell = counts.setdefault(_comparison(vote), [0.0, 0.0])
        if vote.get("picked_position") in DECISIVE:
            cell[0] += vote["picked_position"] == "first"
            cell[1] += 1
    units = _units(counts)
    rate, ci = units.rate_ci(seed)
    table = _table(votes)
    return PositionBias(
        votes=field,
        judge=judge,
        decisive_votes=int(units.total.sum()),
        first_rate=rate,
        ci=ci,
        p=_p(units, seed),
        comparisons_both_orders=int(table.get("comparisons_both_orders") or 0),
        flip_rate=table.get("flip_rate"),
        inconsistent_rate=table.get("inconsistent_rate"),
    )


def prefer_longer(
    field: str,
    judge: str,
    votes: list[dict[str, Any]],
    lengths: Mapping[tuple[str, str], int],
    seed: int = 0,
) -> PreferLonger:
    """Share of decisive votes on texts of unequal length that pick the longer one.

    `lengths` maps (case, candidate name) to the length of that candidate's text.
    """
    counts: dict[tuple[str, str, str], list[float]] = {}
    for vote in votes:
        if vote.get("picked_position") not in DECISIVE:
            continue
        winner = str(vote.get("winner"))
        loser = str(vote["b"] if winner == str(vote.get("a")) else vote.get("a"))
        case = str(vote.get("case"))
        won, lost = lengths.get((case, winner)), lengths.get((case, loser))
        if won is None or lost is None or won == lost:
            continue
        cell = counts.setdefault(_comparison(vote), [0.0, 0.0])
        cell[0] += won > lost
        cell[1] += 1
    units = _units(counts)
    rate, ci = units.rate_ci(seed)
    return PreferLonger(
        votes=field,
        judge=judge,
        comparisons=int(units.total.size),
        decisive_votes=int(units.total.sum()),
        rate=rate,
        ci=ci,
        p=_p(units, seed),
    )


def self_preference(
    node: str,
    model: str,
    field: str,
    generator_field: str,
    scores: Sequence[float],
    generators: Sequence[str],
    seed: int = 0,
) -> SelfPreference:
    """Mean score of the judge model's own texts minus the others', Welch p and a bootstrap
    interval that resamples each group on its own."""
    x = np.asarray(scores, dtype=float)
    own_mask = np.asarray([g == model for g in generators], dtype=bool)
    own, others = x[own_mask], x[~own_mask]
    gap = float(own.mean() - others.mean()) if own.size and others.size else float("nan")
    p = float(welch_p(own, others)) if own.size >= 2 and others.size >= 2 else float("nan")
    ci = None
    if own.size >= 2 and others.size >= 2:
        # The other generators' texts are resampled on their own, as many times as the own.
        rng = np.random.default_rng(seed + 1)

        def gaps(idx: Any) -> Array:
            picks = rng.integers(0, others.size, size=(idx.shape[0], others.size))
            return np.asarray(own[idx].mean(axis=1) - others[picks].mean(axis=1))

        ci = bootstrap(gaps, int(own.size), seed=seed, width=int(others.size))
    return SelfPreference(
        node=node,
        model=model,
        field=field,
        generator_field=generator_field,
        own=int(own.size),
        others=int(others.size),
        gap=finite(gap),
        ci=ci,
        p=finite(p),
    )
