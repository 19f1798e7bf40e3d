"""The `compute` node kind: a plain Python function over upstream values (a registered name
or module:function), async or blocking, optionally given the run's `runtime`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..compute import ComputeFunction
from ..errors import NodeError
from ..graph import CompiledNode, Expression, NodeBase, check_arguments, resolve_function
from ..servers import ServerGone
from ..store import NodeRecord
from .base import NodeKind, RunServices, evaluate

if TYPE_CHECKING:
    from ..graph import NodeScope


class ComputeNode(NodeBase):
    """A plain Python function over upstream values (registered name or module:function)."""

    kind: Literal["compute"]
    function: str
    args: dict[str, Any] = Field(default_factory=dict)


@dataclass
class CompiledCompute(CompiledNode):
    """A compute node ready to run: its function loaded, its argument expressions parsed."""

    spec: ComputeNode
    function: ComputeFunction | None = None
    args: dict[str, Expression | Any] = field(default_factory=dict)


class ComputeKind(NodeKind[ComputeNode, CompiledCompute]):
    """`kind: compute`."""

    name = "compute"
    spec_model = ComputeNode
    compiled = CompiledCompute

    def compile(self, cn: CompiledCompute, scope: NodeScope) -> None:
        cn.function = resolve_function(scope.ck, cn.spec.function, cn.name, "function")
        for arg, value in cn.spec.args.items():
            if isinstance(value, str):
                expr = scope.expression(value, f"args.{arg}")
                if expr:
                    cn.args[arg] = expr
            else:
                cn.args[arg] = value
        if cn.function is not None:
            check_arguments(scope.ck, cn.function, cn.args, cn.name, "args")

    def functions(self, cn: CompiledCompute) -> list[ComputeFunction]:
        return [cn.function] if cn.function is not None else []

    async def execute(
        self, cn: CompiledCompute, ctx: dict[str, Any], example: str, item: int, run: RunServices
    ) -> Any:
        function = cn.function
        assert function is not None
        kwargs = {
            arg: evaluate(value, ctx, cn.name, f"args.{arg}")
            if isinstance(value, Expression)
            else value
            for arg, value in cn.args.items()
        }
        runtime = None
        if function.wants_runtime:
            runtime = kwargs["runtime"] = run.runtime.for_call()
        started = time.perf_counter()
        try:
            if function.is_async:
                value = await function.fn(**kwargs)
            elif function.blocking:
                value = await asyncio.to_thread(function.fn, **kwargs)
            else:
                value = function.fn(**kwargs)
        except ServerGone:
            raise  # the run stops; the example is not at fault and runs again on resume
        except Exception as exc:
            message = f"function '{function.name}' raised {type(exc).__name__}: {exc}"
            rec = NodeRecord(
                example_id=example, node=cn.name, item=item, status="failed", error=message
            )
            if runtime is not None:
                rec.attempts = runtime.attempts
            run.trace.record(rec)
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
        run.trace.record(rec)
        return value
