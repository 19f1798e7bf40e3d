"""Surface style of an answer: the counts pairwise ratings control for.

A judge that prefers long or heavily formatted answers rewards style, not substance.
Arena-Hard-Auto's style control and AlpacaEval's length-controlled win rate fit that
preference as covariates of the pairwise model, so each vote carries the style of both
answers (`map_votes` adds them) and `bradley_terry(style=...)` /
`length_controlled_win_rate` read them.
"""

from __future__ import annotations

import re
from typing import Any

from .registry import register

# The features, in the order they enter the fit. `length` counts characters (AlpacaEval
# counts characters; Arena-Hard counts tokens of its own tokenizer, which the ratio
# normalisation below makes nearly the same covariate).
FEATURES = ("length", "headers", "lists", "bold")

_HEADER = re.compile(r"^#{1,6}\s+\S", re.MULTILINE)
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")


@register("style_features")
def style_features(text: Any) -> dict[str, int]:
    """Characters, markdown headers, list items and bold spans of one text."""
    value = "" if text is None else str(text)
    return {
        "length": len(value),
        "headers": len(_HEADER.findall(value)),
        "lists": len(_LIST.findall(value)),
        "bold": len(_BOLD.findall(value)),
    }


def style_names(style: bool | list[str] | tuple[str, ...] | None) -> list[str]:
    """The features a `style` argument asks for: True means all of them, a list those named."""
    if style is None or style is False:
        return []
    if style is True:
        return list(FEATURES)
    if isinstance(style, str) or not isinstance(style, list | tuple):
        raise ValueError(f"style must be true, false or a list of {', '.join(FEATURES)}")
    unknown = [str(s) for s in style if s not in FEATURES]
    if unknown:
        raise ValueError(f"style features {', '.join(unknown)} are not among {', '.join(FEATURES)}")
    return [str(s) for s in style]


def style_differences(matches: list[dict[str, Any]], features: list[str]) -> Any:
    """Per match and feature, a's style minus b's as a ratio, scaled (after Arena-Hard).

    (a - b) / (a + b + 1) keeps a 2000- against 1000-character gap comparable to 200
    against 100. Each column is divided by its root mean square so every coefficient is on
    one scale. Arena-Hard also subtracts the mean, which is harmless where a and b are
    the battle's random positions; here `a` is the alphabetically first name, so a mean
    would be an artefact of the names and subtracting it would shift the ratings. A
    feature that never differs gives a zero column (nothing to control for).
    """
    import numpy as np

    table = np.zeros((len(matches), len(features)))
    for row, match in enumerate(matches):
        style_a, style_b = match.get("style_a"), match.get("style_b")
        if not isinstance(style_a, dict) or not isinstance(style_b, dict):
            raise ValueError(
                f"match {row} ({match.get('pair')}) has no style_a/style_b; style control "
                "needs the matches of map_votes and pair_outcomes, which carry both "
                "answers' style_features"
            )
        for column, name in enumerate(features):
            x, y = float(style_a.get(name, 0)), float(style_b.get(name, 0))
            table[row, column] = (x - y) / (x + y + 1.0)
    scale = np.sqrt(np.mean(table * table, axis=0)) if len(matches) else np.zeros(len(features))
    return np.divide(table, scale, out=np.zeros_like(table), where=scale > 0)
