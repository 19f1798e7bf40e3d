"""Length, position and self-preference bias, each with an interval and a p-value.

Pairwise votes are tested per comparison (one pair of texts of one example and dimension),
not per vote: the two orders of one comparison are not independent, so each comparison's
votes add up to one signed count and the sign-flip test runs over those counts. With
`--cluster FIELD` (examples nested in users) the counts are summed per cluster and whole
clusters are flipped and resampled, so one user's many comparisons count as one unit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...compute import ALL
from ...compute import position_bias as position_tables
from ...stats import (
    RESAMPLES,
    bootstrap,
    bootstrap_p,
    cluster_rank_p,
    cluster_sums,
    correlation_p,
    finite,
    generator,
    percentile_interval,
    resample,
    resampled,
    sign_flip_p,
    spearman,
    spearman_interval,
    welch_p,
)
from ..groups import cluster_labels
from .record import LengthBias, PositionBias, PreferLonger, SelfPreference

Array = NDArray[np.float64]
DECISIVE = ("first", "second")
BOOTSTRAP_UP_TO = 1000  # examples; above, Spearman's interval is the Fisher-z one


def length_bias(
    node: str,
    model: str | None,
    field: str,
    judged: str,
    scores: Sequence[float],
    lengths: Sequence[float],
    seed: int = 0,
    clusters: Sequence[str] | None = None,
) -> LengthBias:
    """Spearman of score against judged-text length, its bootstrap interval and p-value.

    With `clusters` (each score's cluster, e.g. its user) whole clusters are resampled for
    the interval, and the p-value is the t-test of the clusters' rank-product sums with
    G − 1 degrees of freedom (`stats.cluster_rank_p`): the t-approximation takes every
    score for independent, and the cluster bootstrap's p was too ready with few clusters."""
    x = np.asarray(scores, dtype=float)
    y = np.asarray(lengths, dtype=float)
    n = int(x.size)
    rho = float(spearman(x, y)) if n >= 3 else float("nan")
    p = float(correlation_p(rho, n)) if np.isfinite(rho) else float("nan")
    if clusters is not None and n >= 3 and np.isfinite(rho):
        values = resampled(lambda idx: spearman(x[idx], y[idx]), n, seed=seed, clusters=clusters)
        ci = percentile_interval(values, least=RESAMPLES / 2)
        p = float(cluster_rank_p(x, y, clusters))
    elif n > BOOTSTRAP_UP_TO:
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
    """Per comparison: how many decisive votes, and how many went the way tested; with
    `clusters`, each comparison's cluster (its example's, e.g. its user)."""

    hits: Array  # votes for the tested side (first slot, or longer text)
    total: Array  # decisive votes counted
    clusters: list[str] | None = None

    def signed(self) -> Array:
        """Each comparison's (or, with clusters, each cluster's) votes for minus votes
        against the tested side: the units the sign-flip test flips."""
        signed = np.asarray(2.0 * self.hits - self.total)
        return signed if self.clusters is None else cluster_sums(signed, self.clusters)

    def rate_ci(self, seed: int) -> tuple[float | None, Any]:
        """The pooled rate hits / total and its bootstrap interval over comparisons."""
        hits, total = self.hits, self.total
        if total.sum() == 0:
            return None, None

        def rate(idx: Any) -> Array:
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.asarray(hits[idx].sum(axis=1) / total[idx].sum(axis=1))

        found = bootstrap(rate, int(total.size), seed=seed, clusters=self.clusters)
        return float(hits.sum() / total.sum()), found


def _comparison(vote: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(vote.get("case")), str(vote.get("dimension")), str(vote.get("pair")))


def _units(
    counts: dict[tuple[str, str, str], list[float]], clusters: Mapping[str, str] | None = None
) -> _Units:
    """The comparisons with a decisive vote; `clusters` maps an example id to its cluster."""
    values = np.asarray(list(counts.values()), dtype=float).reshape(-1, 2)
    keep = values[:, 1] > 0
    kept = values[keep]
    labels = None
    if clusters is not None:
        cases = [key[0] for key, kept_one in zip(counts, keep, strict=True) if kept_one]
        labels = cluster_labels(cases, clusters)
    return _Units(hits=kept[:, 0], total=kept[:, 1], clusters=labels)


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
    field: str,
    judge: str,
    votes: list[dict[str, Any]],
    seed: int = 0,
    clusters: Mapping[str, str] | None = None,
) -> PositionBias:
    """Share of decisive votes for the first slot (tested against one half), plus the flip
    and inconsistency rates of comparisons shown in both orders; `clusters` (example id →
    cluster) makes the interval and the test resample and flip whole clusters."""
    counts: dict[tuple[str, str, str], list[float]] = {}
    for vote in votes:
        cell = counts.setdefault(_comparison(vote), [0.0, 0.0])
        if vote.get("picked_position") in DECISIVE:
            cell[0] += vote["picked_position"] == "first"
            cell[1] += 1
    units = _units(counts, clusters)
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
    clusters: Mapping[str, str] | None = None,
) -> PreferLonger:
    """Share of decisive votes on texts of unequal length that pick the longer one.

    `lengths` maps (case, candidate name) to the length of that candidate's text;
    `clusters` as for `position_bias`.
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
    units = _units(counts, clusters)
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
    clusters: Sequence[str] | None = None,
) -> SelfPreference:
    """Mean score of the judge model's own texts minus the others', Welch p and a bootstrap
    interval that resamples each group on its own; with `clusters` (each score's cluster)
    whole clusters are resampled, both groups together, and p is that bootstrap's."""
    x = np.asarray(scores, dtype=float)
    own_mask = np.asarray([g == model for g in generators], dtype=bool)
    own, others = x[own_mask], x[~own_mask]
    gap = float(own.mean() - others.mean()) if own.size and others.size else float("nan")
    p = float(welch_p(own, others)) if own.size >= 2 and others.size >= 2 else float("nan")
    ci = None
    if clusters is not None and own.size >= 2 and others.size >= 2:

        def cluster_gaps(idx: Any) -> Array:
            mine, theirs = own_mask[idx], ~own_mask[idx]
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.asarray(
                    (x[idx] * mine).sum(axis=1) / mine.sum(axis=1)
                    - (x[idx] * theirs).sum(axis=1) / theirs.sum(axis=1)
                )

        values = resampled(cluster_gaps, int(x.size), seed=seed, clusters=clusters)
        ci, p = percentile_interval(values, least=RESAMPLES / 2), bootstrap_p(values)
    elif own.size >= 2 and others.size >= 2:
        # The other generators' texts are resampled on their own, as many times as the own.
        second = generator(seed + 1)

        def gaps(idx: Any) -> Array:
            picks = resample(second, others.size, idx.shape[0])
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
