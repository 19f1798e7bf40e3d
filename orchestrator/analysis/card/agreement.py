"""Agreement with people: the meta-eval statistics (correlations or accuracy, α, intervals,
the human ceiling) of the run against a labels file, kept whole in the card."""

from __future__ import annotations

from pathlib import Path

from ..metaeval import meta_eval
from .record import Agreement


def agreement(
    run_dir: Path, labels: Path, field: str | None, seed: int = 0, cluster: str | None = None
) -> Agreement:
    """Meta-eval of the run against `labels` (it also writes RUN_DIR/meta_eval.json, as the
    `meta-eval` command does), its bootstrap over the clusters of `cluster` when given."""
    statistics = meta_eval(run_dir, labels, field, seed=seed, cluster=cluster)
    return Agreement(labels=str(labels), field=field, statistics=statistics)
