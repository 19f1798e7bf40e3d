"""The scheduler: every example in flight under the endpoint limits, each node started as
soon as its inputs are ready, results streamed out as examples finish. What running a node
means is its kind's business (orchestrator/kinds); `foreach`, `when` and resume are here.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..calls import LLMClient, Runtime
from ..data import Row
from ..errors import NodeAbstained, NodeError
from ..graph import ONCE_EXAMPLE, CompiledGraph, CompiledNode, once_order, row_order
from ..kinds import RunServices, evaluate
from ..servers import Endpoint, ServerGone, start_example
from ..store import CURRENT as CURRENT_FLIGHT
from ..store import WHOLE, Counts, NodeRecord, ResultLine, TraceRecorder, unstorable
from .groups import GroupRuns
from .replay import RecordedOutputs
from .settings import RunSettings

# Where each example's line goes as it ends: the run store (`RunStore.write_result`), or a
# worker's report; the record is encoded to bytes once, by whoever writes it.
ResultSink = Callable[[ResultLine], None]


@dataclass
class EngineOptions:
    """The run's settings (its params filled in with the graph's) and the examples the
    engine keeps in flight at once (bounded so memory does not grow)."""

    settings: RunSettings = field(default_factory=RunSettings)
    window: int = 128


def engine_window(in_flight: int) -> int:
    """Examples an engine keeps started: twice the requests its servers may hold together,
    so each server has requests ready when a slot opens (16 at least)."""
    return max(2 * in_flight, 16)


def _first_error(group: BaseExceptionGroup) -> Exception:
    """The error to report for a failed example: a node's own error if there is one."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        current = stack.pop(0)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        else:
            leaves.append(current)
    for leaf in leaves:
        if isinstance(leaf, ServerGone):
            raise leaf  # not this example's fault: the whole run stops
    for leaf in leaves:
        if isinstance(leaf, NodeError):
            return leaf
    first = leaves[0]
    return first if isinstance(first, Exception) else RuntimeError(str(first))


def _is_chain(graph: CompiledGraph, order: list[str]) -> bool:
    """True when every node of `order` (a run order) depends, directly or not, on the one
    before."""
    ancestors: dict[str, set[str]] = {}
    for name in order:  # topological: a node's deps come before it
        deps = graph.nodes[name].deps & set(order)  # once-nodes are done before the rows
        ancestors[name] = set(deps).union(*(ancestors[d] for d in deps))
    return all(before in ancestors[after] for before, after in itertools.pairwise(order))


class Engine:
    """Runs one compiled graph over rows; one instance per run."""

    def __init__(
        self,
        graph: CompiledGraph,
        client: LLMClient,
        trace: TraceRecorder,
        endpoints: dict[str, Endpoint],
        stats: Counts,
        options: EngineOptions,
    ) -> None:
        self.graph = graph
        self.client = client
        self.trace = trace
        self.endpoints = endpoints  # node name → endpoint it talks to
        self.stats = stats
        self.options = options
        self.params = {**graph.spec.params, **options.settings.params}
        first = next(iter(endpoints.values()), None)
        self.run_info = {
            "base_url": first.base_url if first else None,
            "model": first.model if first else None,
        }
        self.runtime = Runtime(client, endpoints, self.run_info)
        # What node kinds execute with; the engine itself never looks inside a node.
        self.services = RunServices(client, trace, endpoints, self.runtime, options.settings)
        self._rows_order = row_order(graph)
        self._chain = _is_chain(graph, self._rows_order)
        # The once-nodes' values, every row's to read; None until they have run (or were
        # handed over by the run's owner, in a worker).
        self.once: dict[str, Any] | None = None if once_order(graph) else {}
        # The once_per groups, each run once for all its rows (or settled by the owner).
        self.groups = GroupRuns(graph, self._run_node, self._shared)
        self._grouped = {name for names in self.groups.orders.values() for name in names}
        self._runs = 0  # `run` calls under way (a worker starts one per chunk of rows)
        replay = options.settings.replay
        # A replay's nodes not asked again: their outputs come from the replayed run.
        self.recorded = RecordedOutputs(replay, list(graph.nodes)) if replay else None

    # -- dataset level ----------------------------------------------------------------

    async def run_once(self) -> dict[str, Any]:
        """Run the once-nodes (in order, each seeing params and the once-nodes before it)
        unless they ran already; their values by node. A failure raises: no row may run
        without them. Recorded in the trace under ONCE_EXAMPLE, so resume reuses them."""
        if self.once is not None:
            return self.once
        start_example()
        values: dict[str, Any] = {}
        base = {"params": self.params, "run": self.run_info}
        for name in once_order(self.graph):
            cn = self.graph.nodes[name]
            ctx = {**base, **{d: values[d] for d in cn.deps}}
            values[name] = await self._run_node(cn, ctx, ONCE_EXAMPLE)
        self.once = values
        return values

    def _shared(self) -> dict[str, Any]:
        """What a once_per group reads besides its field: params, run facts, once-values."""
        return {"params": self.params, "run": self.run_info, **(self.once or {})}

    def use_once(self, values: dict[str, Any]) -> None:
        """Take the once-nodes' values the run's owner computed (a worker runs none)."""
        self.once = dict(values)

    async def run(
        self, rows: Iterable[Row], sink: ResultSink, skip: set[str] | None = None
    ) -> None:
        """Run every row not in `skip`; `sink` gets each result line as its example ends.
        The once-nodes run first, if they have not; their failure stops the run here."""
        skip = skip or set()
        self._runs += 1
        try:
            await self._run_rows(rows, sink, skip)
        finally:
            self._runs -= 1
            if not self._runs:
                self.groups.cancel()  # a group left running when the run stopped

    async def _run_rows(self, rows: Iterable[Row], sink: ResultSink, skip: set[str]) -> None:
        await self.run_once()
        slots = asyncio.Semaphore(self.options.window)
        running: set[asyncio.Task[None]] = set()
        stop: list[Exception] = []

        async def one(row: Row) -> None:
            start_example()  # this example's calls prefer one replica (its prefix cache)
            try:
                sink(await self.run_example(row))
            except Exception as exc:
                # The server is gone for good, or the sink cannot write (disk full): nothing
                # more can finish, so the rest is called off and the run stops with this.
                if not stop:
                    stop.append(exc)
                    for task in running:
                        if task is not asyncio.current_task():
                            task.cancel()
            finally:
                slots.release()

        try:
            for row in rows:
                if stop:
                    break
                if row.id in skip and row.error is None:
                    self.stats.examples_resumed += 1
                    continue
                await slots.acquire()
                task = asyncio.create_task(one(row))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        finally:
            for task in running:
                task.cancel()
        if stop:
            raise stop[0]

    # -- one example ------------------------------------------------------------------

    async def run_example(self, row: Row) -> ResultLine:
        """The result line of one example: outputs when ok, the error when failed, the
        reason when a node abstained."""
        if row.error is not None:
            self.stats.examples_failed += 1
            return ResultLine.failed(row.id, row.number, row.error)
        base = {**row.data, "params": self.params, "run": self.run_info}
        try:
            outputs = await self._run_nodes(row, base)
        except NodeAbstained as exc:
            # Finished, not failed: the judge was too unsure to answer (`abstain:`).
            self.stats.examples_abstained += 1
            return ResultLine.abstained(row.id, exc.message)
        except NodeError as exc:
            self.stats.examples_failed += 1
            message = exc.message if exc.node.startswith("outputs.") else str(exc)
            return ResultLine.failed(row.id, row.number, message)
        except ServerGone:
            raise  # the example is not done: it must run again when the run is resumed
        except Exception as exc:
            # A bug in a user function or in us fails this example, not the whole run.
            self.stats.examples_failed += 1
            return ResultLine.failed(row.id, row.number, f"unexpected {type(exc).__name__}: {exc}")
        self.stats.examples_ok += 1
        return ResultLine.ok(row.id, outputs)

    async def _run_nodes(self, row: Row, base: dict[str, Any]) -> dict[str, Any]:
        """Every node of one example as its own task, then the graph outputs. A node that
        reads a once_per node waits for the row's groups; the others start at once."""
        values: dict[str, Any] = dict(self.once or {})
        tasks: dict[str, asyncio.Task[None]] = {}

        async def grouped(cn: CompiledNode) -> None:
            if cn.deps & self._grouped:
                # Every caller of one row gets the same values: the group runs once.
                values.update(await self.groups.values(row))

        if self._chain:
            # Each node needs the one before it: nothing could overlap, so skip the tasks.
            for name in self._rows_order:
                cn = self.graph.nodes[name]
                await grouped(cn)
                ctx = {**base, **{d: values[d] for d in cn.deps}}
                values[name] = await self._run_node(cn, ctx, row.id)
        else:

            async def node_task(name: str) -> None:
                cn = self.graph.nodes[name]
                for dep in cn.deps:
                    if dep in tasks:  # not a once- or once_per node, whose value is there
                        await tasks[dep]
                await grouped(cn)
                ctx = {**base, **{d: values[d] for d in cn.deps}}
                values[name] = await self._run_node(cn, ctx, row.id)

            try:
                async with asyncio.TaskGroup() as group:
                    for name in self._rows_order:
                        tasks[name] = group.create_task(node_task(name))
            except ExceptionGroup as group_error:
                raise _first_error(group_error) from None
        if self._grouped:
            # The outputs may read the groups, and a row whose group failed fails with it.
            values.update(await self.groups.values(row))
        return self._outputs({**base, **values})

    def _outputs(self, ctx: dict[str, Any]) -> dict[str, Any]:
        outputs = {
            key: evaluate(expr, ctx, f"outputs.{key}", "output")
            for key, expr in self.graph.outputs.items()
        }
        for key, value in outputs.items():
            # Refused here, the row fails with the reason; found by the store's writer, it
            # stopped the run after every request was paid for, and every re-run again.
            problem = unstorable(value)
            if problem is not None:
                source = self.graph.outputs[key].source
                raise NodeError(
                    f"outputs.{key}",
                    f"outputs.{key} `{source}` gives what a result line cannot hold: {problem}",
                )
        return outputs

    async def _run_node(self, cn: CompiledNode, ctx: dict[str, Any], example: str) -> Any:
        found, value = self.trace.finished_value(example, cn.name)
        if found:
            return value
        if self.recorded is not None and self.recorded.reads_back(cn.name):
            return self.recorded.read(example, cn.name, self.trace)
        if cn.foreach is None:
            if cn.when is not None and not evaluate(cn.when, ctx, cn.name, "when"):
                self.trace.record(NodeRecord(example_id=example, node=cn.name, status="skipped"))
                return None
            return await self._execute(cn, ctx, example, WHOLE)
        items = evaluate(cn.foreach, ctx, cn.name, "foreach")
        if items is None:
            items = []
        if not isinstance(items, list | tuple):
            raise NodeError(
                cn.name, f"foreach `{cn.foreach.source}` gave {type(items).__name__}, not a list"
            )
        as_name = cn.spec.as_
        results = await asyncio.gather(
            *(
                self._run_item(
                    cn, {**ctx, as_name: item, f"{as_name}_index": index}, example, index
                )
                for index, item in enumerate(items)
            )
        )
        collected = list(results)
        self.trace.record(NodeRecord(example_id=example, node=cn.name, value=collected))
        return collected

    async def _run_item(
        self, cn: CompiledNode, ctx: dict[str, Any], example: str, index: int
    ) -> Any:
        found, value = self.trace.finished_value(example, cn.name, index)
        if found:
            return value
        if cn.when is not None and not evaluate(cn.when, ctx, cn.name, f"when (item {index})"):
            self.trace.record(
                NodeRecord(example_id=example, node=cn.name, item=index, status="skipped")
            )
            return None
        return await self._execute(cn, ctx, example, index)

    async def _execute(self, cn: CompiledNode, ctx: dict[str, Any], example: str, item: int) -> Any:
        """Run one node (or foreach item) by its kind, noted as in flight while it runs so
        `orchestrator status` can show it; its tries are noted by the call layer."""
        endpoint = self.endpoints.get(cn.name)
        flights = self.trace.flights
        flight = flights.begin(example, cn.name, item, endpoint.base_url if endpoint else None)
        token = CURRENT_FLIGHT.set(flight)
        try:
            return await cn.kind.execute(cn, ctx, example, item, self.services)
        finally:
            CURRENT_FLIGHT.reset(token)
            flights.end(flight)
