"""`orc.estimate`: a run's mean with a valid interval from the judge and a few human labels;
`orc.label_plan`: which examples those labels should be."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from ..analysis import Estimation, LabelPlan, estimate_mean, keep_estimate, keep_plan, write_plan
from ..analysis import label_plan as make_plan

__all__ = ["Estimation", "LabelPlan", "estimate", "label_plan"]


def estimate(
    run: str | Path | Sequence[str | Path],
    labels: str | Path | Sequence[str | Path],
    *,
    field: str,
    label_field: str | None = None,
    win: str | None = None,
    cluster: str | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    width: float | None = None,
    small_sample: Literal["auto", "off"] = "auto",
    keep: bool = False,
) -> Estimation:
    """The PPI++ estimate of the mean of `field` (each value's share for a categorical
    field) over `run`, from its judge answers and the human labels in `labels` (JSONL,
    `{"id", "score"}` as `judge-card` and `align` read them; `label_field` names another
    key), with a two-sided 1 − `alpha` interval, beside the labels-only (classical) and
    judge-only (naive) estimates, the λ used and the effective number of labels.

    Two runs `[a, b]` over the same examples, each with its labels file, give the mean
    difference b − a; `win` names the side of a pairwise verdict whose win rate (ties
    counting half) is wanted; `cluster` names a row field (a user) whose clusters every
    interval resamples whole (seeded by `seed`). Labels without a `probability` are taken
    as a random subset and the run's other examples as the unlabelled part; labels from
    `label-plan` (with `probability`) weigh 1/π against every example of the run.
    With `width`, the labels are a pilot and `labels_needed` says how many labels a PPI++
    interval of that total width needs (`labels_needed_classical`: the labels alone).
    Below 100 labels (unweighted, unclustered) the intervals are bootstrap-t unless
    `small_sample` is "off", which keeps ppi-python's normal interval. `keep` writes the
    record into the (first) run folder, `estimates/FIELD….json`, for the report's
    Estimates panel (replacing only an estimate kept there before).
    docs/estimate.md says when to trust which.
    """
    found = estimate_mean(
        run,
        labels,
        field=field,
        label_field=label_field,
        win=win,
        cluster=cluster,
        alpha=alpha,
        seed=seed,
        width=width,
        small_sample=small_sample,
    )
    return keep_estimate(found) if keep else found


def label_plan(
    run: str | Path,
    *,
    budget: int,
    field: str,
    out: str | Path | None = None,
    node: str | None = None,
    seed: int = 0,
    overwrite: bool = False,
    keep: bool = False,
) -> LabelPlan:
    """Exactly `budget` examples of `run` for people to label, with inclusion probabilities
    that lean towards those where the judge (`node`, or the one node that recorded a
    confidence) was unsure of `field`, uniform when none did; written to `out` as JSONL
    `{"id", "probability"}` when given (a new file, or with `overwrite` a plan nobody has
    labelled yet). Label the lines, keep `probability`, and `estimate` weighs by it. `keep`
    also writes it into the run folder (`estimates/plan.FIELD.json`) for the report."""
    plan = make_plan(run, budget=budget, field=field, node=node, seed=seed)
    if out is not None:
        plan = write_plan(plan, Path(out), overwrite)
    return keep_plan(plan) if keep else plan
