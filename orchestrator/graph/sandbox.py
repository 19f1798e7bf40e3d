"""The sandbox around templates and graph expressions: Python internals refused, operators
that could build huge values bounded, each render bounded in time, output and macro depth,
and `unsafe_uses` to find such attempts in a source before anything renders (so `validate`
rejects them up front)."""

from __future__ import annotations

import functools
import itertools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

from jinja2 import (
    Template,
    nodes,
    pass_context,
)
from jinja2 import sandbox as jinja_sandbox
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context, LoopContext, Macro
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable
from jinja2.utils import Namespace

from ..errors import RenderLimitError, UnsafeTemplateError

# What one `*`, `**` or `%` in a template or expression may build; more is refused.
MAX_REPEAT_ITEMS = 1_000_000


MAX_POWER_BITS = 100_000


# What one render of a prompt may cost. A real prompt renders in well under a millisecond;
# these stop a template written to work for ever (nested loops, endless recursion), which
# the sandbox's attribute checks alone never would.
RENDER_SECONDS = 2.0
MAX_RENDER_CHARS = 10_000_000  # ~2.5M tokens, more than any model's context
MAX_MACRO_DEPTH = 50  # a macro calling itself (or others) deeper is a recursion that won't end
_PACE = 256  # loop items between two looks at the clock (one look costs ~50 ns)


# The deadline of the render under way in this thread or task (None: not rendering a prompt,
# e.g. evaluating an expression, which cannot loop).
_DEADLINE: ContextVar[float | None] = ContextVar("orchestrator_render_deadline", default=None)
_MACRO_DEPTH: ContextVar[int] = ContextVar("orchestrator_macro_depth", default=0)


def _over_time() -> RenderLimitError:
    return RenderLimitError(
        f"the template worked for more than {RENDER_SECONDS:g} s, the limit of one render "
        "(a loop or recursion that does not end?)"
    )


def checked_size(value: Any) -> Any:
    """`value` as it is, unless it is a string, list, tuple or dict longer than
    MAX_RENDER_CHARS: then RenderLimitError. Applied to what `~`, `+`, filters, calls and
    namespace assignments build, so doubling a value in a loop or a recursion stops at the
    limit instead of filling memory. Only within a prompt's render: an aggregate's
    expression over a whole dataset may build a long list."""
    sized = isinstance(value, str | list | tuple | dict)
    if sized and len(value) > MAX_RENDER_CHARS and _DEADLINE.get() is not None:
        raise RenderLimitError(
            f"a value of over {MAX_RENDER_CHARS:,} items or characters, the limit of one render"
        )
    return value


def joined(*parts: Any) -> str:
    """Jinja's `~` (string concatenation), bounded like every other value."""
    return checked_size("".join(map(str, parts)))


class BoundedNamespace(Namespace):
    """`namespace()` whose attributes are held to the same size bound, so `{% set ns.s =
    ns.s ~ ns.s %}` in a loop stops at the limit."""

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, checked_size(value))


def paced(iterable: Iterable[Any]) -> Iterable[Any]:
    """What a template's `{% for %}` iterates: the iterable, checked against the render's
    deadline as it yields, so even loops whose body calls nothing (`{% for i in s %}{% for
    j in s %}{% endfor %}{% endfor %}`) stop. Every for loop is rewritten to use it."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return iterable
    return _paced(iterable, deadline)


def _paced(iterable: Iterable[Any], deadline: float) -> Iterator[Any]:
    for count, item in enumerate(iterable):
        # Counted per loop, so an inner loop looks at the clock each time it starts.
        if count % _PACE == 0 and time.monotonic() > deadline:
            raise _over_time()
        yield item


def _joined(concat: nodes.Concat) -> nodes.Call:
    call = nodes.Call(nodes.ImportedName(f"{__name__}.joined"), concat.nodes, [], None, None)
    call.set_lineno(concat.lineno)
    return call


def render_bounded(template: Template, context: dict[str, Any] | None = None) -> str:
    """`template.render(context)` within RENDER_SECONDS, MAX_RENDER_CHARS of output and
    MAX_MACRO_DEPTH; RenderLimitError (a TemplateError) when it goes over.

    The cost, measured on this 2-core CPU for a prompt with a 20-item loop (best of 7 ×
    20,000 renders, Jinja's own `render` on main against this): 10.5-11 µs before, 16.5 µs
    now (the rewritten loop and size checks ~2-3 µs, counting output pieces the rest), not
    measurable beside a request."""
    token = _DEADLINE.set(time.monotonic() + RENDER_SECONDS)
    pieces: list[str] = []
    size = 0
    try:
        for piece in template.root_render_func(template.new_context(context)):
            size += len(piece)
            if size > MAX_RENDER_CHARS:
                raise RenderLimitError(
                    f"the template's output is over {MAX_RENDER_CHARS:,} characters, the "
                    "limit of one render"
                )
            pieces.append(piece)
    except RecursionError:
        raise RenderLimitError("the template nests or recurses too deeply to render") from None
    except Exception:
        template.environment.handle_exception()  # as Template.render: the template's lines
    finally:
        _DEADLINE.reset(token)
    return "".join(pieces)


def _check_repeat(left: Any, right: Any) -> None:
    sized = (str, bytes, list, tuple)
    for seq, count in ((left, right), (right, left)):
        if (
            isinstance(seq, sized)
            and isinstance(count, int)
            and len(seq) * count > MAX_REPEAT_ITEMS
        ):
            raise SecurityError(f"`*` would build more than {MAX_REPEAT_ITEMS:,} items")


def _check_power(left: Any, right: Any) -> None:
    big = isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0
    if big and left.bit_length() * right > MAX_POWER_BITS:
        raise SecurityError(f"`**` would build a number over {MAX_POWER_BITS:,} bits")


# A `%` format with a `*` or a five-digit width or precision: '%0999999999d' % 1.
_WIDE_FORMAT = re.compile(r"%[^%a-zA-Z]*?(\*|\d{5,})")


class Sandbox(SandboxedEnvironment):
    """The sandbox, with `*`, `**` and `%` bounded so one operator cannot build gigabytes.

    Intercepted operators are also never folded at compile time, so `validate` does not
    evaluate `'a' * 10**10` while reading the template.
    """

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        ast = super()._parse(source, name, filename)
        for loop in ast.find_all(nodes.For):
            loop.iter = nodes.Call(
                nodes.ImportedName(f"{__name__}.paced"), [loop.iter], [], None, None
            ).set_lineno(loop.iter.lineno)
        # `a ~ b` becomes joined(a, b): the same text, its size checked.
        for parent in list(ast.find_all(nodes.Node)):
            for field in parent.fields:
                value = getattr(parent, field, None)
                if isinstance(value, nodes.Concat):
                    setattr(parent, field, _joined(value))
                elif isinstance(value, list):
                    value[:] = [_joined(v) if isinstance(v, nodes.Concat) else v for v in value]
        return ast

    def getattr(self, obj: Any, attribute: str) -> Any:
        """`node.field` is the field even when dicts have a method of that name (`items`,
        `keys`, `get`…): `validate` reads it as the declared field, so the run must too."""
        if isinstance(obj, dict) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        # Values every row shares (params, `files`, once-nodes' values) must not change under
        # a render: `files.shots.append(x)` in one row would reach the rows after it.
        return super().is_safe_attribute(obj, attr, value) and not modifies_known_mutable(obj, attr)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        deadline = _DEADLINE.get()
        if deadline is not None and time.monotonic() > deadline:
            raise _over_time()
        if not isinstance(obj, Macro | LoopContext):  # a LoopContext: `loop(...)`, recursive
            return checked_size(super().call(context, obj, *args, **kwargs))
        depth = _MACRO_DEPTH.get()
        if depth >= MAX_MACRO_DEPTH:
            raise RenderLimitError(
                f"macros call each other more than {MAX_MACRO_DEPTH} deep (a recursion that "
                "does not end?)"
            )
        token = _MACRO_DEPTH.set(depth + 1)
        try:
            return super().call(context, obj, *args, **kwargs)
        finally:
            _MACRO_DEPTH.reset(token)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        elif operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
            raise SecurityError("`%` formats with a width or precision of 10000 or more")
        return checked_size(super().call_binop(context, operator, left, right))


def unfoldable(func: Any) -> Callable[..., Any]:
    """`func` (a filter or test) as one Jinja never calls while compiling.

    Jinja folds filters over constants at compile time, so `{{ 'a' | center(10**9) }}`
    would run inside `validate`; it never folds one that takes the render context.
    """
    passes = getattr(getattr(func, "jinja_pass_arg", None), "name", None)
    if passes == "context":
        return func

    @pass_context
    @functools.wraps(func)
    def call(context: Context, *args: Any, **kwargs: Any) -> Any:
        # The result is size-checked too: `s | replace('x', 'xx')` in a loop must stop.
        if passes == "environment":
            return checked_size(func(context.environment, *args, **kwargs))
        if passes == "eval_context":
            return checked_size(func(context.eval_ctx, *args, **kwargs))
        return checked_size(func(*args, **kwargs))

    return call


# Attribute names the sandbox refuses besides those starting with `_`.
_INTERNAL_ATTRIBUTES = frozenset(
    {"mro", "func_globals", "func_code", "f_globals", "f_locals", "f_builtins", "f_back"}
    | {"f_code", "tb_frame", "tb_next", "gi_yieldfrom", "cr_await"}
    | jinja_sandbox.UNSAFE_FUNCTION_ATTRIBUTES
    | jinja_sandbox.UNSAFE_METHOD_ATTRIBUTES
    | jinja_sandbox.UNSAFE_GENERATOR_ATTRIBUTES
    | jinja_sandbox.UNSAFE_COROUTINE_ATTRIBUTES
    | jinja_sandbox.UNSAFE_ASYNC_GENERATOR_ATTRIBUTES
)


# Filters that read an attribute named by a string argument: the position of that argument
# (None: by keyword `attribute=` only).
_ATTRIBUTE_FILTERS: dict[str, int | None] = {
    "attr": 0,
    "selectattr": 0,
    "rejectattr": 0,
    "groupby": 0,
    "sum": 0,
    "sort": 2,
    "unique": 1,
    "min": 1,
    "max": 1,
    "join": 1,
    "map": None,
}


def _internal(name: str) -> bool:
    return name.startswith("_") or name in _INTERNAL_ATTRIBUTES


def unsafe_uses(ast: nodes.Node) -> list[str]:
    """What in a parsed template or expression reaches for Python internals, e.g.
    ``''.__class__``, ``x['__dict__']``, ``x | attr('__class__')``, ``map(attribute='_x')``,
    or builds something huge from constants (``'a' * 10**10``).

    The sandbox refuses these at render time anyway; finding them here means a graph that
    tries is rejected by `validate` rather than failing on the first example.
    """
    found: list[str] = []
    for node in itertools.chain([ast], ast.find_all(nodes.Expr)):
        if isinstance(node, nodes.Getattr) and _internal(node.attr):
            found.append(f"attribute '{node.attr}' (a Python internal)")
        elif isinstance(node, nodes.Getitem):
            key = node.arg
            if isinstance(key, nodes.Const) and isinstance(key.value, str) and _internal(key.value):
                found.append(f"item '{key.value}' (a Python internal)")
        elif isinstance(node, nodes.Filter):
            found += _filter_uses(node)
        elif isinstance(node, nodes.Mul | nodes.Pow | nodes.Mod):
            found += _constant_bomb(node)
    return found


def _constant_bomb(node: nodes.BinExpr) -> list[str]:
    """The operator's own runtime bound, applied now when both sides are literals."""
    if not (isinstance(node.left, nodes.Const) and isinstance(node.right, nodes.Const)):
        return []
    left, right = node.left.value, node.right.value
    try:
        if isinstance(node, nodes.Mul):
            _check_repeat(left, right)
        elif isinstance(node, nodes.Pow):
            _check_power(left, right)
        elif isinstance(left, str) and _WIDE_FORMAT.search(left):
            return ["a `%` format 10000 or more characters wide"]
    except SecurityError as exc:
        return [str(exc)]
    return []


def _filter_uses(node: nodes.Filter) -> list[str]:
    name, args = node.name, list(node.args)
    # map('attr', '__class__') applies the attr filter to every element.
    first = args[0].value if name == "map" and args and isinstance(args[0], nodes.Const) else None
    if first in _ATTRIBUTE_FILTERS and first != "map":
        name, args = first, args[1:]
    if name not in _ATTRIBUTE_FILTERS:
        return []
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        return [f"the {name} filter with * or ** arguments (unchecked attribute names)"]
    position = _ATTRIBUTE_FILTERS[name]
    named = [kw.value for kw in node.kwargs if kw.key == "attribute"]
    if position is not None and len(args) > position:
        named.append(args[position])
    found = []
    for arg in named:
        if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
            found += [
                f"attribute '{p}' (a Python internal)" for p in arg.value.split(".") if _internal(p)
            ]
        elif name == "attr":
            found.append("the attr filter with a computed attribute name (write it literally)")
    return found


def refuse_unsafe(ast: nodes.Node, what: str) -> None:
    found = unsafe_uses(ast)
    if found:
        raise UnsafeTemplateError(f"{what} is not allowed: {'; '.join(dict.fromkeys(found))}")
