"""Why examples failed, grouped: a run with failures should say its reasons, not only `0 / 6`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..store import ResultLine


@dataclass(frozen=True)
class FailureGroup:
    """One failure message, how many examples ended with it, and one of them to look at."""

    message: str
    count: int
    example: str


def failure_groups(lines: Iterable[ResultLine]) -> list[FailureGroup]:
    """Failed examples grouped by message, most common first. A later line for an id (a
    resumed run trying the example again) replaces the earlier one."""
    last: dict[str, str | None] = {}
    for line in lines:
        last[line.id] = (line.error or "no reason recorded") if line.status == "failed" else None
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for ident, message in last.items():
        if message is None:
            continue
        counts[message] = counts.get(message, 0) + 1
        first.setdefault(message, ident)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [FailureGroup(message, count, first[message]) for message, count in ranked]
