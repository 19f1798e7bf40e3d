"""Small general-purpose compute functions."""

from __future__ import annotations

from statistics import fmean
from typing import Any

from .registry import register


@register("mean")
def mean(values: list[float | None]) -> float | None:
    """Mean of the non-null values; null when there are none."""
    present = [float(v) for v in values if v is not None]
    return fmean(present) if present else None


@register("identity")
def identity(value: Any) -> Any:
    """Return the value unchanged (handy to name an intermediate result)."""
    return value


@register("label_items")
def label_items(items: list[Any], prefix: str) -> list[dict[str, Any]]:
    """Give every item a unique id (`prefix` + 1-based position) so equal titles stay apart."""
    labelled = []
    for position, item in enumerate(items, start=1):
        entry = dict(item) if isinstance(item, dict) else {"value": item}
        entry["id"] = f"{prefix}{position}"
        labelled.append(entry)
    return labelled
