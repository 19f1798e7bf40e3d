"""One error tree (issue "The core, round 2"): every error class of the package is defined
in orchestrator/errors.py under `OrchestratorError`, its docstring draws them all, the old
import locations and Python bases still catch; and where the store meets the file system a
disk that fails a read or write becomes an error of that tree naming the file, so no bare
OSError or sqlite3.Error leaves `orc.run` or `orchestrator run`."""

from __future__ import annotations

import ast
import errno
import importlib
import importlib.util
import json
import pkgutil
import re
import sqlite3
from pathlib import Path
from typing import Any

import jinja2
import pytest
from fakeserver import FakeServer
from helpers import judge_graph, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator import errors
from orchestrator.cli import app
from orchestrator.errors import DatasetError, OrchestratorError, StorageError
from orchestrator.store import trace as tracestore
from orchestrator.store.folder import RunFolder

# Exception classes defined outside errors.py, or outside the tree, on purpose (each is
# named in errors.py's docstring, which says why).
ALLOWED = {
    # A BaseException, as CancelledError is: a request waiting for the next batch file.
    "orchestrator.providers.batch.Deferred",
    # Private to the YAML reader, which turns it into a Problem of a GraphError.
    "orchestrator.graph.yamlfile._TooBig",
}


def _modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages(orc.__path__, "orchestrator.")
        if not info.name.endswith("__main__")  # running it would run the CLI
    ]
    assert len(names) > 100, names  # the walk found the package
    return names


def _exceptions_by_ast(name: str) -> set[str]:
    """Classes of a module that cannot be imported here (an optional extra is missing)
    whose bases look like exceptions: read from its source instead."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
            if any(b.endswith(("Error", "Exception", "Exit", "Gone", "Lost")) for b in bases):
                found.add(f"{name}.{node.name}")
    return found


def package_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined at the top of a module of the package, by its dotted
    name (what a module imports from elsewhere is counted where it is defined)."""
    found: dict[str, type[BaseException]] = {}
    unimportable: set[str] = set()
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("orchestrator"):
                raise
            unimportable |= _exceptions_by_ast(name)
            continue
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{value.__qualname__}"] = value
    assert not unimportable - ALLOWED, f"error classes outside errors.py: {unimportable}"
    return found


def test_every_error_is_defined_in_errors_under_the_root() -> None:
    found = package_exceptions()
    stray = sorted(
        name
        for name, cls in found.items()
        if name not in ALLOWED
        and not (cls.__module__ == "orchestrator.errors" and issubclass(cls, OrchestratorError))
    )
    assert not stray, f"define these in orchestrator/errors.py, under OrchestratorError: {stray}"
    # The allow-list names classes that exist (it does not rot into a blanket pass).
    assert set(found) >= ALLOWED, ALLOWED - set(found)
    assert issubclass(found["orchestrator.providers.batch.Deferred"], BaseException)
    assert not issubclass(found["orchestrator.providers.batch.Deferred"], Exception)


def drawn_tree(doc: str) -> dict[str, str | None]:
    """Each class the docstring's tree draws -> the class it is drawn under (None: root)."""
    entries: list[tuple[int, str]] = []
    for line in doc.splitlines():
        if line.strip().startswith("OrchestratorError "):
            entries.append((line.index("OrchestratorError"), "OrchestratorError"))
        found = re.search(r"(?:├── |└── )(\w+)", line)
        if found:
            entries.append((found.start(1), found.group(1)))
    parents: dict[str, str | None] = {}
    for index, (column, name) in enumerate(entries):
        above = [n for c, n in entries[:index] if c < column]
        parents[name] = above[-1] if above else None
    return parents


def test_the_tree_at_the_top_of_errors_draws_every_class_under_its_parent() -> None:
    doc = errors.__doc__ or ""
    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == "orchestrator.errors"
    ]
    assert len(classes) >= 30, classes
    drawn = drawn_tree(doc)
    assert set(drawn) == {cls.__name__ for cls in classes}, set(drawn) ^ {
        cls.__name__ for cls in classes
    }
    for cls in classes:
        # Its parent in the tree: the nearest base defined here (Jinja's bases come first
        # for the two Jinja-typed errors).
        ours = [b for b in cls.__mro__[1:] if b.__module__ == "orchestrator.errors"]
        expected = ours[0].__name__ if ours else None
        assert drawn[cls.__name__] == expected, (cls, drawn[cls.__name__], expected)
    for name in ALLOWED:
        assert name.rsplit(".", 1)[-1] in doc, name


def test_the_alias_modules_are_gone() -> None:
    """0.x keeps no shims (CHANGELOG.md): the modules that only re-exported the error tree,
    the fake and the transports under their old homes no longer import."""
    for old in (
        "orchestrator.calls.errors",
        "orchestrator.calls.fake",
        "orchestrator.calls.transport",
        "orchestrator.batch.transport",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)


def test_python_bases_callers_catch_are_kept() -> None:
    kept = {
        errors.SchemaError: ValueError,
        errors.LabelError: ValueError,
        errors.EmbeddedServerError: RuntimeError,
        errors.PortTaken: RuntimeError,
        errors.UntrustedFunction: LookupError,
        errors.UnsafeTemplateError: jinja2.TemplateError,
        errors.RenderLimitError: jinja2.exceptions.SecurityError,
    }
    for cls, base in kept.items():
        assert issubclass(cls, base) and issubclass(cls, OrchestratorError), cls
    # Built as before: the arguments and attributes callers use.
    schema = errors.SchemaError("output.score", "min 3 is greater than max 1")
    assert schema.field == "output.score" and str(schema) == "min 3 is greater than max 1"
    limit = errors.RenderLimitError("too long")
    assert limit.message == "too long" and str(limit) == "too long"
    with pytest.raises(ValueError):
        raise errors.LabelError("labels.jsonl:1: a label needs 'score'")


def test_a_render_over_its_limit_still_fails_only_its_example() -> None:
    """Jinja raises RenderLimitError as its own (a SecurityError): a node's render still
    catches it as a template error, so the example fails and the run goes on."""
    graph = orc.graph_from_dict(
        {
            "name": "deep",
            "inputs": ["text"],
            "nodes": {
                "judge": {
                    "kind": "llm",
                    "prompt": "p.jinja",
                    "output": {"s": {"type": "integer"}},
                }
            },
            "outputs": {"s": "judge.s"},
        },
        {"p.jinja": "{% macro down(n) %}{{ down(n + 1) }}{% endmacro %}{{ down(0) }}{{ text }}"},
    )
    result = orc.run(graph, [{"id": "a", "text": "x"}], transport=orc.FakeTransport())
    (line,) = result.failed
    assert "rendering the prompt failed" in (line.error or ""), line.error
    assert "macro" in (line.error or ""), line.error


# -- where the store meets the file system --------------------------------------------------


class Failing:
    """A file or SQLite connection whose `method` raises `error`; the rest as it was."""

    def __init__(self, real: Any, method: str, error: BaseException) -> None:
        self._real, self._method, self._error = real, method, error

    def __getattr__(self, name: str) -> Any:
        if name != self._method:
            return getattr(self._real, name)
        error = self._error

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise error

        return refuse


ROWS = [{"id": f"e{i}", "text": f"text of example {i}"} for i in range(8)]


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate <<{{ text }}>>"})


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "rows.jsonl", ROWS)


def inject(monkeypatch: pytest.MonkeyPatch, seam: str, out: Path, error: BaseException) -> Path:
    """Make the disk fail `seam`'s writes into run folder `out` with `error`; the file the
    error must name."""
    if seam == "folder":
        real_mkdir = Path.mkdir

        def mkdir(path: Path, *args: Any, **kwargs: Any) -> None:
            if path == out:
                raise error
            real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", mkdir)
        return out
    if seam in ("results", "inputs"):
        real_begin = RunFolder.begin

        def begin(self: RunFolder) -> bool:
            resuming = real_begin(self)
            attribute = f"_{seam}"
            setattr(self, attribute, Failing(getattr(self, attribute), "write", error))
            return resuming

        monkeypatch.setattr(RunFolder, "begin", begin)
        return out / f"{seam}.jsonl"
    if seam == "snapshot":
        real_write_bytes = Path.write_bytes

        def write_bytes(path: Path, blob: bytes) -> int:
            if "snapshot" in path.parts:
                raise error
            return real_write_bytes(path, blob)

        monkeypatch.setattr(Path, "write_bytes", write_bytes)
        return out / "snapshot"
    if seam == "manifest":
        from orchestrator.store import folder

        real_write_json = folder.write_json

        def write_json(path: Path, value: Any) -> None:
            if path.name == "manifest.json":
                raise error
            real_write_json(path, value)

        monkeypatch.setattr(folder, "write_json", write_json)
        return out / "manifest.json"
    assert seam == "trace"
    real_init = tracestore.TraceStore.__init__

    def init(self: tracestore.TraceStore, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self._db = Failing(self._db, "executemany", error)  # type: ignore[assignment]

    monkeypatch.setattr(tracestore.TraceStore, "__init__", init)
    return out / "traces.sqlite"


DISK_ERRORS = {
    "EIO": lambda: OSError(errno.EIO, "Input/output error"),
    "ENOSPC": lambda: OSError(errno.ENOSPC, "No space left on device"),
}
SQLITE_ERRORS = {
    "EIO": lambda: sqlite3.OperationalError("disk I/O error"),
    "ENOSPC": lambda: sqlite3.OperationalError("database or disk is full"),
}


@pytest.mark.parametrize("fault", ["EIO", "ENOSPC"])
@pytest.mark.parametrize("seam", ["folder", "results", "inputs", "snapshot", "manifest", "trace"])
def test_a_disk_that_fails_a_write_is_a_storage_error_naming_the_file(
    graph: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seam: str, fault: str
) -> None:
    out = tmp_path / "run"
    error = (SQLITE_ERRORS if seam == "trace" else DISK_ERRORS)[fault]()
    named = inject(monkeypatch, seam, out, error)
    with pytest.raises(OrchestratorError) as caught:
        orc.run(graph, data, out=out, transport=orc.FakeTransport())
    raised = caught.value
    assert isinstance(raised, StorageError), repr(raised)
    assert not isinstance(raised, OSError | sqlite3.Error)
    assert raised.__cause__ is error
    assert raised.path == str(named) and str(named) in str(raised), str(raised)
    assert raised.disk_full is (fault == "ENOSPC")
    assert ("disk is full" in str(raised)) is (fault == "ENOSPC"), str(raised)
    if seam in ("results", "inputs", "trace"):
        # The run had started: its manifest says why it stopped, naming the file.
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "error"
        assert str(named) in manifest["error"] and "resume" in manifest["error"]


def test_the_cli_says_where_the_disk_failed_and_that_the_run_resumes(
    graph: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    named = inject(monkeypatch, "results", out, DISK_ERRORS["EIO"]())
    with FakeServer() as server:
        done = CliRunner().invoke(
            app,
            [
                *("run", str(graph), "--data", str(data), "--out", str(out)),
                *("--base-url", server.base_url, "--no-cache"),
            ],
        )
    assert done.exit_code == 1, done.output
    assert isinstance(done.exception, SystemExit), done.exception
    assert "Traceback" not in done.output
    (line,) = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert str(named) in line and "Input/output error" in line, line
    assert f"finished work up to the last write is in {out}" in line, line
    assert "re-run the same command to resume" in line, line


def fail_to_open(broken: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening `broken` meets an I/O error (a failing disk); every other file opens."""
    real_open = Path.open

    def refuse(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if path == broken:
            raise OSError(errno.EIO, "Input/output error", str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)


def test_a_read_the_disk_fails_is_a_storage_error_naming_the_file(
    graph: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    orc.run(graph, data, out=out, transport=orc.FakeTransport())
    results = out / "results.jsonl"
    fail_to_open(results, monkeypatch)
    with pytest.raises(StorageError) as caught:
        list(orc.RunReader(out).results())
    assert caught.value.path == str(results)
    assert f"could not read {results}" in str(caught.value)
    # A resume reads the same file first: refused with the same error, nothing written.
    with pytest.raises(StorageError, match="could not read"):
        orc.run(graph, data, out=out, transport=orc.FakeTransport())


def test_a_dataset_the_disk_fails_is_a_dataset_error(
    graph: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_to_open(data, monkeypatch)
    with pytest.raises(DatasetError, match=f"dataset {data} cannot be read"):
        orc.run(graph, data, out=tmp_path / "run", transport=orc.FakeTransport())


def test_meta_eval_names_a_results_file_the_disk_fails(
    graph: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`meta-eval` (which reads the run folder too) says so on one line, no traceback."""
    out = tmp_path / "run"
    orc.run(graph, data, out=out, transport=orc.FakeTransport())
    labels = write_rows(tmp_path / "labels.jsonl", [{"id": r["id"], "score": 5} for r in ROWS])
    results = out / "results.jsonl"
    fail_to_open(results, monkeypatch)
    done = CliRunner().invoke(app, ["meta-eval", str(out), "--labels", str(labels)])
    assert done.exit_code == 1, done.output
    assert isinstance(done.exception, SystemExit), done.exception
    (line,) = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert f"could not read {results}" in line, line
