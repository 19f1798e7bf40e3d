"""How a judge's scores spread over their values: shares, entropy, share at the extremes."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from .record import Distribution


def _text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def distribution(
    node: str,
    model: str | None,
    field: str,
    scores: Sequence[float],
    bounds: tuple[float, float] | None = None,
) -> Distribution:
    """Share per value, Shannon entropy in bits, and the share at either end of the scale
    (the field's declared bounds when known, else the lowest and highest value seen)."""
    counts = Counter(float(s) for s in scores)
    n = sum(counts.values())
    shares = {_text(v): c / n for v, c in sorted(counts.items())} if n else {}
    entropy = -sum(s * math.log2(s) for s in shares.values() if s > 0) + 0.0
    low, high = (
        bounds if bounds is not None else (min(counts, default=0.0), max(counts, default=0.0))
    )
    extremes = (
        (counts.get(float(low), 0) + (counts.get(float(high), 0) if high != low else 0)) / n
        if n
        else 0.0
    )
    return Distribution(
        node=node,
        model=model,
        field=field,
        n=n,
        shares=shares,
        entropy=entropy,
        extremes=extremes,
    )
