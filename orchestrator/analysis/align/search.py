"""The search's bookkeeping: a configuration's fold scores and the choice among them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import isotonic as iso
from .labels import Coder
from .record import Configuration, Metric, Trial, Variant
from .scoring import Kind, mean_score, measure


def trial(
    configuration: Configuration,
    found: Mapping[str, Any],
    fold_ids: Sequence[Sequence[str]],
    coder: Coder,
    metric: Metric,
    kind: Kind,
    snap: Sequence[float],
) -> Trial:
    """A configuration's score on each fold from its answers there; with isotonic, the
    answers of fold k go through the map fitted on the other folds' answers only."""
    scores = []
    for k, fold in enumerate(fold_ids):
        judged = coder.answers(found, fold)
        if configuration.isotonic:
            rest = [x for j, f in enumerate(fold_ids) if j != k for x in f]
            fitted = iso.fit(coder.answers(found, rest), coder.labels(rest))
            judged = iso.apply(fitted, judged, snap)
        scores.append(measure(metric, judged, coder.labels(fold), kind))
    return Trial(configuration=configuration, folds=scores, score=mean_score(scores))


def choose(trace: Sequence[Trial], variants: Sequence[Variant]) -> Configuration:
    """The best search score; ties go to fewer shots, then the variant listed first (the
    graph as given), then isotonic off. An undefined score ranks last."""
    best = min(
        trace,
        key=lambda t: (
            -(t.score if t.score is not None else -np.inf),
            t.configuration.shots,
            variants.index(t.configuration.variant),
            t.configuration.isotonic,
        ),
    )
    return best.configuration
