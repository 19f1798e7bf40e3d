"""Run folders never lie (issue 24): `--overwrite` replaces only a run's folder, a read-only
folder is read, a damaged file is named on one line (never a traceback, never a promise to
resume), a full disk leaves the manifest saying so, and resume writes each input once."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer
from helpers import judge_graph, orchestrator_command, run_graph, write_graph, write_rows
from typer.testing import CliRunner, Result

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import OrchestratorError, RunFolderError, StorageError

pytestmark = pytest.mark.reliability

ROWS = [{"id": f"e{i}", "text": f"text of example {i} " + "words " * 60} for i in range(40)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished run folder (plus its graph and data beside it), made once per module."""
    root = tmp_path_factory.mktemp("finished")
    graph = write_graph(root / "g", judge_graph(), {"judge.jinja": "Rate <<{{ text }}>>"})
    data = write_rows(root / "rows.jsonl", ROWS)
    with FakeServer() as server:
        run_graph(graph, data, root / "run", server.base_url)
    return root


@pytest.fixture
def folder(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished run, this test's to damage; its graph and data beside it."""
    shutil.copytree(finished, tmp_path, dirs_exist_ok=True)
    return tmp_path / "run"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def error_lines(result: Result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def assert_one_line_error(result: Result, *names: str) -> str:
    """The command ended with exit code 1 on one `error:` line naming `names`, no traceback."""
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    assert "Traceback" not in result.output
    (line,) = error_lines(result)
    for name in names:
        assert name in line, line
    return line


def run_args(folder: Path, server: FakeServer, root: Path | None = None) -> list[str]:
    """The `run` command line into `folder` of the graph and data beside it (or in `root`)."""
    root = root or folder.parent
    return [
        "run",
        str(root / "g" / "graph.yaml"),
        "--data",
        str(root / "rows.jsonl"),
        "--out",
        str(folder),
        "--base-url",
        server.base_url,
        "--cache",
        str(root / "cache.sqlite"),
    ]


def run_again(folder: Path, server: FakeServer, *extra: str, root: Path | None = None) -> Result:
    """`run` into `folder` in this process (see run_args)."""
    return invoke(*run_args(folder, server, root), *extra)


# -- item 6: --overwrite replaces only a run's folder ---------------------------------------


@pytest.mark.parametrize(
    "manifest",
    [
        {"name": "my own manifest", "files": ["results.jsonl"]},
        {"layout_version": 2, "run_key": None},
        [1, 2],
    ],
    ids=["foreign", "no-run-key", "not-an-object"],
)
def test_overwrite_keeps_a_folder_whose_manifest_is_not_a_runs(
    folder: Path, tmp_path: Path, manifest: Any
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.json").write_text(json.dumps(manifest))
    (mine / "results.jsonl").write_text('{"my": "data"}\n')
    with FakeServer() as server:
        done = run_again(mine, server, "--overwrite")
    line = assert_one_line_error(done, str(mine / "manifest.json"), "nothing was deleted")
    assert "run manifest" in line
    assert json.loads((mine / "manifest.json").read_text()) == manifest
    assert (mine / "results.jsonl").read_text() == '{"my": "data"}\n'


def test_overwrite_still_replaces_a_layout_1_run(folder: Path) -> None:
    """A folder made before run keys (no layout_version, no run_key) is still a run's."""
    path = folder / "manifest.json"
    old = json.loads(path.read_text())
    for key in ("layout_version", "run_key"):
        old.pop(key)
    path.write_text(json.dumps(old))
    with FakeServer() as server:
        done = run_again(folder, server, "--overwrite", "--limit", "2")
    assert done.exit_code == 0, done.output
    assert json.loads(path.read_text())["run_key"] is not None
    assert len((folder / "results.jsonl").read_text().splitlines()) == 2


# -- item 9: a damaged results line or manifest ----------------------------------------------


def damage_results(folder: Path, how: str) -> None:
    path = folder / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    if how == "list":
        lines.insert(3, "[1, 2]\n")
    elif how == "not-json":
        lines.insert(3, "this is not json\n")
    path.write_text("".join(lines))


READERS = {
    "report": lambda f, o: ["report", str(f)],
    "trace": lambda f, o: ["trace", str(f)],
    "export": lambda f, o: ["export", str(f), "--out", str(o / "out.jsonl")],
    "summarize": lambda f, o: ["summarize", str(f)],
    "compare": lambda f, o: ["compare", str(f), str(o / "other")],
}


@pytest.mark.parametrize("how", ["list", "not-json"])
@pytest.mark.parametrize("command", [*READERS, "run"])
def test_a_damaged_results_line_is_one_line_naming_it(
    folder: Path, tmp_path: Path, how: str, command: str
) -> None:
    shutil.copytree(folder, tmp_path / "other")
    damage_results(folder, how)
    if command == "run":
        with FakeServer() as server:
            done = run_again(folder, server)
        assert "Resuming" not in done.output
        assert "re-run the same command to resume" not in done.output
    else:
        done = invoke(*READERS[command](folder, tmp_path))
    assert_one_line_error(done, f"{folder / 'results.jsonl'}:4")


def test_a_torn_last_results_line_is_still_read(folder: Path, tmp_path: Path) -> None:
    """A killed run's half-written last line is skipped, as before, by every reader."""
    with (folder / "results.jsonl").open("a") as handle:
        handle.write('{"id": "e99", "sta')
    shutil.copytree(folder, tmp_path / "other")
    for command, args in READERS.items():
        done = invoke(*args(folder, tmp_path))
        assert done.exit_code == 0, (command, done.output)


def test_api_names_a_damaged_results_line(folder: Path) -> None:
    damage_results(folder, "list")
    root = folder.parent
    with FakeServer() as server, pytest.raises(RunFolderError) as caught:
        orc.run(
            root / "g" / "graph.yaml",
            root / "rows.jsonl",
            out=folder,
            base_url=server.base_url,
            cache=root / "cache.sqlite",
        )
    assert f"{folder / 'results.jsonl'}:4" in str(caught.value)
    assert isinstance(caught.value, OrchestratorError)


def test_run_on_a_damaged_results_line_leaves_no_unclosed_session(folder: Path) -> None:
    """The error comes before the client is built: no aiohttp session is left unclosed (a
    child process, where asyncio reports one on stderr)."""
    damage_results(folder, "list")
    with FakeServer() as server:
        done = orchestrator_command(*run_args(folder, server))
    assert done.returncode == 1, done.stderr
    assert f"{folder / 'results.jsonl'}:4" in done.stderr
    assert "Traceback" not in done.stderr and "Unclosed" not in done.stderr


@pytest.mark.parametrize(
    "manifest", [{"layout_version": 2, "run_key": None}, [1, 2]], ids=["null-key", "list"]
)
def test_a_manifest_that_is_not_a_runs_is_one_line(folder: Path, manifest: Any) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with FakeServer() as server:
        done = run_again(folder, server)
    assert_one_line_error(done, str(folder / "manifest.json"))
    # summarize would write the manifest's counts as the run's: it refuses too.
    assert_one_line_error(invoke("summarize", str(folder)), str(folder / "manifest.json"))
    # The readers show what the folder holds, and say the manifest could not be used.
    for args in (["trace", str(folder)], ["report", str(folder)]):
        done = invoke(*args)
        assert done.exit_code == 0, done.output
    assert "manifest.json" in (folder / "report.html").read_text()


# -- item 8: a damaged traces.sqlite ------------------------------------------------------


def garble_pages(path: Path) -> None:
    """Overwrite a few pages in the middle of a SQLite file with garbage."""
    page = 4096
    pages = path.stat().st_size // page
    assert pages > 6, pages
    with path.open("r+b") as handle:
        for number in range(pages // 3, pages // 3 + 3):
            handle.seek(number * page)
            handle.write(os.urandom(page))


@pytest.mark.parametrize("command", [*READERS, "run"])
def test_a_damaged_trace_is_one_line_and_no_resume_is_promised(
    folder: Path, tmp_path: Path, command: str
) -> None:
    shutil.copytree(folder, tmp_path / "other")
    garble_pages(folder / "traces.sqlite")
    if command == "run":
        with FakeServer() as server:
            done = run_again(folder, server)
        assert "Resuming" not in done.output
        assert "re-run the same command to resume" not in done.output
    elif command == "export":
        done = invoke(
            "export", str(folder), "--what", "node_runs", "--out", str(tmp_path / "n.csv")
        )
    else:
        done = invoke(*READERS[command](folder, tmp_path))
    if command in ("summarize", "compare"):
        # Neither reads the trace: the damage does not concern them.
        assert done.exit_code == 0, done.output
    else:
        assert_one_line_error(done, str(folder / "traces.sqlite"))


# -- item 7: a read-only run folder -----------------------------------------------------------


def read_only_commands(folder: Path, elsewhere: Path) -> dict[str, list[str]]:
    """Every reader, writing (when it writes) outside the folder."""
    return {
        "trace": ["trace", str(folder)],
        "trace-jsonl": ["trace", str(folder), "--format", "jsonl"],
        "report": ["report", str(folder), "--out", str(elsewhere / "report.html")],
        # JSONL needs no optional extra (Parquet needs pyarrow), so this runs on the floors too.
        "export": [
            "export",
            str(folder),
            "--what",
            "both",
            "--format",
            "jsonl",
            "--out",
            str(elsewhere / "x"),
        ],
        "summarize": ["summarize", str(folder), "--out", str(elsewhere / "summary.json")],
        "compare": ["compare", str(folder), str(elsewhere / "other")],
        "compare-page": [
            "compare",
            str(folder),
            str(elsewhere / "other"),
            "--html",
            str(elsewhere / "c.html"),
        ],
    }


def check_read_only(folder: Path, elsewhere: Path, root: Path) -> None:
    """`root` holds the run's graph and data."""
    before = sorted(p.name for p in folder.iterdir())
    for name, args in read_only_commands(folder, elsewhere).items():
        done = invoke(*args)
        assert done.exit_code == 0, (name, done.output, done.exception)
        assert "damaged" not in done.output
    assert (elsewhere / "report.html").is_file()
    assert (elsewhere / "summary.json").is_file()
    # The comparison page still lists the read-only run's examples, only without links.
    assert (elsewhere / "c.html").is_file()
    for name, args in {
        "report": ["report", str(folder)],
        "export": ["export", str(folder), "--format", "jsonl"],
        "summarize": ["summarize", str(folder)],
    }.items():
        line = assert_one_line_error(invoke(*args), str(folder), "read-only")
        assert "--out" in line, (name, line)
    with FakeServer() as server:
        refused = run_again(folder, server, root=root)
    assert_one_line_error(refused, str(folder), "read-only", "--out")
    assert sorted(p.name for p in folder.iterdir()) == before


def install_read_only_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plays a read-only folder whatever the user's rights (tests run as root on CI, where
    chmod stops no write): SQLite cannot make a WAL's -shm file, and writing a file raises
    EROFS."""
    import sqlite3

    from orchestrator.store import lock as runlock
    from orchestrator.store import reader

    real_connect = sqlite3.connect
    real_open = Path.open
    real_mkdir = Path.mkdir

    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        text = str(database)
        if text.startswith("file:") and "immutable=1" not in text:
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(database, *args, **kwargs)

    def inside(path: Path) -> None:
        if "run" in path.parts:
            raise OSError(errno.EROFS, "Read-only file system", str(path))

    def refuse(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            inside(path)
        return real_open(path, mode, *args, **kwargs)

    def mkdir(path: Path, *args: Any, **kwargs: Any) -> None:
        inside(path)
        real_mkdir(path, *args, **kwargs)

    def write(path: Path, data: Any, *args: Any, **kwargs: Any) -> int:
        mode = "wb" if isinstance(data, bytes) else "w"
        with refuse(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as handle:
            return int(handle.write(data))

    def refuse_lock(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(reader.sqlite3, "connect", connect)
    monkeypatch.setattr(Path, "open", refuse)
    monkeypatch.setattr(Path, "write_bytes", write)
    monkeypatch.setattr(Path, "write_text", write)
    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(runlock, "open", refuse_lock, raising=False)
    monkeypatch.setattr(reader, "folder_writable", lambda path: False, raising=False)


def test_a_read_only_folder_is_read_through_the_seam(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(folder, tmp_path / "elsewhere" / "other")
    install_read_only_seam(monkeypatch)
    check_read_only(folder, tmp_path / "elsewhere", folder.parent)


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A real read-only filesystem (a tmpfs remounted read-only), where the sandbox lets
    root mount one; skipped elsewhere (the seam test above always runs)."""
    mount = tmp_path / f"ro-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only filesystem needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_read_only_folder_is_read_on_a_read_only_mount(
    folder: Path, tmp_path: Path, read_only_mount: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(folder, elsewhere / "other")
    shutil.copytree(folder, read_only_mount / "run")
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_mount)], check=True)
    check_read_only(read_only_mount / "run", elsewhere, folder.parent)


# -- full disk -------------------------------------------------------------------------------


@pytest.mark.parametrize("writer", ["results", "trace"])
def test_a_full_disk_leaves_the_manifest_saying_so(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """The second write of results.jsonl (or of the trace) finds the disk full, and so does
    the manifest's tmp file from then on. The disk is played where the store meets it (the
    open results file, the trace's SQLite connection), so the store's own handling runs:
    `orc.run` raises a StorageError naming the file, the disk's error as its cause."""
    import sqlite3

    from orchestrator.store import folder as runfolder
    from orchestrator.store import trace

    root = folder.parent
    out = tmp_path / "new"
    calls = {"n": 0}

    class Full:
        """A file or connection whose writes find the disk full; the rest as it was."""

        def __init__(self, real: Any, method: str, error: Exception) -> None:
            self._real, self._method, self._error = real, method, error

        def __getattr__(self, name: str) -> Any:
            if name == self._method:
                raise_it = self._error

                def refuse(*args: Any, **kwargs: Any) -> Any:
                    raise raise_it

                return refuse
            return getattr(self._real, name)

    def failing(real: Any, pending: str, handle: str, method: str, error: Exception) -> Any:
        def flush(self: Any) -> None:
            if getattr(self, pending):
                calls["n"] += 1
                if calls["n"] == 2:
                    setattr(self, handle, Full(getattr(self, handle), method, error))
            real(self)

        return flush

    if writer == "results":
        full: Exception = OSError(errno.ENOSPC, "No space left on device")
        patched = failing(runfolder.RunFolder.flush, "_pending", "_results", "write", full)
        monkeypatch.setattr(runfolder.RunFolder, "flush", patched)
        named = out / "results.jsonl"
    else:
        full = sqlite3.OperationalError("database or disk is full")
        patched = failing(trace.TraceStore.flush, "_pending_runs", "_db", "executemany", full)
        monkeypatch.setattr(trace.TraceStore, "flush", patched)
        named = out / "traces.sqlite"
    real_write_bytes = Path.write_bytes

    def write_bytes(path: Path, data: bytes) -> int:
        if path.name.endswith(".tmp") and calls["n"] > 1:
            path.touch()  # a full disk makes the file, then fails to fill it
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    with FakeServer() as server, pytest.raises(StorageError) as caught:
        orc.run(
            root / "g" / "graph.yaml",
            root / "rows.jsonl",
            out=out,
            base_url=server.base_url,
            cache=False,
            concurrency=1,
        )
    assert caught.value.__cause__ is full
    assert caught.value.disk_full and caught.value.path == str(named)
    assert str(named) in str(caught.value) and "disk is full" in str(caught.value)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "error"
    assert "disk is full" in manifest["error"] and str(out) in manifest["error"]
    assert not (out / "manifest.json.tmp").exists()


# -- 13: resume writes each example's inputs once ---------------------------------------------


def test_resume_writes_each_input_once(tmp_path: Path) -> None:
    from fakeserver import Reply, schema_responder

    graph = write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate <<{{ text }}>>"})
    data = write_rows(tmp_path / "rows.jsonl", ROWS[:12])

    def fail_some(body: dict[str, Any]) -> Reply:
        text = json.dumps(body)
        if any(f"example {i} " in text for i in (1, 4, 7)):
            return Reply(content="not json at all")
        return schema_responder(body)

    out = tmp_path / "run"
    with FakeServer(fail_some) as server:
        run_graph(graph, data, out, server.base_url, limit=8)
        run_graph(graph, data, out, server.base_url)
        server.responder = schema_responder
        run_graph(graph, data, out, server.base_url)
    ids = [json.loads(line)["id"] for line in (out / "inputs.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(r["id"] for r in ROWS[:12])
