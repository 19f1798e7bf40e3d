"""Compute nodes: registered pure functions a graph file can call by name."""

from __future__ import annotations

from .bias import position_bias
from .catalog import catalog, catalog_markdown, describe
from .confidence import ASK_FOR_CONFIDENCE, Judged, field_value, judged, wrong_answer
from .distilled import CARD_FILE, SCORER_FILE, Scorer, compose, load_scorer
from .embeddings import encoder, resolve_model_path
from .expert import AGGREGATIONS, aspect_credit, f1, is_matched, mean_credit
from .languages import forget_warnings, primary
from .ratings import ALL, bradley_terry, elo_ratings, length_controlled_win_rate
from .registry import ComputeFunction, names, register, registered, resolve
from .statistics import LEVELS, cohen_kappa, krippendorff_alpha

__all__ = [
    "AGGREGATIONS",
    "ALL",
    "ASK_FOR_CONFIDENCE",
    "CARD_FILE",
    "LEVELS",
    "SCORER_FILE",
    "ComputeFunction",
    "Judged",
    "Scorer",
    "aspect_credit",
    "bradley_terry",
    "catalog",
    "catalog_markdown",
    "cohen_kappa",
    "compose",
    "describe",
    "elo_ratings",
    "encoder",
    "f1",
    "field_value",
    "forget_warnings",
    "is_matched",
    "judged",
    "krippendorff_alpha",
    "length_controlled_win_rate",
    "load_scorer",
    "mean_credit",
    "names",
    "position_bias",
    "primary",
    "register",
    "registered",
    "resolve",
    "resolve_model_path",
    "wrong_answer",
]
