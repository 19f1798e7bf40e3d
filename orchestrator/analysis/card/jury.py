"""Juries: pairwise Krippendorff's α between jurors, and how many independent jurors the
jury is worth (the participation ratio of the jurors' correlation matrix's eigenvalues)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
from numpy.typing import NDArray

from ...compute import krippendorff_alpha
from .record import Jury, JuryPair


def effective_jurors(scores: NDArray[np.float64]) -> float | None:
    """(Σλ)² / Σλ² over the eigenvalues λ of the jurors' Pearson correlation matrix:
    k for k uncorrelated jurors, 1 for k copies; None when a juror's scores are constant."""
    if scores.shape[0] < 3 or scores.shape[1] < 2 or np.any(scores.std(axis=0) == 0):
        return None
    eigen = np.linalg.eigvalsh(np.corrcoef(scores, rowvar=False))
    return float(eigen.sum() ** 2 / (eigen**2).sum())


def jury(jurors: list[str], field: str, columns: dict[str, dict[str, float]]) -> Jury:
    """The jury of `jurors`, whose `columns[juror]` maps example id to that juror's score."""
    pairs = []
    for a, b in combinations(jurors, 2):
        both = sorted(set(columns[a]) & set(columns[b]))
        ratings = [[columns[a][i], columns[b][i]] for i in both]
        value = krippendorff_alpha(ratings, "interval") if len(both) >= 2 else None
        pairs.append(JuryPair(a=a, b=b, n=len(both), alpha=value))
    common = sorted(set.intersection(*(set(columns[j]) for j in jurors))) if jurors else []
    matrix = np.asarray([[columns[j][i] for j in jurors] for i in common], dtype=float)
    return Jury(
        jurors=jurors,
        field=field,
        n=len(common),
        pairs=pairs,
        effective_jurors=effective_jurors(matrix.reshape(len(common), len(jurors))),
    )
