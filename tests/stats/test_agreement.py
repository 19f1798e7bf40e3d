"""Agreement beyond chance (orchestrator/stats/agreement.py): α of every bootstrap resample
at once equals Krippendorff's α of the resample (moved here from
tests/analysis/test_stability.py), and the coded κ and α equal sklearn's and the
`krippendorff` package's (the compute functions' checks are in tests/compute/)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.analysis.card.stability import Level
from orchestrator.analysis.metaeval_stats import alpha
from orchestrator.stats import cohen_kappa_codes, krippendorff_alpha_counts, weighted_alpha


@pytest.mark.parametrize("level", ["nominal", "interval"])
def test_the_resampled_alpha_is_krippendorffs_alpha_of_the_resample(level: Level) -> None:
    rng = np.random.default_rng(5)
    for _ in range(30):
        matrix = rng.integers(0, 4, size=(12, 4)).astype(float)
        matrix[rng.random(matrix.shape) < 0.25] = np.nan
        picked = rng.integers(0, 12, 12)
        weights = np.stack([np.ones(12), np.bincount(picked, minlength=12).astype(float)])
        whole, resample = weighted_alpha(matrix, level, weights)
        for got, want in ((whole, alpha(matrix, level)), (resample, alpha(matrix[picked], level))):
            assert (want is None and np.isnan(got)) or got == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_coded_kappa_equals_sklearn(weights: str | None) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(6)
    first = rng.integers(0, 5, 60)
    second = np.clip(first + rng.integers(-1, 2, 60), 0, 4)
    expected = metrics.cohen_kappa_score(first, second, weights=weights)
    assert cohen_kappa_codes(list(first), list(second), 5, weights) == pytest.approx(
        expected, abs=1e-12
    )


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
def test_alpha_from_counts_equals_the_krippendorff_package(level: str) -> None:
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(7)
    ratings = rng.integers(1, 6, size=(3, 30)).astype(float)  # raters × units
    ratings[rng.random(ratings.shape) < 0.2] = np.nan
    domain = [1.0, 2.0, 3.0, 4.0, 5.0]
    rated = (~np.isnan(ratings)).sum(axis=0) >= 2
    counts = np.stack([(ratings[:, rated] == value).sum(axis=0) for value in domain], axis=1)
    expected = krippendorff.alpha(
        reliability_data=ratings, level_of_measurement=level, value_domain=domain
    )
    found = krippendorff_alpha_counts(counts.astype(float), level, domain)
    assert found == pytest.approx(expected, abs=1e-9)
