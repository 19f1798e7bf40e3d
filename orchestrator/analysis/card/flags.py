"""The card's flags: every tested finding, Holm-corrected across the whole card, and a
sentence in plain words for each one that survives at the card's α."""

from __future__ import annotations

from dataclasses import dataclass

from ...stats import holm
from .record import Finding, Interval


@dataclass(frozen=True)
class Test:
    """One effect the card tested, before the correction."""

    kind: str
    where: str
    p: float
    text: str


def interval_text(ci: Interval | None) -> str:
    """' [low, high]', or nothing without an interval."""
    return "" if ci is None else f" [{ci.low:.2f}, {ci.high:.2f}]"


def correct(tests: list[Test], alpha: float = 0.05) -> tuple[list[Finding], list[str]]:
    """Findings with Holm-adjusted p over the whole card, and the flags that survive `alpha`."""
    adjusted = holm([t.p for t in tests])
    findings = [
        Finding(kind=t.kind, where=t.where, p=t.p, p_holm=q, flagged=q <= alpha, text=t.text)
        for t, q in zip(tests, adjusted, strict=True)
    ]
    return findings, [f.text for f in findings if f.flagged]
