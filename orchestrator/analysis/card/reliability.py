"""Reliability of the LLM calls, per node and model, from the attempts the trace recorded."""

from __future__ import annotations

from collections.abc import Iterable

from ...store import NodeRun, Tally
from .record import Reliability

BAD_REPLY = ("invalid", "truncated")


def _first_reply_bad(run: NodeRun) -> bool:
    """Whether the first reply the server sent (transport failures skipped) was rejected."""
    replies = [a for a in run.attempts if a.kind not in ("transport", "cache")]
    return bool(replies) and replies[0].kind in BAD_REPLY


def reliability(runs: Iterable[NodeRun]) -> list[Reliability]:
    """One line per (node, model) among the node runs that asked a model."""
    table: dict[tuple[str, str | None], list[NodeRun]] = {}
    for run in runs:
        if run.attempts or run.model is not None:
            table.setdefault((run.node, run.model), []).append(run)
    out = []
    for (node, model), group in sorted(table.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        tallies = [Tally.of(r.attempts) for r in group]
        out.append(
            Reliability(
                node=node,
                model=model,
                calls=len(group),
                first_try_invalid=sum(_first_reply_bad(r) for r in group),
                reasks=sum(t.reasks for t in tallies if t is not None),
                truncations=sum(a.kind == "truncated" for r in group for a in r.attempts),
                failures=sum(r.status == "failed" for r in group),
                transport_failures=sum(a.kind == "transport" for r in group for a in r.attempts),
                abstentions=sum(r.status == "abstained" for r in group),
            )
        )
    return out
