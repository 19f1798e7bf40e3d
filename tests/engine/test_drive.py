"""`drive` (engine/flush.py) writes finished work on a steady tick and tells whoever shows
the run's progress after each flush, drawing nothing itself."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.engine.flush import FLUSH_SECONDS, RunProgress, drive
from orchestrator.store.records import Counts


class Recorder:
    """A `RunObserver` that writes down what it was told, in order."""

    def __init__(self, said: list[str]) -> None:
        self.said = said
        self.run: RunProgress | None = None

    def start(self, run: RunProgress) -> None:
        self.run = run
        self.said.append("start")

    def tick(self) -> None:
        self.said.append("tick")

    def stop(self) -> None:
        self.said.append("stop")


async def test_the_observer_is_told_after_each_flush_and_at_the_end() -> None:
    said: list[str] = []
    observer = Recorder(said)
    run = RunProgress(Counts(), 3)

    async def work() -> None:
        await asyncio.sleep(2.5 * FLUSH_SECONDS)

    await drive(work(), lambda: said.append("flush"), run, observer)
    assert observer.run is run
    assert said[0] == "start" and said[-1] == "stop"
    ticks = said[1:-1]
    assert len(ticks) >= 6 and ticks == ["flush", "tick"] * (len(ticks) // 2), said


async def test_a_failed_run_still_stops_its_observer() -> None:
    said: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("the run broke")

    with pytest.raises(RuntimeError, match="the run broke"):
        await drive(work(), lambda: None, RunProgress(Counts(), None), Recorder(said))
    assert said[0] == "start" and said[-1] == "stop"
