"""The layer contract (pyproject's [tool.importlinter]) holds, so `make test` fails on a new
upward import or import cycle as `make typecheck` does; a planted one is caught."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the package and contract under `root` (it reads pyproject.toml
    from, and finds the package in, its working folder)."""
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_layer_contract_holds() -> None:
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_upward_import_inside_a_function_breaks_it(tmp_path: Path) -> None:
    # Lazy imports count: they run, so they are dependencies like any other.
    shutil.copytree(
        ROOT / "orchestrator",
        tmp_path / "orchestrator",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    spec = tmp_path / "orchestrator" / "graph" / "spec.py"
    spec.write_text(
        spec.read_text()
        + "\n\ndef _planted() -> None:\n    from ..session import session  # noqa: F401\n"
    )
    done = lint(tmp_path)
    assert done.returncode != 0
    assert "orchestrator.graph.spec -> orchestrator.session.session" in done.stdout


def test_the_contract_has_no_exceptions_left() -> None:
    """Every import the contract used to ignore is gone (the graph layer is handed the
    kinds' compilers; the store's reader is opened by its callers)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    contracts = text.split("[tool.importlinter]", 1)[1].split("[tool.mypy]", 1)[0]
    assert "ignore_imports" not in contracts


def test_type_only_imports_count_too(tmp_path: Path) -> None:
    """The contract has no exemption: an upward import under `if TYPE_CHECKING:` breaks it
    as a running one does (a type a lower layer needs is defined in that layer)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "exclude_type_checking_imports" not in text
    shutil.copytree(
        ROOT / "orchestrator",
        tmp_path / "orchestrator",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    records = tmp_path / "orchestrator" / "store" / "records.py"
    records.write_text(
        records.read_text()
        + "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        + "    from ..graph.compiled import CompiledGraph  # noqa: F401\n"
    )
    done = lint(tmp_path)
    assert done.returncode != 0
    assert "orchestrator.store.records -> orchestrator.graph.compiled" in done.stdout


def reach_ins(package: Path) -> list[str]:
    """Where a module of `package` imports another package's module instead of its face
    (its `__init__`), as `path:line -> module`: any import statement, at any depth (in a
    function, under `if TYPE_CHECKING:`). A package's modules are its own; another package
    imports what its `__init__` names. The top-level `__init__`, the public names imported
    lazily from where they are defined, is the one exception; tests may import any module."""
    modules: dict[str, bool] = {}  # dotted name -> is a package
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = is_package
    faced: dict[str, set[str]] = {}  # package -> the names its `__init__` imports
    for name, is_package in modules.items():
        if is_package:
            init = package.parent / name.replace(".", "/") / "__init__.py"
            tree = ast.parse(init.read_text(encoding="utf-8"))
            # A face names its exports in imports at its top or under `if TYPE_CHECKING:`.
            statements = [
                inner
                for node in tree.body
                for inner in (node.body if isinstance(node, ast.If) else [node])
            ]
            faced[name] = {
                alias.asname or alias.name
                for node in statements
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
            }
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        if name == package.name:
            continue
        home = name if is_package else name.rpartition(".")[0]  # the importer's package
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = home.split(".")[: len(home.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                # A name the face imports is the face's (a function named as its module
                # is, `compare`), even where a module of that name exists.
                targets = [
                    f"{base}.{alias.name}"
                    if f"{base}.{alias.name}" in modules
                    and alias.name not in faced.get(base, set())
                    else base
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                owner = target.rpartition(".")[0]  # the package the module belongs to
                if target not in modules or owner in ("", package.name):
                    continue  # not ours, or a top-level module (errors, events, ...)
                if home == owner or home.startswith(owner + "."):
                    continue  # its own package's module
                found.append(f"{path.relative_to(package.parent)}:{node.lineno} -> {target}")
    return found


def test_packages_import_each_other_through_their_faces() -> None:
    assert reach_ins(ROOT / "orchestrator") == []


def test_a_reach_into_another_package_is_found(tmp_path: Path) -> None:
    package = tmp_path / "orchestrator"
    for folder in ("store", "engine", "analysis/card"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .store.folder import RunFolder\n")
    (package / "errors.py").write_text("")
    (package / "store" / "folder.py").write_text("from .records import Counts\n")
    (package / "store" / "records.py").write_text("")
    (package / "analysis" / "card" / "build.py").write_text("from ..compare import x\n")
    (package / "analysis" / "compare.py").write_text("from .card import build\n")
    # the face's `compare` (a function named as its module) is the face's to give
    (package / "analysis" / "__init__.py").write_text("from .compare import compare\n")
    (package / "api").mkdir()
    (package / "api" / "__init__.py").write_text("")
    (package / "api" / "run.py").write_text("from ..analysis import compare\n")
    (package / "engine" / "flush.py").write_text(
        "from ..errors import E\nfrom ..store import RunFolder\n"
        "def f() -> None:\n    from ..store.records import Counts\n"
        "    import orchestrator.analysis.card.build\n"
    )
    assert reach_ins(package) == [
        "orchestrator/analysis/compare.py:1 -> orchestrator.analysis.card.build",
        "orchestrator/engine/flush.py:4 -> orchestrator.store.records",
        "orchestrator/engine/flush.py:5 -> orchestrator.analysis.card.build",
    ]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_compiled_graph_load_works_first_thing_in_a_process() -> None:
    """`CompiledGraph.load` compiles with the built-in kinds in a fresh process, through the
    public name and through the graph package alone (no `import orchestrator.kinds` first)."""
    graph = str(ROOT / "graphs" / "pointwise.yaml")
    for code in (
        f"import orchestrator as orc; print(orc.CompiledGraph.load({graph!r}).name)",
        f"from orchestrator.graph import CompiledGraph; print(CompiledGraph.load({graph!r}).name)",
    ):
        done = _python(code)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "pointwise"


def rich_imports(package: Path) -> list[str]:
    """Where a module of `package` imports rich (any import statement, at any depth: in a
    function, under `if TYPE_CHECKING:`), as `path:line`, outside cli/ and ui/."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if name.startswith(("cli/", "ui/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), name)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            else:
                continue
            if any(m == "rich" or m.startswith("rich.") for m in modules):
                found.append(f"{name}:{node.lineno}")
    return found


def test_only_the_cli_and_the_ui_import_rich() -> None:
    """The terminal is the adapters' business: the engine and the session report progress
    to an observer, analysis returns text cells, and `orchestrator.ui` draws both."""
    assert rich_imports(ROOT / "orchestrator") == []


def test_a_rich_import_inside_a_function_is_found(tmp_path: Path) -> None:
    package = tmp_path / "orchestrator"
    (package / "engine").mkdir(parents=True)
    (package / "ui").mkdir()
    (package / "engine" / "flush.py").write_text(
        "def draw() -> None:\n    from rich.table import Table  # noqa: F401\n"
    )
    (package / "ui" / "progress.py").write_text("import rich.progress\n")
    assert rich_imports(package) == ["engine/flush.py:2"]


def test_a_face_reads_its_modules_values_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value patched where it is defined is what other packages see through the face,
    also after the face was read once (a copy kept on the package made tests order-bound)."""
    from orchestrator import local
    from orchestrator.local import server

    assert local.find_running is server.find_running
    monkeypatch.setattr(server, "find_running", lambda port: "patched")
    assert local.find_running(1) == "patched"
    monkeypatch.setattr(server, "DEFAULT_PORT", 1)
    assert local.DEFAULT_PORT == 1
