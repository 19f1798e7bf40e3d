"""What a replay reads back instead of asking: each node it does not ask again, its latest
finished output per example in the replayed run's trace (rows of that run's key only), written
into this run's trace as this run's own so the folder is a whole run (report, judge card, a
replay of it). Loaded once per process on first use: a worker reads it too."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import NodeError
from ..store import WHOLE, NodeRecord, RunReader, TraceRecorder
from .settings import Replay


@dataclass(frozen=True)
class _Recorded:
    status: str
    value: Any
    model: str | None


@dataclass
class _Node:
    """One node's recorded run for one example, and its foreach items' (by index)."""

    whole: _Recorded | None = None
    items: dict[int, _Recorded] = field(default_factory=dict)


class RecordedOutputs:
    """The replayed run's outputs of the nodes a replay reads back, by (example, node)."""

    def __init__(self, replay: Replay, nodes: list[str]) -> None:
        self.replay = replay
        self._nodes = [name for name in nodes if replay.reads_back(name)]
        self._found: dict[tuple[str, str], _Node] | None = None

    def reads_back(self, node: str) -> bool:
        return self.replay.reads_back(node)

    def _load(self) -> dict[tuple[str, str], _Node]:
        found: dict[tuple[str, str], _Node] = {}
        with RunReader(Path(self.replay.source)).trace() as trace:
            for node in self._nodes:
                # Oldest first: a resumed run's later execution of a node wins.
                for rec in trace.node_runs(node=node):
                    if rec.run_key != self.replay.source_key or rec.status not in ("ok", "skipped"):
                        continue
                    kept = found.setdefault((rec.example_id, node), _Node())
                    recorded = _Recorded(rec.status, rec.value, rec.model)
                    if rec.item == WHOLE:
                        kept.whole = recorded
                    else:
                        kept.items[rec.item] = recorded
        return found

    def read(self, example: str, node: str, trace: TraceRecorder) -> Any:
        """`node`'s recorded output for `example`, recorded in `trace` as read back; a
        NodeError naming the folder when the replayed run did not finish it."""
        if self._found is None:
            self._found = self._load()
        kept = self._found.get((example, node))
        if kept is None or kept.whole is None:
            raise NodeError(
                node,
                f"{self.replay.source} holds no finished output of node '{node}' for example "
                f"'{example}', and a replay reads it back rather than asking it again "
                f"(asked again: {', '.join(self.replay.nodes)})",
            )
        # A foreach node's items too, so a diff or a report of this run sees them as the
        # replayed run's.
        for item, recorded in [*sorted(kept.items.items()), (WHOLE, kept.whole)]:
            trace.record(
                NodeRecord(
                    example_id=example,
                    node=node,
                    item=item,
                    status="skipped" if recorded.status == "skipped" else "ok",
                    value=recorded.value,
                    model=recorded.model,
                )
            )
        return kept.whole.value
