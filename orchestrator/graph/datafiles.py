"""What a graph reads that no node renders: its `files:` (data) and the templates its
`variants:` name. Both are read through the prompts loader, so they obey the prompts
folder's boundary, are sealed with the templates and join the graph's hash, its snapshot
and what a worker is sent, exactly as a rendered template does."""

from __future__ import annotations

import json
from typing import Any, Protocol

from jinja2 import Environment, TemplateError, TemplateNotFound

from .spec import GraphSpec


class Checker(Protocol):
    """What reading the files asks of the graph's checks (checks.py's `Checker`): the
    prompts environment, the spec, where to note a problem and the files read."""

    data_files: set[str]

    @property
    def env(self) -> Environment: ...

    @property
    def spec(self) -> GraphSpec: ...

    @property
    def params(self) -> dict[str, Any]: ...

    def problem(self, message: str, node: str | None = None, field: str | None = None) -> None:
        """Note a problem of the graph."""


def parse_file(name: str, text: str) -> Any:
    """`text` as the graph reads it: `.json` parsed, `.jsonl` a list of its lines parsed,
    anything else the text itself. Raises ValueError naming the line that does not parse."""
    if name.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc.msg} (line {exc.lineno})") from None
    if name.endswith(".jsonl"):
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"line {number} is not JSON: {exc.msg}") from None
        return rows
    return text


def load_files(ck: Checker) -> dict[str, Any]:
    """Each of the graph's `files:` read and parsed, by name; a file that cannot be read or
    parsed is a problem under `files.NAME` (and reads as null, so the rest is checked)."""
    loaded: dict[str, Any] = {}
    loader = ck.env.loader
    for name, path in ck.spec.files.items():
        loaded[name] = None
        where = f"files.{name}"
        if loader is None:
            ck.problem(f"'{path}': the graph has no prompts folder to read it from", field=where)
            continue
        try:
            text, _, _ = loader.get_source(ck.env, path)
        except TemplateNotFound:
            ck.problem(f"'{path}' not found under {_where(ck)}", field=where)
            continue
        except TemplateError as exc:  # outside the folder, too large, not UTF-8
            ck.problem(str(exc).replace("template '", "file '", 1), field=where)
            continue
        try:
            loaded[name] = parse_file(path, text)
        except ValueError as exc:
            ck.problem(f"'{path}' {exc}", field=where)
        ck.data_files.add(path)
    return loaded


def _where(ck: Checker) -> str:
    where = getattr(ck.env.loader, "where", None)
    return where() if callable(where) else "?"


def check_variants(ck: Checker) -> None:
    """Each of `variants:` names a declared param or a template the prompts folder holds
    (read now, so it travels with the graph as its other templates do)."""
    for index, text in enumerate(ck.spec.variants):
        key, _, value = (part.strip() for part in text.partition("="))
        where = f"variants[{index}]"
        if key.startswith("params."):
            name = key.removeprefix("params.")
            if name not in ck.params:
                ck.problem(f"'{text}': the graph declares no param '{name}'", field=where)
            continue
        if ck.env.loader is None:
            ck.problem(f"'{text}': the graph has no prompts folder", field=where)
            continue
        try:
            ck.env.loader.get_source(ck.env, value)
        except TemplateNotFound:
            ck.problem(f"'{text}': no template '{value}' under {_where(ck)}", field=where)
        except TemplateError as exc:
            ck.problem(f"'{text}': {exc}", field=where)
