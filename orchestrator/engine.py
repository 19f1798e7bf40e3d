"""The scheduler: every example in flight under the endpoint limits, each node started as
soon as its inputs are ready, results streamed out as examples finish.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError
from pydantic import BaseModel

from .client import Endpoint, LLMCallError, LLMClient, request_params
from .dataset import Row
from .errors import NodeError
from .graph import CompiledGraph, CompiledNode
from .outage import ServerGone
from .runtime import Runtime
from .schemas import build_model, json_schema
from .spec import SAMPLING_TYPES, LLMNode, Sampling, sampling_problem
from .stats import RunStats
from .templates import Expression
from .trace import WHOLE, NodeRecord, TraceStore

ResultSink = Callable[[dict[str, Any]], None]


@dataclass
class EngineOptions:
    params: dict[str, Any] = field(default_factory=dict)
    window: int = 128  # examples in flight at once; bounded so memory does not grow


def _evaluate(expr: Expression, ctx: dict[str, Any], node: str, where: str) -> Any:
    try:
        return expr(ctx)
    except Exception as exc:  # template runtime errors come in many types
        raise NodeError(node, f"{where} `{expr.source}` failed: {exc}") from exc


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


def _is_chain(graph: CompiledGraph) -> bool:
    """True when every node (in run order) depends, directly or not, on the one before."""
    ancestors: dict[str, set[str]] = {}
    for name in graph.order:  # topological: a node's deps come before it
        deps = graph.nodes[name].deps
        ancestors[name] = set(deps).union(*(ancestors[d] for d in deps))
    return all(
        before in ancestors[after]
        for before, after in zip(graph.order, graph.order[1:], strict=False)
    )


class Engine:
    """Runs one compiled graph over rows; one instance per run."""

    def __init__(
        self,
        graph: CompiledGraph,
        client: LLMClient,
        trace: TraceStore,
        endpoints: dict[str, Endpoint],
        stats: RunStats,
        options: EngineOptions,
    ) -> None:
        self.graph = graph
        self.client = client
        self.trace = trace
        self.endpoints = endpoints  # node name → endpoint it talks to
        self.stats = stats
        self.options = options
        self.params = {**graph.spec.params, **options.params}
        first = next(iter(endpoints.values()), None)
        self.run_info = {
            "base_url": first.base_url if first else None,
            "model": first.model if first else None,
        }
        self.runtime = Runtime(client, endpoints, self.run_info)
        self._chain = _is_chain(graph)
        self._models: dict[tuple[str, tuple[tuple[str, tuple[Any, ...]], ...]], type[BaseModel]]
        self._models = {}

    # -- dataset level ----------------------------------------------------------------

    async def run(
        self, rows: Iterable[Row], sink: ResultSink, skip: set[str] | None = None
    ) -> None:
        """Run every row not in `skip`; `sink` gets each result line as its example ends."""
        skip = skip or set()
        slots = asyncio.Semaphore(self.options.window)
        running: set[asyncio.Task[None]] = set()
        stop: list[Exception] = []

        async def one(row: Row) -> None:
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

    async def run_example(self, row: Row) -> dict[str, Any]:
        """The result line of one example: outputs when ok, the error when failed."""
        if row.error is not None:
            self.stats.examples_failed += 1
            return {"id": row.id, "status": "failed", "row": row.number, "error": row.error}
        base = {**row.data, "params": self.params, "run": self.run_info}
        try:
            outputs = await self._run_nodes(row, base)
        except NodeError as exc:
            self.stats.examples_failed += 1
            message = exc.message if exc.node.startswith("outputs.") else str(exc)
            return {"id": row.id, "status": "failed", "row": row.number, "error": message}
        except ServerGone:
            raise  # the example is not done: it must run again when the run is resumed
        except Exception as exc:
            # A bug in a user function or in us fails this example, not the whole run.
            self.stats.examples_failed += 1
            return {
                "id": row.id,
                "status": "failed",
                "row": row.number,
                "error": f"unexpected {type(exc).__name__}: {exc}",
            }
        self.stats.examples_ok += 1
        return {"id": row.id, "status": "ok", **outputs}

    async def _run_nodes(self, row: Row, base: dict[str, Any]) -> dict[str, Any]:
        """Every node of one example as its own task, then the graph outputs."""
        values: dict[str, Any] = {}
        tasks: dict[str, asyncio.Task[None]] = {}
        if self._chain:
            # Each node needs the one before it: nothing could overlap, so skip the tasks.
            for name in self.graph.order:
                cn = self.graph.nodes[name]
                ctx = {**base, **{d: values[d] for d in cn.deps}}
                values[name] = await self._run_node(cn, ctx, row.id)
            return self._outputs({**base, **values})

        async def node_task(name: str) -> None:
            cn = self.graph.nodes[name]
            for dep in cn.deps:
                await tasks[dep]
            ctx = {**base, **{d: values[d] for d in cn.deps}}
            values[name] = await self._run_node(cn, ctx, row.id)

        try:
            async with asyncio.TaskGroup() as group:
                for name in self.graph.order:
                    tasks[name] = group.create_task(node_task(name))
        except ExceptionGroup as group_error:
            raise _first_error(group_error) from None
        return self._outputs({**base, **values})

    def _outputs(self, ctx: dict[str, Any]) -> dict[str, Any]:
        return {
            key: _evaluate(expr, ctx, f"outputs.{key}", "output")
            for key, expr in self.graph.outputs.items()
        }

    async def _run_node(self, cn: CompiledNode, ctx: dict[str, Any], example: str) -> Any:
        found, value = self.trace.finished_value(example, cn.name)
        if found:
            return value
        if cn.foreach is None:
            if cn.when is not None and not _evaluate(cn.when, ctx, cn.name, "when"):
                self.trace.record(NodeRecord(example_id=example, node=cn.name, status="skipped"))
                return None
            return await self._execute(cn, ctx, example, WHOLE)
        items = _evaluate(cn.foreach, ctx, cn.name, "foreach")
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
        if cn.when is not None and not _evaluate(cn.when, ctx, cn.name, f"when (item {index})"):
            self.trace.record(
                NodeRecord(example_id=example, node=cn.name, item=index, status="skipped")
            )
            return None
        return await self._execute(cn, ctx, example, index)

    async def _execute(self, cn: CompiledNode, ctx: dict[str, Any], example: str, item: int) -> Any:
        if cn.is_llm:
            return await self._llm(cn, ctx, example, item)
        return await self._compute(cn, ctx, example, item)

    # -- node kinds -------------------------------------------------------------------

    async def _compute(self, cn: CompiledNode, ctx: dict[str, Any], example: str, item: int) -> Any:
        assert cn.function is not None
        kwargs = {
            arg: _evaluate(value, ctx, cn.name, f"args.{arg}")
            if isinstance(value, Expression)
            else value
            for arg, value in cn.args.items()
        }
        runtime = None
        if cn.function.wants_runtime:
            runtime = kwargs["runtime"] = self.runtime.for_call()
        started = time.perf_counter()
        try:
            if cn.function.is_async:
                value = await cn.function.fn(**kwargs)
            elif cn.function.blocking:
                value = await asyncio.to_thread(cn.function.fn, **kwargs)
            else:
                value = cn.function.fn(**kwargs)
        except ServerGone:
            raise  # the run stops; the example is not at fault and runs again on resume
        except Exception as exc:
            message = f"function '{cn.function.name}' raised {type(exc).__name__}: {exc}"
            rec = NodeRecord(
                example_id=example, node=cn.name, item=item, status="failed", error=message
            )
            if runtime is not None:
                rec.attempts = runtime.attempts
            self.trace.record(rec)
            raise NodeError(cn.name, message) from exc
        rec = NodeRecord(
            example_id=example,
            node=cn.name,
            item=item,
            value=value,
            latency=time.perf_counter() - started,
        )
        if runtime is not None:
            # The failed tries of its requests to the server, as an LLM node keeps them.
            rec.attempts = runtime.attempts
        self.trace.record(rec)
        return value

    def _schema_for(self, cn: CompiledNode, ctx: dict[str, Any]) -> type[BaseModel]:
        """The node's model, with dynamic enums filled in for this call (memoised)."""
        assert cn.model is not None and isinstance(cn.spec, LLMNode)
        if not cn.dynamic:
            return cn.model
        choices: dict[str, tuple[Any, ...]] = {}
        for path, expr in cn.dynamic.items():
            value = _evaluate(expr, ctx, cn.name, f"output.{path}.enum_from")
            if not isinstance(value, list | tuple) or not value:
                raise NodeError(
                    cn.name, f"enum_from for '{path}' must give a non-empty list, got {value!r}"
                )
            choices[path] = tuple(value)
        key = (cn.name, tuple(sorted(choices.items())))
        if key not in self._models:
            self._models[key] = build_model(cn.name, cn.spec.output, dict(choices))
        return self._models[key]

    def _sampling_for(self, cn: CompiledNode, ctx: dict[str, Any]) -> Sampling:
        """The node's sampling values with expression-valued ones evaluated for this call."""
        if not cn.sampling_exprs:
            return cn.sampling
        values = cn.sampling.model_dump(exclude_none=True)
        for key, expr in cn.sampling_exprs.items():
            raw = _evaluate(expr, ctx, cn.name, key)
            try:
                values[key] = SAMPLING_TYPES[key](raw)
            except (TypeError, ValueError) as exc:
                raise NodeError(
                    cn.name,
                    f"{key} `{expr.source}` gave {raw!r}, not a {SAMPLING_TYPES[key].__name__}",
                ) from exc
            problem = sampling_problem(key, values[key])
            if problem is not None:
                raise NodeError(cn.name, f"{key} `{expr.source}`: {problem}")
        return Sampling(**values)

    def _messages(self, cn: CompiledNode, ctx: dict[str, Any]) -> list[dict[str, str]]:
        try:
            return cn.messages(ctx)
        except (TemplateError, TypeError, ValueError) as exc:
            raise NodeError(cn.name, f"rendering the prompt failed: {exc}") from exc

    async def _llm(self, cn: CompiledNode, ctx: dict[str, Any], example: str, item: int) -> Any:
        assert isinstance(cn.spec, LLMNode)
        messages = self._messages(cn, ctx)
        model = self._schema_for(cn, ctx)
        sampling = self._sampling_for(cn, ctx)
        ep = self.endpoints[cn.name]
        rec = NodeRecord(
            example_id=example,
            node=cn.name,
            item=item,
            messages=messages,
            model=ep.model,
            endpoint=ep.base_url,
            request={
                "params": {**request_params(sampling), "n": sampling.n or 1},
                "structured": ep.structured,
            },
            schema=json_schema(model),
        )
        started = time.perf_counter()
        try:
            result = await self.client.call(ep, messages, model, sampling)
        except LLMCallError as exc:
            rec.attempts = exc.attempts
            rec.error = str(exc)
            rec.status = "failed"
            rec.latency = time.perf_counter() - started
            if cn.spec.on_error == "record":
                # The protocol counts this call as a known failure (e.g. ExPerT: unmatched);
                # the value says so, and the trace keeps every attempt.
                rec.value = {"failed": True, "error": str(exc)}
                self.trace.record(rec)
                return rec.value
            self.trace.record(rec)
            raise NodeError(cn.name, str(exc)) from exc
        value: Any = result.values[0] if (sampling.n or 1) == 1 else result.values
        rec.value = value
        rec.raw = result.raw
        rec.attempts = result.attempts
        rec.cached = result.cached
        rec.prompt_tokens = result.prompt_tokens
        rec.completion_tokens = result.completion_tokens
        rec.latency = time.perf_counter() - started
        self.trace.record(rec)
        return value
