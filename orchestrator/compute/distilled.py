"""The distilled scorer as a compute node: a text scored by a model `orchestrator distill`
trained, with no LLM call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .metrics import METRICS_EXTRA
from .registry import register


@register(
    "distilled_score",
    blocking=True,
    requires=("sentence_transformers", "sklearn", "joblib"),
    extra=METRICS_EXTRA,
    reads_files=("model_dir",),  # scorer.joblib is a pickle
)
def distilled_score(text: str, model_dir: str, context: str | None = None) -> dict[str, Any]:
    """Score one text with a scorer trained by `orchestrator distill` (no LLM call)."""
    from ..analysis.distill import load_scorer

    if not model_dir:
        raise ValueError("model_dir is empty: pass the folder `orchestrator distill` wrote")
    return load_scorer(Path(model_dir)).score_one(text, context)
