"""Reading a graph file's YAML safely: bounded in size, nesting and alias expansion,
duplicate keys refused, every failure a Problem naming the file and line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.nodes import Node as YamlNode

from ..errors import GraphError, Problem

# Limits that keep a hostile or runaway graph file from hanging `validate` or eating memory.
# The shipped graphs are under 10 kB, with under 500 YAML values nested at most 11 deep.
MAX_GRAPH_BYTES = 1_000_000  # 1 MB
MAX_YAML_DEPTH = 64  # nested mappings and lists
MAX_YAML_VALUES = 20_000  # scalars, mappings and lists, counting every alias expansion


class _GraphLoader(yaml.SafeLoader):
    """PyYAML's safe loader, bounded in nesting and size while composing, before any object
    is built. Pure Python on purpose: libyaml's composer recurses in C with no depth check."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0

    def compose_node(self, parent: YamlNode | None, index: Any) -> YamlNode | None:
        self._values += 1
        if self._values > MAX_YAML_VALUES:
            mark = self.peek_event().start_mark
            raise ComposerError(None, None, f"more than {MAX_YAML_VALUES} values", mark)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# YAML 1.2 booleans: only true/false. PyYAML follows YAML 1.1, where yes/no/on/off/y/n are
# booleans too, so `enum: [yes, no]` became [True, False] and a verdict "no" could never
# match; in a judge's graph those words are labels far more often than switches.
_BOOL = "tag:yaml.org,2002:bool"
_GraphLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_GraphLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class _TooBig(Exception):
    """A YAML value whose alias expansion is cyclic, too large or too deep."""

    def __init__(self, message: str, node: YamlNode) -> None:
        super().__init__(message)
        self.line = node.start_mark.line + 1


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _inspect(root: YamlNode, file: str) -> list[Problem]:
    """Duplicate keys anywhere in the document (PyYAML silently keeps the last), and aliases
    that expand into something cyclic, huge or deep (the "billion laughs").

    Size and height are memoised per composed node, so a shared anchor is measured once and
    the walk recurses no deeper than the text itself nests.
    """
    problems: list[Problem] = []
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height) once expanded
    active: set[int] = set()

    def measure(node: YamlNode, path: tuple[str, ...]) -> tuple[int, int]:
        if id(node) in measured:
            return measured[id(node)]
        if id(node) in active:
            raise _TooBig("an alias refers to the value that contains it", node)
        active.add(id(node))
        parts: list[tuple[int, int]] = []
        if isinstance(node, SequenceNode):
            parts = [measure(child, (*path, str(i))) for i, child in enumerate(node.value)]
        elif isinstance(node, MappingNode):
            first_line: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                child_path = path
                if isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                    ident = (key.tag, key.value)
                    line = key.start_mark.line + 1
                    if ident in first_line:
                        problems.append(_duplicate(file, path, key.value, first_line[ident], line))
                    first_line.setdefault(ident, line)
                    child_path = (*path, key.value)
                parts += [measure(key, path), measure(value, child_path)]
        active.discard(id(node))
        size = 1 + sum(p[0] for p in parts)
        height = 1 + max((p[1] for p in parts), default=0)
        if size > MAX_YAML_VALUES:
            raise _TooBig(f"aliases expand to more than {MAX_YAML_VALUES} values", node)
        if height > MAX_YAML_DEPTH:
            raise _TooBig(f"aliases nest deeper than {MAX_YAML_DEPTH} levels", node)
        measured[id(node)] = (size, height)
        return size, height

    try:
        measure(root, ())
    except _TooBig as exc:
        return [Problem(file, f"not usable YAML (line {exc.line}): {exc}")]
    return problems


def _duplicate(file: str, path: tuple[str, ...], key: str, first: int, again: int) -> Problem:
    lines = f"lines {first} and {again}"
    if path == ("nodes",):
        return Problem(file, f"node id defined twice ({lines})", node=key)
    if len(path) >= 2 and path[0] == "nodes":
        field = ".".join((*path[2:], key))
        return Problem(file, f"key '{key}' appears twice ({lines})", node=path[1], field=field)
    return Problem(file, f"key '{key}' appears twice ({lines})", field=".".join((*path, key)))


def _yaml_message(exc: yaml.YAMLError, text: str) -> str:
    """A YAML error on one line, with the line (and column) it points at."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = exc.problem or ""
        if exc.context:
            at = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            what = f"{exc.context}{at}, {what}" if what else exc.context
        if "constructor for the tag" in what:
            what += " (graph files are plain YAML: no !!python or other tags)"
        return f"not valid YAML{where}: {what}"
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[: exc.position].count("\n") + 1
        return f"not valid YAML (line {line}): character #x{exc.character:04x} is not allowed"
    return f"not valid YAML: {exc}"


def _read_text(path: Path, file: str) -> str:
    """The file as text, refusing what is missing, too large or not UTF-8."""
    try:
        if not path.is_file():
            message = "not a regular file" if path.exists() else "graph file not found"
            raise GraphError([Problem(file, message)])
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(MAX_GRAPH_BYTES + 1)  # never more than the limit, even if growing
    except OSError as exc:
        raise GraphError([Problem(file, f"cannot be read: {exc.strerror or exc}")]) from exc
    if len(data) > MAX_GRAPH_BYTES:
        message = f"the file is {size:,} bytes; graph files are limited to 1 MB"
        raise GraphError([Problem(file, f"{message} ({MAX_GRAPH_BYTES:,} bytes)")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        message = f"not UTF-8 text: byte {data[exc.start]:#04x} on line {line} (save it as UTF-8)"
        raise GraphError([Problem(file, message)]) from exc


def check_plain_shape(value: Any, file: str) -> None:
    """A graph given as Python data held to the limits a file's YAML is: at most
    MAX_YAML_DEPTH deep and MAX_YAML_VALUES values (a shared or cyclic value counted each
    time it is reached). Walked without recursion, so a 5,000-deep dict is a GraphError,
    not a RecursionError."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise GraphError([Problem(file, f"not usable: more than {MAX_YAML_VALUES} values")])
        if depth > MAX_YAML_DEPTH:
            raise GraphError(
                [Problem(file, f"not usable: nested deeper than {MAX_YAML_DEPTH} levels")]
            )
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for pair in item.items() for child in pair)
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)


def load_yaml(path: Path) -> Any:
    """Parse the file with every YAML-level limit applied; raise GraphError if any fails."""
    file = str(path)
    return load_yaml_text(_read_text(path, file), file)


def load_yaml_text(text: str, file: str) -> Any:
    """`load_yaml` of a graph file's text already read (`file` names it in problems)."""
    loader = _GraphLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        problems = _inspect(root, file)
        if problems:
            raise GraphError(problems)
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise GraphError([Problem(file, _yaml_message(exc, text))]) from exc
    except RecursionError:
        # PyYAML's scanner recurses on flow collections (`[[[[…`) before the composer's
        # depth bound is reached.
        message = f"not usable YAML: nested deeper than {MAX_YAML_DEPTH} levels"
        raise GraphError([Problem(file, message)]) from None
    except (ValueError, OverflowError) as exc:
        # Scalars PyYAML resolves but Python refuses: a 5000-digit integer, 2024-13-45.
        raise GraphError([Problem(file, f"a value cannot be read: {exc}")]) from exc
    finally:
        loader.dispose()
