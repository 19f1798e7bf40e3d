"""How big a value a template operation would build, estimated from its operands before it
runs, so `'x' | center(3000000000)`, `"{:>3000000000}".format(x)` or `[s] * 1000000 | join`
are refused while they are still a few bytes (budget.spend) rather than after gigabytes.

An estimate is exact where it is cheap (a width, a count, a replacement's occurrences) and
otherwise a lower bound of the true size (`budget.text_size`), so nothing a template could
build within the bounds is refused; what a lower bound misses is a small factor, caught by
the size check on the result.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Iterable
from string import Formatter
from typing import Any

from jinja2 import filters as jinja_filters
from jinja2 import pass_environment, pass_eval_context
from jinja2.environment import Environment
from jinja2.nodes import EvalContext
from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter
from jinja2.utils import generate_lorem_ipsum

from ..errors import RenderLimitError
from .budget import MAX_POWER_BITS, MAX_RENDER_CHARS, spend, text_size


def _count(value: Any) -> int | None:
    """`value` as the integer a width or count argument is, or None (Python will refuse)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return operator.index(value)


def _text(value: Any, what: str) -> str:
    """`str(value)`, after checking the text it makes is within the one-value bound."""
    if isinstance(value, str):
        return value
    spend(text_size(value), what)
    return str(value)


def check_product(left: Any, right: Any) -> None:
    """`a * b` on integers: refused when the product could pass MAX_POWER_BITS, so squaring
    a number thirty times stops at the sixteenth, in microseconds, not after minutes."""
    ints = isinstance(left, int) and isinstance(right, int)
    if ints and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
        raise RenderLimitError(f"`*` would build a number over {MAX_POWER_BITS:,} bits")


# --- printf-style `%` and the format filter --------------------------------------------------

# A `%` format with a `*` or a five-digit width or precision: '%0999999999d' % 1.
WIDE_PERCENT = re.compile(r"%[^%a-zA-Z]*?(\*|\d{5,})")
_PERCENT_NAME = re.compile(r"%\(([^)]*)\)")


def percent_size(fmt: str, values: Any) -> int:
    """A lower bound of `len(fmt % values)`: the format's own text and each value it prints
    (a mapping's values once per reference, since `%(a)s%(a)s` prints `a` twice)."""
    if WIDE_PERCENT.search(fmt):
        raise RenderLimitError("`%` formats with a width or precision of 10000 or more")
    if isinstance(values, dict):
        return len(fmt) + sum(text_size(values.get(n, "")) for n in _PERCENT_NAME.findall(fmt))
    if isinstance(values, tuple):
        return len(fmt) + sum(text_size(v) for v in values)
    return len(fmt) + text_size(values)


# --- str.format: the sandbox's formatter, each field measured before it is formatted ----------

# The end of a format spec: [width][grouping][.precision][type], read from the right so a
# fill character that is a digit (`{:0>5}`) is not taken for the width.
_SPEC = re.compile(r"(\d*)[,_]?(?:\.(\d+))?[a-zA-Z%]?$")


def field_size(value: Any, spec: str) -> int:
    """A lower bound of `len(format(value, spec))`: at least the spec's width, at least the
    precision of a number, and the value's text (cut to the precision for a string)."""
    found = _SPEC.search(spec)
    width, precision = (found.group(1), found.group(2)) if found else ("", None)
    size = text_size(value)
    if precision is not None:
        size = min(size, int(precision)) if isinstance(value, str) else max(size, int(precision))
    return max(size, int(width or 0))


class BoundedFormatter(SandboxedFormatter):
    """The sandbox's `str.format`, with every field (and a `!r`/`!s` conversion) measured
    before it is made, and the whole result held to the one-value bound as it grows."""

    def __init__(self, env: Environment, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self._size = 0

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion is not None:
            spend(text_size(value), "`str.format`")
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        size = field_size(value, format_spec)
        self._size += size
        spend(size, "`str.format`", everywhere=True)
        if self._size > MAX_RENDER_CHARS:
            raise RenderLimitError(
                f"`str.format` would build over {MAX_RENDER_CHARS:,} characters, over the "
                "limit for one value"
            )
        return super().format_field(value, format_spec)


class BoundedEscapeFormatter(BoundedFormatter, SandboxedEscapeFormatter):
    """The same for `Markup.format`, which escapes each field."""


def format_spec_widths(fmt: str) -> list[int]:
    """The field widths a literal `str.format` string asks for (for `validate`)."""
    try:
        fields = [spec for _, _, spec, _ in Formatter().parse(fmt) if spec]
    except ValueError:
        return []  # the render reports the broken format
    found = [_SPEC.search(spec) for spec in fields]
    return [int(m.group(1)) for m in found if m and m.group(1)]


# --- methods of strings, bytes and numbers that a number or a replacement can grow ----------


def _padded(receiver: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    width = _count(args[0]) if args else None
    return max(len(receiver), width or 0)


def _expanded(receiver: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    tabsize = _count(args[0] if args else kwargs.get("tabsize", 8)) or 0
    tab = "\t" if isinstance(receiver, str) else b"\t"
    return len(receiver) + receiver.count(tab) * max(tabsize, 0)


def replaced_size(text: Any, old: Any, new: Any, count: Any) -> int:
    """`len(text.replace(old, new, count))`, computed from the occurrences of `old`."""
    if type(old) is not type(text) or type(new) is not type(text):
        return len(text)  # Python refuses the mix, or the filter makes strings of them
    found = text.count(old) if old else len(text) + 1
    limit = _count(count)
    if limit is not None and limit >= 0:
        found = min(found, limit)
    return len(text) + found * max(len(new) - len(old), 0)


def _replaced(receiver: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if len(args) < 2:
        return len(receiver)
    return replaced_size(receiver, args[0], args[1], args[2] if len(args) > 2 else -1)


def _translated(receiver: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    table = args[0] if args else None
    if not isinstance(receiver, str) or not isinstance(table, dict):
        return len(receiver)  # bytes tables map a byte to a byte
    longer = [(k, len(v)) for k, v in table.items() if isinstance(v, str) and len(v) > 1]
    if len(longer) > 256:  # many long replacements: assume each character takes the longest
        return len(receiver) * max(n for _, n in longer)
    grow = sum(receiver.count(chr(k)) * (n - 1) for k, n in longer if isinstance(k, int))
    return len(receiver) + grow


def _to_bytes(receiver: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return _count(args[0] if args else kwargs.get("length", 1)) or 0


# Methods whose result a small argument can make far larger than their receiver.
_METHOD_SIZES: dict[str, Callable[[Any, tuple[Any, ...], dict[str, Any]], int]] = {
    "center": _padded,
    "ljust": _padded,
    "rjust": _padded,
    "zfill": _padded,
    "expandtabs": _expanded,
    "replace": _replaced,
    "translate": _translated,
}


def joined_size(separator: Any, items: list[Any]) -> int:
    """A lower bound of `separator.join(items)` (or of the join filter's text)."""
    size = len(separator) * max(len(items) - 1, 0)
    for item in items:
        size += len(item) if isinstance(item, str | bytes) else text_size(item)
        if size > MAX_RENDER_CHARS:
            break
    return size


def checked_call(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments to call `method` with, after refusing the call when it is a string,
    bytes or integer method whose result would pass the one-value bound. None of a
    template's other calls can grow a value by more than a small factor. An iterator given
    to `join` comes back as the list join would have made of it, measured."""
    receiver = getattr(method, "__self__", None)
    if isinstance(receiver, str | bytes):
        name = getattr(method, "__name__", "")
        if name == "join" and args:
            items = list(args[0])
            spend(joined_size(receiver, items), "`join`", everywhere=True)
            return (items, *args[1:])
        estimate = _METHOD_SIZES.get(name)
        if estimate is not None:
            spend(estimate(receiver, args, kwargs), f"`{name}`", everywhere=True)
    elif isinstance(receiver, int) and getattr(method, "__name__", "") == "to_bytes":
        spend(_to_bytes(receiver, args, kwargs), "`to_bytes`", everywhere=True)
    return args


# --- filters: Jinja's, each behind an estimate of what it would build -----------------------


def _center(value: Any, width: int = 80) -> str:
    text = _text(value, "the center filter")
    spend(max(len(text), _count(width) or 0), "the center filter", everywhere=True)
    return jinja_filters.do_center(text, width)


def _indent(s: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    text = _text(s, "the indent filter")
    step = len(width) if isinstance(width, str) else (_count(width) or 0)
    lines = text.count("\n") + 1
    spend(len(text) + lines * step, "the indent filter", everywhere=True)
    return jinja_filters.do_indent(text, width, first, blank)


@pass_environment
def _wordwrap(
    environment: Environment,
    s: Any,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    text = _text(s, "the wordwrap filter")
    wrap = wrapstring if wrapstring is not None else environment.newline_sequence
    # A wrapped line holds at least half its width (a word longer than that starts the
    # next), so there are at most twice len/width breaks, plus the text's own.
    breaks = 2 * len(text) // max(_count(width) or 1, 1) + text.count("\n") + 1
    spend(len(text) + breaks * len(str(wrap)), "the wordwrap filter", everywhere=True)
    return jinja_filters.do_wordwrap(
        environment, text, width, break_long_words, wrapstring, break_on_hyphens
    )


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    fmt = _text(value, "the format filter")
    spend(percent_size(fmt, kwargs or args), "the format filter", everywhere=True)
    return jinja_filters.do_format(fmt, *args, **kwargs)


@pass_eval_context
def _replace(eval_ctx: EvalContext, s: Any, old: Any, new: Any, count: Any = None) -> str:
    what = "the replace filter"
    size = replaced_size(text := _text(s, what), _text(old, what), _text(new, what), count)
    spend(size, what, everywhere=True)
    return jinja_filters.do_replace(eval_ctx, text, old, new, count)


@pass_eval_context
def _join(eval_ctx: EvalContext, value: Iterable[Any], d: str = "", attribute: Any = None) -> str:
    items = list(value)
    if attribute is not None:
        getter = jinja_filters.make_attrgetter(eval_ctx.environment, attribute)
        items = [getter(item) for item in items]
    spend(joined_size(str(d), items), "the join filter")
    return jinja_filters.sync_do_join(eval_ctx, items, d)


def _batch(value: Iterable[Any], linecount: int, fill_with: Any = None) -> Any:
    if fill_with is not None:  # the last batch is filled up to linecount items
        spend(_count(linecount) or 0, "the batch filter", everywhere=True)
    return jinja_filters.do_batch(value, linecount, fill_with)


def _slice(value: Any, slices: int, fill_with: Any = None) -> Any:
    spend(_count(slices) or 0, "the slice filter", everywhere=True)  # one list per slice
    return jinja_filters.sync_do_slice(value, slices, fill_with)


@pass_environment
def _sum(
    environment: Environment, iterable: Iterable[Any], attribute: Any = None, start: Any = 0
) -> Any:
    if not isinstance(start, list | tuple):
        return jinja_filters.sync_do_sum(environment, iterable, attribute, start)
    items = list(iterable)
    if attribute is not None:
        getter = jinja_filters.make_attrgetter(environment, attribute)
        items = [getter(item) for item in items]
    # Summing lists copies the running total at every step: count every copy.
    built = running = len(start)
    for item in items:
        running += len(item) if isinstance(item, list | tuple | str) else 1
        built += running
        if built > MAX_RENDER_CHARS * 10:
            break
    spend(built, "the sum filter")
    return sum(items, start)


def _tojson(value: Any, indent: int | str | None = None) -> str:
    # Jinja's own tojson escapes <, > and & for HTML; prompts want the plain text.
    step = len(indent) if isinstance(indent, str) else (_count(indent) or 0)
    spend(text_size(value, step), "the tojson filter", everywhere=step > 0)
    return json.dumps(value, ensure_ascii=False, indent=indent, default=str)


def _string(value: Any) -> str:
    return _text(value, "the string filter")


def _pprint(value: Any) -> str:
    spend(text_size(value), "the pprint filter")
    return jinja_filters.do_pprint(value)


@pass_eval_context
def _urlize(
    eval_ctx: EvalContext,
    value: Any,
    trim_url_limit: int | None = None,
    nofollow: bool = False,
    target: str | None = None,
    rel: str | None = None,
    extra_schemes: Iterable[str] | None = None,
) -> str:
    text = _text(value, "the urlize filter")
    # Each word may become a link: twice its text, the tag and its attributes.
    words = len(text.split())
    extra = len(str(target or "")) + len(str(rel or "")) + 40
    spend(2 * len(text) + words * extra, "the urlize filter", everywhere=True)
    return jinja_filters.do_urlize(
        eval_ctx, text, trim_url_limit, nofollow, target, rel, extra_schemes
    )


BOUNDED_FILTERS: dict[str, Callable[..., Any]] = {
    "center": _center,
    "indent": _indent,
    "wordwrap": _wordwrap,
    "format": _format,
    "replace": _replace,
    "join": _join,
    "batch": _batch,
    "slice": _slice,
    "sum": _sum,
    "string": _string,
    "tojson": _tojson,
    "pprint": _pprint,
    "urlize": _urlize,
}


def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """Jinja's `lipsum`, refused when it would write more words than the one-value bound."""
    spend((_count(n) or 0) * (_count(max) or 0), "lipsum", everywhere=True)
    return generate_lorem_ipsum(n, html, min, max)
