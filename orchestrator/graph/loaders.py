"""Where templates come from: a prompts folder or texts given with a graph, each template
read once and then served as read (the run key hashes exactly what renders), and the
closure of templates a prompt pulls in."""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import (
    BaseLoader,
    TemplateError,
    TemplateNotFound,
    meta,
)
from jinja2.sandbox import SandboxedEnvironment

from .sandbox import UnsafeTemplateError, refuse_unsafe

MAX_TEMPLATE_BYTES = 1_000_000  # 1 MB, as for graph files


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
        refuse_unsafe(ast, f"template '{current}'")
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
