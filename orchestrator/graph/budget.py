"""What one render of a prompt may spend, checked *before* each operation builds its value.

A template is code someone else may have written. The sandbox keeps it from Python's
internals; this keeps it from the machine: every operation that can build a large value
(an operator, a filter, a method call, printing a value, a macro's output) estimates what
it would build from its operands and asks `spend` first, so a value over the one-value
bound is refused before a byte of it exists, what a render builds in all is bounded, and
the deadline is looked at on every such operation, loops or not.
"""

from __future__ import annotations

import time
from collections.abc import ItemsView, KeysView, ValuesView
from contextvars import ContextVar, Token
from typing import Any

from jinja2.utils import Namespace

from ..errors import RenderLimitError

# What one render may cost. A real prompt renders in well under a millisecond; these stop a
# template written to work for ever or to fill memory.
RENDER_SECONDS = 2.0
MAX_RENDER_CHARS = 10_000_000  # ~2.5M tokens, more than any model's context; also one value
# All a render may build, counted in items and characters (a list of a million strings
# counts a million). Five of the largest values: a long-context prompt with a few filters
# over an 8 MB text stays inside; 400 list concatenations of 10M items stop at the fifth.
MAX_RENDER_BUILT = 5 * MAX_RENDER_CHARS
MAX_REPEAT_ITEMS = 1_000_000  # what one `*` may build
MAX_POWER_BITS = 100_000  # the largest number `**` or `*` may build (~30,000 digits)


class RenderBudget:
    """The render under way: when it must end, and how much it has built so far."""

    __slots__ = ("built", "deadline")

    def __init__(self) -> None:
        self.deadline = time.monotonic() + RENDER_SECONDS
        self.built = 0


# None: not rendering a prompt, e.g. evaluating a graph expression, where an aggregate over
# a whole dataset may hold a long list; there only the bounds on amplifying operations hold.
_BUDGET: ContextVar[RenderBudget | None] = ContextVar("orchestrator_render_budget", default=None)


def start_render() -> Token[RenderBudget | None]:
    return _BUDGET.set(RenderBudget())


def end_render(token: Token[RenderBudget | None]) -> None:
    _BUDGET.reset(token)


def current() -> RenderBudget | None:
    return _BUDGET.get()


def over_time() -> RenderLimitError:
    return RenderLimitError(
        f"the template worked for more than {RENDER_SECONDS:g} s, the limit of one render "
        "(a loop or recursion that does not end?)"
    )


def too_big(what: str, size: int) -> RenderLimitError:
    return RenderLimitError(
        f"{what} would build at least {size:,} items or characters, over the limit of "
        f"{MAX_RENDER_CHARS:,} for one value"
    )


def spend(size: int, what: str, everywhere: bool = False) -> None:
    """Before an operation builds about `size` items or characters (`what` names it):
    RenderLimitError when that one value, or all the render has built with it, is over its
    bound, or when the render's time is up. Outside a render only operations whose size a
    number argument sets (a width, a count: `everywhere`) are held to the one-value bound."""
    budget = _BUDGET.get()
    if size > MAX_RENDER_CHARS and (everywhere or budget is not None):
        raise too_big(what, size)
    if budget is None:
        return
    budget.built += size
    if budget.built > MAX_RENDER_BUILT:
        raise RenderLimitError(
            f"{what} would take what this render built past {MAX_RENDER_BUILT:,} items or "
            "characters in all, the limit of one render"
        )
    if time.monotonic() > budget.deadline:
        raise over_time()


_SIZED = (str, list, tuple, dict)


def spend_result(value: Any, *sources: Any) -> Any:
    """`value`, counted as built when it is a new sized value (not one of `sources`, the
    operation's inputs) and held to the one-value bound: the net for operations that grow
    their inputs by no more than a small factor (`upper`, `escape`, a method returning a
    copy), whose results are measured after they are made."""
    budget = _BUDGET.get()
    if budget is None or not isinstance(value, _SIZED):
        return value
    if any(value is source for source in sources):
        return value
    spend(len(value), "a value")
    return value


def checked_size(value: Any) -> Any:
    """`value` as it is, unless it is a string, list, tuple or dict longer than
    MAX_RENDER_CHARS within a render: then RenderLimitError. The after-the-fact check on
    what `~`, `+`, filters, calls and namespace assignments made, behind the estimates."""
    if isinstance(value, _SIZED) and len(value) > MAX_RENDER_CHARS and _BUDGET.get() is not None:
        raise RenderLimitError(
            f"a value of over {MAX_RENDER_CHARS:,} items or characters, the limit of one render"
        )
    return value


_SCALARS = (int, float, type(None))
_VIEWS = (list, tuple, set, frozenset, KeysView, ValuesView, ItemsView)


def text_size(value: Any, indent: int = 0) -> int:
    """A lower bound of `len(str(value))` (of its JSON, with `indent`), counted only until it
    passes MAX_RENDER_CHARS. Containers are walked, so `[s] * 1000000` is measured by the
    text it prints, not by its length, and a list nested in itself by sharing stops early.
    """
    if isinstance(value, str | bytes):
        return len(value)
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    namespaces: set[int] = set()  # the only values a template can make hold themselves
    while stack and total <= MAX_RENDER_CHARS:
        item, depth = stack.pop()
        if isinstance(item, str | bytes):
            total += len(item)
            continue
        if isinstance(item, _SCALARS):
            total += 1
            continue
        if isinstance(item, Namespace):
            if id(item) in namespaces:
                continue
            namespaces.add(id(item))
            item = item._Namespace__attrs
        if isinstance(item, dict):
            # A key prints beside its value, on the value's line.
            total += sum(len(key) if isinstance(key, str) else 1 for key in item)
            children: Any = item.values()
        elif isinstance(item, _VIEWS):
            children = item
        else:
            total += 1  # an object of another kind: a short repr
            continue
        # Brackets and a separator between elements (at least 2 + n - 1), counted as one
        # and one per element; in indented JSON each element has a line of its own.
        total += 1
        step = 1 + (depth + 1) * indent
        for child in children:
            total += step
            if isinstance(child, str | bytes):
                total += len(child)
            elif not isinstance(child, _SCALARS):
                stack.append((child, depth + 1))
            if total > MAX_RENDER_CHARS:
                break
    return total
