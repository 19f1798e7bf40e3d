"""`orc.calibrate`: a confidence threshold under which a judge abstains, with a risk bound."""

from __future__ import annotations

from pathlib import Path

from ..analysis.calibrate import Calibration, calibrate_run

__all__ = ["Calibration", "calibrate"]


def calibrate(
    run_dir: str | Path,
    labels: str | Path,
    *,
    node: str,
    field: str,
    risk: float,
    delta: float = 0.1,
    tolerance: float = 0.0,
) -> Calibration:
    """The threshold at which `node`'s answers in `field` err on at most `risk` of the
    examples it answers, with probability at least 1 − `delta`, from a labelled run.

    `labels` is a JSONL file as `meta-eval` reads it; an answer further than `tolerance`
    from a score label (or any other choice) is an error. Confidence is the probability of
    the answer's token (the node asked for `logprobs:`) or the share of its `n:` samples
    that agree with the answer; a run with neither raises CalibrationError. When no
    threshold meets `risk`, `threshold` is None and `coverage` 0. Learn then Test with
    fixed-sequence testing and exact binomial p-values: see `analysis.calibrate`.
    """
    return calibrate_run(
        run_dir, labels, node=node, field=field, risk=risk, delta=delta, tolerance=tolerance
    )
