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
    ids: Sequence[str],
    groups: Mapping[str, str],
    test_share: float,
    seed: int,
    clusters: Mapping[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """(search ids, test ids), each sorted: about `test_share` of every stratum is test.
    With `clusters` (example id → cluster; an example without one is its own) every
    cluster lies wholly on one side, so the test score is for users the search never saw."""
    if not 0.0 < test_share < 1.0:
        raise ConfigurationError(f"test_share must be between 0 and 1, got {test_share!r}")
    if clusters is not None:
        return _split_clusters(ids, clusters, test_share, seed)
    order = _sequence(ids, groups, np.random.default_rng([seed, 0]))
    # Evenly spaced picks along the stratified sequence: floor((i + 1)·s) steps up at i.
    test = {
        x
        for i, x in enumerate(order)
        if math.floor((i + 1) * test_share + 1e-9) > math.floor(i * test_share + 1e-9)
    }
    return sorted(x for x in order if x not in test), sorted(test)


def _split_clusters(
    ids: Sequence[str], clusters: Mapping[str, str], test_share: float, seed: int
) -> tuple[list[str], list[str]]:
    """Whole clusters, taken in a seeded order, go to the test side while each brings its
    size nearer `test_share` of the examples; one cluster at least stays on each side.
    Labels are balanced between the sides only as the clusters happen to fall."""
    members: dict[str, list[str]] = {}
    for example in sorted(ids):
        # "\0" keeps an example without a cluster from meeting a real value.
        members.setdefault(clusters.get(example, f"\0{example}"), []).append(example)
    if len(members) < 2:
        raise ConfigurationError(
            f"{len(ids)} labelled examples fall in {len(members)} cluster: a split that keeps "
            "clusters whole needs at least 2 (label more users, or leave out --cluster)"
        )
    names = sorted(members)
    order = [names[i] for i in np.random.default_rng([seed, 2]).permutation(len(names))]
    target = test_share * len(ids)
    test: list[str] = []
    kept = len(ids)  # examples still on the search side
    for name in order:
        size = len(members[name])
        nearer = abs(len(test) + size - target) < abs(len(test) - target)
        if not test or (nearer and kept > size):  # never the search side's last cluster
            test += members[name]
            kept -= size
    chosen = set(test)
    return sorted(x for x in ids if x not in chosen), sorted(test)


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
