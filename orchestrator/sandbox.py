"""The sandbox around templates and graph expressions: Python internals refused, operators
that could build huge values bounded, and `unsafe_uses` to find such attempts in a source
before anything renders (so `validate` rejects them up front)."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from typing import Any

from jinja2 import (
    TemplateError,
    nodes,
    pass_context,
)
from jinja2 import sandbox as jinja_sandbox
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

# What one `*`, `**` or `%` in a template or expression may build; more is refused.
MAX_REPEAT_ITEMS = 1_000_000


MAX_POWER_BITS = 100_000


class UnsafeTemplateError(TemplateError):
    """A template or expression that reaches for Python internals or leaves its folder."""


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

    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        elif operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
            raise SecurityError("`%` formats with a width or precision of 10000 or more")
        return super().call_binop(context, operator, left, right)


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
        if passes == "environment":
            return func(context.environment, *args, **kwargs)
        if passes == "eval_context":
            return func(context.eval_ctx, *args, **kwargs)
        return func(*args, **kwargs)

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
