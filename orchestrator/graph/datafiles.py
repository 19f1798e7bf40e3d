"""A graph's `files:`: data read through the prompts loader, so a file obeys the prompts
folder's boundary, is sealed with the templates and joins the graph's hash, its snapshot
and what a worker is sent, exactly as a template does."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateError, TemplateNotFound

if TYPE_CHECKING:
    from .checks import Checker


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
            ck.problem(f"'{path}' not found in the prompts folder {_where(ck)}", field=where)
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
