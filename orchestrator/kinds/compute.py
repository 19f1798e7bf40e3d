"""The `compute` node kind: a plain Python function over upstream values (a registered name
or module:function), async or blocking, optionally given the run's `runtime`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..calls.outage import ServerGone
from ..compute import ComputeFunction, resolve
from ..errors import NodeError
from ..graph.compiled import CompiledNode
from ..graph.spec import NodeBase
from ..graph.templates import Expression, plain_path
from ..store.trace import NodeRecord
from .base import NodeKind, RunServices, evaluate

if TYPE_CHECKING:
    from ..graph.checks import Checker, NodeScope


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


def resolve_function(
    ck: Checker, fname: str, node: str | None, field: str
) -> ComputeFunction | None:
    """The function `fname` names, or None with the problem reported (a node's or an
    aggregate's); a placeholder when the graph is compiled without its functions. A module
    path (trusted graphs only) is looked for beside the graph file first."""
    if not ck.functions:
        return ComputeFunction(fname, _not_loaded)
    try:
        function = resolve(fname, near=ck.path.parent, trusted=ck.trusted)
    except LookupError as exc:
        ck.problem(str(exc), node, field)
        return None
    except Exception as exc:  # importing a user's module can fail in any way
        ck.problem(f"cannot load function '{fname}': {type(exc).__name__}: {exc}", node, field)
        return None
    missing = function.missing()
    if missing:
        hint = (
            f"pip install -e '.[{function.extra}]'"
            if function.extra
            else "pip install " + " ".join(missing)
        )
        ck.problem(
            f"function '{fname}' needs {', '.join(missing)}, not installed: run {hint}",
            node,
            field,
        )
    return function


def check_arguments(
    ck: Checker,
    function: ComputeFunction,
    args: dict[str, Expression | Any],
    node: str | None,
    where: str,
) -> None:
    """Report `args:` that do not fit the function's signature (a node's or an aggregate's),
    so a misspelt argument fails `validate`, not every row or the end of a run."""
    literals = {k: v for k, v in args.items() if not isinstance(v, Expression)}
    for arg, message in function.argument_problems(literals, set(args)).items():
        ck.problem(message, node, f"{where}.{arg}" if arg in args else where)
    for arg in function.reads_files if not ck.trusted else ():
        if arg not in args:
            continue
        value = args[arg]
        path = plain_path(value.source) if isinstance(value, Expression) else None
        user_only = (
            path is not None
            and len(path) == 2
            and path[0] == "params"
            and ck.params.get(path[1]) in (None, "")
        )
        if not user_only:
            # A graph choosing this path could read any file of the user's into its outputs,
            # or load code (a pickle, a model folder's custom modules).
            ck.problem(
                f"'{function.name}' reads the file or folder '{arg}' names (a model, a pickle, "
                "a calibration file; loading some runs code): in a graph you do not trust it "
                "must be `params.NAME` with no value in the graph (under required_params, or "
                "null), so only you give it (--param NAME=...); or run with --trust",
                node,
                f"{where}.{arg}",
            )


def _not_loaded(**_: Any) -> Any:
    raise RuntimeError("this graph was compiled for reading only; its functions are not loaded")
