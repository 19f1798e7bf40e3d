"""Package faces imported on first use: a package's `__init__` names what other packages
may import (under `if TYPE_CHECKING:`, which type checkers read) and hands itself to
`lazy`, so importing one name loads its module alone, not the whole package."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


class _Face(ModuleType):
    """A package whose named exports load on first use. Loading a submodule sets it as an
    attribute of its package; where an export shares the module's name (`compare` of
    `compare.py`), the export keeps the name."""

    _exports: dict[str, str]

    def __getattr__(self, name: str) -> Any:
        where = self.__dict__.get("_exports", {}).get(name)
        if where is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        found = importlib.import_module(module, self.__name__)
        # Not kept on the package: `pkg.name` reads the module's value each time, as it did
        # before faces, so a value patched where it is defined (a test's monkeypatch of
        # `local.server.find_running`) is the one every package sees. About 1 µs a read;
        # `from pkg import name` binds once as ever.
        return getattr(found, attribute) if attribute else found

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and name in self.__dict__.get("_exports", {}):
            return  # the submodule of that name: the export is what the package names
        object.__setattr__(self, name, value)


def lazy(package: str) -> None:
    """Make `package` (called from its `__init__`) load each name its `if TYPE_CHECKING:`
    block imports from the module that block names, when first asked for."""
    module = sys.modules[package]
    tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.level == 1:
                    for alias in statement.names:
                        # `from .x import n`: n of module .x; `from . import x`: module .x
                        where = (
                            f".{statement.module}:{alias.name}"
                            if statement.module
                            else f".{alias.name}"
                        )
                        exports[alias.asname or alias.name] = where
    module.__class__ = _Face
    object.__setattr__(module, "_exports", exports)
