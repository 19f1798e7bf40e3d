"""What a replay reads back instead of asking: each node it does not ask again, its latest
finished output per example in the replayed run's trace (rows of that run's key only), written
into this run's trace as this run's own so the folder is a whole run (report, judge card, a
replay of it). Loaded once per process on first use: a worker reads it too."""

from __future__ import annotations

from dataclasses import dataclass
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


class RecordedOutputs:
    """The replayed run's outputs of the nodes a replay reads back, by (example, node)."""

    def __init__(self, replay: Replay, nodes: list[str]) -> None:
        self.replay = replay
        self._nodes = [name for name in nodes if replay.reads_back(name)]
        self._found: dict[tuple[str, str], _Recorded] | None = None

    def reads_back(self, node: str) -> bool:
        return self.replay.reads_back(node)

    def _load(self) -> dict[tuple[str, str], _Recorded]:
        found: dict[tuple[str, str], _Recorded] = {}
        with RunReader(Path(self.replay.source)).trace() as trace:
            for node in self._nodes:
                # Oldest first: a resumed run's later execution of a node wins.
                for rec in trace.node_runs(node=node):
                    if (
                        rec.item == WHOLE
                        and rec.run_key == self.replay.source_key
                        and rec.status in ("ok", "skipped")
                    ):
                        found[rec.example_id, node] = _Recorded(rec.status, rec.value, rec.model)
        return found

    def read(self, example: str, node: str, trace: TraceRecorder) -> Any:
        """`node`'s recorded output for `example`, recorded in `trace` as read back; a
        NodeError naming the folder when the replayed run did not finish it."""
        if self._found is None:
            self._found = self._load()
        recorded = self._found.get((example, node))
        if recorded is None:
            raise NodeError(
                node,
                f"{self.replay.source} holds no finished output of node '{node}' for example "
                f"'{example}', and a replay reads it back rather than asking it again "
                f"(asked again: {', '.join(self.replay.nodes)})",
            )
        trace.record(
            NodeRecord(
                example_id=example,
                node=node,
                status="skipped" if recorded.status == "skipped" else "ok",
                value=recorded.value,
                model=recorded.model,
            )
        )
        return recorded.value
