"""`orc.estimate`: a run's mean with a valid interval from the judge and a few human labels."""

from __future__ import annotations

from pathlib import Path

from ..analysis import Estimation, estimate_mean

__all__ = ["Estimation", "estimate"]


def estimate(
    run: str | Path,
    labels: str | Path,
    *,
    field: str,
    label_field: str | None = None,
    alpha: float = 0.05,
) -> Estimation:
    """The PPI++ estimate of the mean of `field` (each value's share for a categorical
    field) over `run`, from its judge answers and the human labels in `labels` (JSONL,
    `{"id", "score"}` as `judge-card` and `align` read them; `label_field` names another
    key), with a two-sided 1 − `alpha` interval, beside the labels-only (classical) and
    judge-only (naive) estimates, the λ used and the effective number of labels.

    Labels without a `probability` are taken as a random subset and the run's other
    examples as the unlabelled part; labels from `label-plan` (with `probability`) weigh
    1/π against every example of the run. docs/estimate.md says when to trust which.
    """
    return estimate_mean(run, labels, field=field, label_field=label_field, alpha=alpha)
