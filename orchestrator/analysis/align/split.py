"""The one seeded split of labelled examples into a search set and a test set, and the
search set's folds, both stratified by label where the labels allow.

Stratifying: each example's stratum is its label (a choice, or a score when there are
at most `MAX_LEVELS` distinct ones; else one of `SCORE_BINS` quantile bins). Every
stratum's examples are shuffled with the seed and laid end to end, stratum after stratum;
the test set takes evenly spaced positions of that sequence and folds are dealt round
robin along it, so each stratum is shared out in proportion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ConfigurationError

MAX_LEVELS = 10  # score labels with this many distinct values or fewer are their own strata
SCORE_BINS = 5


def strata(truth: Mapping[str, Any]) -> dict[str, str]:
    """Example id → its stratum: the label itself, or its score's quantile bin."""
    values = list(truth.values())
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if not numeric or len(set(values)) <= MAX_LEVELS:
        return {k: str(v).strip().casefold() for k, v in truth.items()}
    ordered = sorted(truth, key=lambda k: (float(truth[k]), k))
    return {k: f"bin{i * SCORE_BINS // len(ordered)}" for i, k in enumerate(ordered)}


def _sequence(ids: Sequence[str], groups: Mapping[str, str], rng: np.random.Generator) -> list[str]:
    """The ids shuffled within their stratum, strata laid end to end in sorted order."""
    by_stratum: dict[str, list[str]] = {}
    for example in sorted(ids):
        by_stratum.setdefault(groups.get(example, ""), []).append(example)
    out: list[str] = []
    for name in sorted(by_stratum):
        members = by_stratum[name]
        out += [members[i] for i in rng.permutation(len(members))]
    return out


def split(
    ids: Sequence[str], groups: Mapping[str, str], test_share: float, seed: int
) -> tuple[list[str], list[str]]:
    """(search ids, test ids), each sorted: about `test_share` of every stratum is test."""
    if not 0.0 < test_share < 1.0:
        raise ConfigurationError(f"test_share must be between 0 and 1, got {test_share!r}")
    order = _sequence(ids, groups, np.random.default_rng([seed, 0]))
    # Evenly spaced picks along the stratified sequence: floor((i + 1)·s) steps up at i.
    test = {
        x
        for i, x in enumerate(order)
        if math.floor((i + 1) * test_share + 1e-9) > math.floor(i * test_share + 1e-9)
    }
    return sorted(x for x in order if x not in test), sorted(test)


def folds(ids: Sequence[str], groups: Mapping[str, str], k: int, seed: int) -> list[list[str]]:
    """`k` disjoint folds covering `ids` (each sorted), dealt round robin along the
    stratified sequence so every stratum is spread over the folds."""
    if k < 2:
        raise ConfigurationError(f"the search needs at least 2 folds, not {k}")
    if len(ids) < k:
        raise ConfigurationError(
            f"{len(ids)} search examples cannot fill {k} folds: label more or lower folds"
        )
    order = _sequence(ids, groups, np.random.default_rng([seed, 1]))
    return [sorted(order[start::k]) for start in range(k)]
