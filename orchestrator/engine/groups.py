"""`once_per: FIELD` nodes run once per distinct value of a row field (a group), whoever
asks first, while every other row of the group waits on that one execution: single flight
per group. In one process the engine's rows ask here as they need a group; with workers the
run's owner settles the groups of each chunk of rows before handing it out, and the chunk
carries each group's outcome, so a worker never asks a group node and each group is asked
once however the rows are spread (graph/once.py has the checks and the trace example id)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..data import Row
from ..errors import NodeAbstained, NodeError
from ..graph import CompiledGraph, CompiledNode, group_example, group_orders
from ..servers import ServerGone, start_example

# How the engine runs one node for one example (resume from the trace included).
RunNode = Callable[[CompiledNode, dict[str, Any], str], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """A finished group: its once_per nodes' values, or the error its rows fail with (kept
    as plain fields, since a NodeError does not pickle back to itself)."""

    values: dict[str, Any] | None = None
    node: str = ""
    message: str = ""
    abstained: tuple[float, float] | None = None  # (confidence, threshold) of an abstain

    @classmethod
    def failed(cls, error: NodeError) -> GroupOutcome:
        if isinstance(error, NodeAbstained):
            return cls(node=error.node, abstained=(error.confidence, error.threshold))
        return cls(node=error.node, message=error.message)

    def result(self) -> dict[str, Any]:
        """The values, or the group's error raised for the row that asks."""
        if self.values is not None:
            return self.values
        if self.abstained is not None:
            raise NodeAbstained(self.node, *self.abstained)
        raise NodeError(self.node, self.message)


class GroupRuns:
    """The once_per groups of one engine: started once each, their outcomes kept for the
    rest of the run (every row of a group reads the same values)."""

    def __init__(
        self, graph: CompiledGraph, run_node: RunNode, base: Callable[[], dict[str, Any]]
    ) -> None:
        self.graph = graph
        self.orders = group_orders(graph)  # field -> its once_per nodes in run order
        self._run_node = run_node
        self._base = base  # params, run facts and once-values, as every group reads them
        self._running: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._settled: dict[str, GroupOutcome] = {}

    def keys(self, row: Row) -> list[tuple[str, str, Any]]:
        """(field, group example id, value) of each group `row` belongs to."""
        return [
            (by, group_example(by, value), value)
            for by in self.orders
            for value in [row.data.get(by)]
        ]

    async def values(self, row: Row) -> dict[str, Any]:
        """The once_per nodes' values `row` reads, each group run once whoever asks first.
        Raises the group's NodeError (the row fails with it) or what stops the run."""
        await self.settle([row])
        merged: dict[str, Any] = {}
        for outcome in self.outcomes(row).values():
            merged.update(outcome.result())  # a fresh error per row, not one shared
        return merged

    async def settle(self, rows: Iterable[Row]) -> None:
        """Run every group these rows need that has not run (together), so `outcomes` can
        give them; ServerGone (or any error that is not a node's) propagates."""
        waits = {
            example: task
            for row in rows
            if row.error is None
            for by, example, value in self.keys(row)
            if (task := self._start(by, example, value)) is not None
        }
        if waits:
            # Not cancelled with the caller: a row given up leaves the group to the others.
            await asyncio.wait(waits.values())
        for example, task in waits.items():
            if task.cancelled():
                raise asyncio.CancelledError
            stopped = self._keep(example, task)
            if stopped is not None:
                raise stopped

    def outcomes(self, row: Row) -> dict[str, GroupOutcome]:
        """The settled outcome of each group of `row`, by group example id (`settle` first)."""
        return {example: self._settled[example] for _, example, _ in self.keys(row)}

    def adopt(self, outcomes: dict[str, GroupOutcome]) -> None:
        """Take groups the run's owner settled (a worker runs no once_per node itself)."""
        self._settled.update(outcomes)

    def cancel(self) -> None:
        """Give up the groups still running (the run is ending and no row waits on them)."""
        for task in self._running.values():
            task.cancel()

    def _start(self, by: str, example: str, value: Any) -> asyncio.Task[dict[str, Any]] | None:
        """The group's running task, started if need be; None when it is settled already."""
        if example in self._settled:
            return None
        task = self._running.get(example)
        if task is None or task.cancelled():
            task = asyncio.ensure_future(self._run(by, example, value))
            self._running[example] = task
            task.add_done_callback(lambda done: self._keep(example, done))
        return task

    def _keep(self, example: str, task: asyncio.Task[dict[str, Any]]) -> BaseException | None:
        """A finished group's outcome kept for later rows. Anything but its values or a
        node's error (ServerGone, a batch request deferred) is not an outcome: it is
        returned and stays with the task, whose waiters get it."""
        if example in self._settled or not task.done() or task.cancelled():
            return None
        error = task.exception()
        if error is not None and not isinstance(error, NodeError):
            return error
        if error is None:
            self._settled[example] = GroupOutcome(values=task.result())
        else:
            self._settled[example] = GroupOutcome.failed(error)
        self._running.pop(example, None)
        return None

    async def _run(self, by: str, example: str, value: Any) -> dict[str, Any]:
        """The group's once_per nodes in order, each seeing the field's value, params, run
        facts, once-values and the group's nodes before it; recorded under `example`."""
        start_example()  # the group's calls prefer one replica, as an example's do
        known = {**self._base(), by: value}
        values: dict[str, Any] = {}
        for name in self.orders[by]:
            try:
                values[name] = await self._run_node(self.graph.nodes[name], dict(known), example)
                known[name] = values[name]
            except (NodeError, ServerGone):
                raise
            except Exception as exc:
                # A bug in a user function fails the group's rows, as it fails a row's.
                raise NodeError(name, f"unexpected {type(exc).__name__}: {exc}") from exc
        return values
