"""`Observers` (issue 40): the progress display and the live span sender told as one; one
that fails does not keep the others from being told, and its error still surfaces."""

from __future__ import annotations

import pytest

from orchestrator.engine import Observers, RunProgress
from orchestrator.store import Counts


class Seen:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def start(self, run: RunProgress) -> None:
        self.calls.append("start")
        if self.fail:
            raise RuntimeError("start failed")

    def tick(self) -> None:
        self.calls.append("tick")

    def stop(self) -> None:
        self.calls.append("stop")


def test_every_observer_is_told_in_order_even_after_one_fails() -> None:
    first, broken, last = Seen(), Seen(fail=True), Seen()
    group = Observers(first, broken, last)
    with pytest.raises(RuntimeError, match="start failed"):
        group.start(RunProgress(Counts(), None))
    group.tick()
    group.stop()
    assert first.calls == broken.calls == last.calls == ["start", "tick", "stop"]
