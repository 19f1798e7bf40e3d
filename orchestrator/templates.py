"""Sandboxed Jinja for prompt templates and the small expressions in graph files.

Dataset values are passed in as *values*, never rendered as templates, so text such as
``{{ 7*7 }}`` inside a review stays literal. The sandbox refuses access to Python
internals (``__class__``, ``__globals__`` …) from templates and expressions alike, and
`unsafe_uses` finds such attempts in the source, so `validate` rejects them up front.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import posixpath
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import (
    BaseLoader,
    StrictUndefined,
    Template,
    TemplateError,
    TemplateNotFound,
    TemplateSyntaxError,
    meta,
    nodes,
    pass_context,
)
from jinja2 import sandbox as jinja_sandbox
from jinja2.exceptions import SecurityError
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

MAX_TEMPLATE_BYTES = 1_000_000  # 1 MB, as for graph files
# What one `*`, `**` or `%` in a template or expression may build; more is refused.
MAX_REPEAT_ITEMS = 1_000_000
MAX_POWER_BITS = 100_000

# Names a template or expression may use without anything in the graph providing them.
BUILTIN_NAMES = frozenset(
    {
        "range",
        "dict",
        "lipsum",
        "cycler",
        "joiner",
        "namespace",
        "loop",
        "true",
        "false",
        "none",
        "True",
        "False",
        "None",
    }
)


def _to_json(value: Any, indent: int | None = None) -> str:
    # Jinja's own tojson escapes <, > and & for HTML; prompts want the plain text.
    return json.dumps(value, ensure_ascii=False, indent=indent, default=str)


class UnsafeTemplateError(TemplateError):
    """A template or expression that reaches for Python internals or leaves its folder."""


class SealedLoader(BaseLoader):
    """A loader whose first read of each template is the one used for the rest of the run.

    The run key hashes what was read, so an edit on disk mid-run (or between compiling and
    the first render of an include) must not reach a prompt. Once `seal`ed, a template never
    read before is refused, so nothing outside the fingerprint can be rendered.
    """

    def __init__(self) -> None:
        self.served: dict[str, str] = {}
        self._filenames: dict[str, str] = {}
        self.sealed = False

    def seal(self) -> None:
        self.sealed = True

    def get_source(self, environment: Any, template: str) -> tuple[str, str, Callable[[], bool]]:
        if template in self.served:
            return self.served[template], self._filenames[template], _always
        if self.sealed:
            raise TemplateNotFound(template)
        contents, filename = self._read(_relative_name(template))
        self.served[template] = contents
        self._filenames[template] = filename
        return contents, filename, _always

    def _read(self, template: str) -> tuple[str, str]:
        raise NotImplementedError

    def list_templates(self) -> list[str]:
        raise NotImplementedError

    def where(self) -> str:
        """How errors name the place templates come from."""
        raise NotImplementedError


def _relative_name(template: str) -> str:
    """`template` checked to stay inside its prompts folder, as a clean relative path."""
    if template.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", template):
        raise UnsafeTemplateError(
            f"template '{template}' is an absolute path; name it relative to the prompts folder"
        )
    pieces = template.replace("\\", "/").split("/")
    if ".." in pieces:
        raise UnsafeTemplateError(f"template '{template}' leaves the prompts folder (..)")
    return "/".join(p for p in pieces if p not in ("", "."))


def _decode(template: str, data: bytes) -> str:
    if len(data) > MAX_TEMPLATE_BYTES:
        raise TemplateError(
            f"template '{template}' is over 1 MB ({MAX_TEMPLATE_BYTES:,} bytes), the limit"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TemplateError(
            f"template '{template}' is not UTF-8 text: byte {data[exc.start]:#04x} on line {line}"
        ) from exc


class PromptLoader(SealedLoader):
    """Templates from one folder and nothing outside it: no `..`, no absolute paths, no
    symlink that resolves elsewhere; at most MAX_TEMPLATE_BYTES of UTF-8 text each."""

    def __init__(self, searchpath: str) -> None:
        super().__init__()
        self.searchpath = [searchpath]

    def where(self) -> str:
        return str(Path(self.searchpath[0]).resolve())

    def _read(self, template: str) -> tuple[str, str]:
        root = Path(self.searchpath[0]).resolve()
        filename = posixpath.join(self.searchpath[0], *template.split("/"))
        if not os.path.isfile(filename):
            raise TemplateNotFound(template)
        real = Path(filename).resolve()
        if not real.is_relative_to(root):
            raise UnsafeTemplateError(
                f"template '{template}' is a link to {real}, outside the prompts folder {root}"
            )
        with open(real, "rb") as handle:
            data = handle.read(MAX_TEMPLATE_BYTES + 1)
        return _decode(template, data), os.path.normpath(filename)

    def list_templates(self) -> list[str]:
        root = Path(self.searchpath[0])
        if not root.is_dir():
            return []
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


class TextPromptLoader(SealedLoader):
    """Templates given as texts by name (a graph built in Python), with the same limits."""

    def __init__(self, texts: dict[str, str]) -> None:
        super().__init__()
        self.texts = {_relative_name(name): text for name, text in texts.items()}

    def where(self) -> str:
        return "the prompts given with the graph"

    def _read(self, template: str) -> tuple[str, str]:
        if template not in self.texts:
            raise TemplateNotFound(template)
        return _decode(template, self.texts[template].encode("utf-8")), template

    def list_templates(self) -> list[str]:
        return sorted(self.texts)


def _always() -> bool:
    return True


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


class _Sandbox(SandboxedEnvironment):
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


def _unfoldable(func: Callable[..., Any]) -> Callable[..., Any]:
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


def make_environment(
    prompts_dir: Path | None, texts: dict[str, str] | None = None
) -> SandboxedEnvironment:
    """The one Jinja environment for a graph: sandboxed, strict, no autoescape; templates
    from a folder or, for a graph built in Python, from texts by name."""
    loader: SealedLoader | None = None
    if texts is not None:
        loader = TextPromptLoader(texts)
    elif prompts_dir:
        loader = PromptLoader(str(prompts_dir))
    env = _Sandbox(
        loader=loader,
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tojson"] = _to_json
    env.globals["enumerate"] = enumerate
    env.globals["zip"] = zip
    env.globals["len"] = len
    env.filters = {name: _unfoldable(f) for name, f in env.filters.items()}
    env.tests = {name: _unfoldable(f) for name, f in env.tests.items()}
    return env


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


def parse_expression(env: SandboxedEnvironment, source: str) -> nodes.Expr:
    """The AST of one expression, parsed exactly as `compile_expression` parses it."""
    parser = Parser(env, source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno)
    return expr


def _refuse_unsafe(ast: nodes.Node, what: str) -> None:
    found = unsafe_uses(ast)
    if found:
        raise UnsafeTemplateError(f"{what} is not allowed: {'; '.join(dict.fromkeys(found))}")


class Expression:
    """A compiled graph-file expression (`when`, `foreach`, compute `args`, `outputs`)."""

    def __init__(self, env: SandboxedEnvironment, source: str) -> None:
        self.source = source
        _refuse_unsafe(parse_expression(env, source), f"expression '{shorten(source)}'")
        self._compiled = env.compile_expression(source, undefined_to_none=False)
        self.names = expression_names(env, source)
        self._path = plain_path(source)

    def __call__(self, context: dict[str, Any]) -> Any:
        if self._path is not None:
            # Most expressions are plain lookups like `judge.score`; walking the dicts
            # directly gives Jinja's answer at a fraction of the cost of a render.
            found, value = _walk(context, self._path)
            if found:
                return value
        value = self._compiled(**context)
        if isinstance(value, StrictUndefined):
            # Force the Undefined to raise its own clear "X is undefined" error.
            str(value)
        return value


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def plain_path(source: str) -> tuple[str, ...] | None:
    """`a.b.c` as ("a", "b", "c") when every step is a plain dict key lookup in Jinja.

    Names that are also dict attributes (`items`, `keys`…) resolve to the method in Jinja,
    so they are left to Jinja.
    """
    parts = source.strip().split(".")
    if not all(_IDENTIFIER.fullmatch(p) for p in parts):
        return None
    if any(hasattr(dict, p) or p.startswith("_") for p in parts[1:]):
        return None
    return tuple(parts)


def _walk(context: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    """(True, value) when every step is a dict holding the next key; else (False, None)."""
    value: Any = context
    for key in path:
        if type(value) is not dict or key not in value:
            return False, None
        value = value[key]
    return True, value


class Prompt:
    """A loaded prompt template. One that uses no variables at all is rendered once: a
    fixed system prompt should not cost a Jinja render per request."""

    def __init__(self, template: Template, names: set[str]) -> None:
        # Jinja keeps a template's globals as a ChainMap over the environment's and copies
        # it key by key on every render (a third of the render time for a short prompt);
        # the environment's globals are fixed once made, so a plain dict is equivalent.
        template.globals = dict(template.globals)
        self.template = template
        self.names = names
        self._fixed: str | None = None

    def render(self, context: dict[str, Any]) -> str:
        if self.names:
            return self.template.render(context)
        if self._fixed is None:
            self._fixed = self.template.render()
        return self._fixed


def expression_names(env: SandboxedEnvironment, source: str) -> set[str]:
    """Free variable names of an expression."""
    return set(meta.find_undeclared_variables(env.parse("{{ (" + source + ") }}")))


@lru_cache(maxsize=256)
def _cached_source(path: str, mtime: float) -> str:
    return Path(path).read_text(encoding="utf-8")


def template_sources(env: SandboxedEnvironment, name: str) -> dict[str, str]:
    """Source of a template and of every template it includes, imports or extends.

    Raises UnsafeTemplateError for a template that reaches for Python internals and for
    templates that include each other in a loop (rendering would never end).
    """
    assert env.loader is not None
    sources: dict[str, str] = {}
    done: set[str] = set()

    def visit(current: str, chain: tuple[str, ...]) -> None:
        if current in chain:
            loop = " -> ".join((*chain[chain.index(current) :], current))
            raise UnsafeTemplateError(f"templates include each other in a loop: {loop}")
        if current in done:
            return
        source, _, _ = env.loader.get_source(env, current)  # type: ignore[union-attr]
        ast = env.parse(source, current)
        _refuse_unsafe(ast, f"template '{current}'")
        sources[current] = source
        for child in meta.find_referenced_templates(ast):
            if child:
                visit(child, (*chain, current))
        done.add(current)

    visit(name, ())
    return sources


def has_dynamic_reference(env: SandboxedEnvironment, sources: dict[str, str]) -> bool:
    """True when a template includes, imports or extends a name computed at render time,
    so which templates a run uses cannot be known before it runs."""
    return any(
        child is None
        for current, source in sources.items()
        for child in meta.find_referenced_templates(env.parse(source, current))
    )


def all_sources(env: SandboxedEnvironment) -> dict[str, str]:
    """Every readable template the environment's loader has, by name (for graphs with
    dynamic includes, which could reach any of them)."""
    assert env.loader is not None
    found: dict[str, str] = {}
    for name in env.loader.list_templates():
        try:
            found[name] = env.loader.get_source(env, name)[0]
        except TemplateError:
            continue  # not a usable template (binary, too large, a link outside): never rendered
    return found


def names_in(env: SandboxedEnvironment, sources: dict[str, str]) -> set[str]:
    """Free variable names across templates (name -> source)."""
    found: set[str] = set()
    for current, source in sources.items():
        found |= meta.find_undeclared_variables(env.parse(source, current))
    return found


def shorten(text: str, limit: int = 80) -> str:
    """`text` cut to about `limit` characters for an error message."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def attribute_uses(env: SandboxedEnvironment, source: str) -> Iterable[tuple[str, str]]:
    """(name, attribute) pairs like ``judge.score`` read directly off a free name."""
    ast = env.parse(source)
    for node in ast.find_all(nodes.Getattr):
        if isinstance(node.node, nodes.Name):
            yield node.node.name, node.attr
