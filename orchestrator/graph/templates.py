"""Sandboxed Jinja for prompt templates and the small expressions in graph files.

Dataset values are passed in as *values*, never rendered as templates, so text such as
``{{ 7*7 }}`` inside a review stays literal. The sandbox refuses access to Python
internals (``__class__``, ``__globals__`` …) from templates and expressions alike, and
`unsafe_uses` finds such attempts in the source, so `validate` rejects them up front.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import (
    StrictUndefined,
    Template,
    TemplateSyntaxError,
    meta,
    nodes,
)
from jinja2.parser import Parser
from jinja2.sandbox import SandboxedEnvironment

from .loaders import (
    PromptLoader,
    SealedLoader,
    TextPromptLoader,
)
from .sandbox import BoundedNamespace, Sandbox, refuse_unsafe, render_bounded, unfoldable

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
    env = Sandbox(
        loader=loader,
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["enumerate"] = enumerate
    env.globals["zip"] = zip
    env.globals["len"] = len
    env.globals["namespace"] = BoundedNamespace
    env.filters = {name: unfoldable(f) for name, f in env.filters.items()}
    env.tests = {name: unfoldable(f) for name, f in env.tests.items()}
    return env


def parse_expression(env: SandboxedEnvironment, source: str) -> nodes.Expr:
    """The AST of one expression, parsed exactly as `compile_expression` parses it."""
    parser = Parser(env, source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno)
    return expr


class Expression:
    """A compiled graph-file expression (`when`, `foreach`, compute `args`, `outputs`)."""

    def __init__(self, env: SandboxedEnvironment, source: str) -> None:
        self.source = source
        refuse_unsafe(parse_expression(env, source), f"expression '{shorten(source)}'")
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

    A key named like a dict method (`items`, `keys`…) is the key here as in the sandbox
    (`Sandbox.getattr`); a dict without it falls back to Jinja, which gives the method.
    """
    parts = source.strip().split(".")
    if not all(_IDENTIFIER.fullmatch(p) for p in parts):
        return None
    if any(p.startswith("_") for p in parts[1:]):
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
            return render_bounded(self.template, context)
        if self._fixed is None:
            self._fixed = render_bounded(self.template)
        return self._fixed


def expression_names(env: SandboxedEnvironment, source: str) -> set[str]:
    """Free variable names of an expression."""
    return set(meta.find_undeclared_variables(env.parse("{{ (" + source + ") }}")))


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
