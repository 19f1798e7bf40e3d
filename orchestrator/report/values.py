"""Small value helpers shared by the report's modules: abridging long text, finite numbers."""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def abridge(text: str, limit: int | None) -> str:
    """Keep the head and the tail of a long text and say how much was left out."""
    if limit is None or len(text) <= limit:
        return text
    head = (limit * 2) // 3
    tail = limit - head
    omitted = len(text) - limit
    return (
        f"{text[:head]}\n… [{omitted} characters omitted; `report --full-prompts` keeps them] …\n"
        f"{text[-tail:]}"
    )


def finite(value: Any) -> TypeGuard[float]:
    """A real number that is neither a bool, nan nor infinite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
