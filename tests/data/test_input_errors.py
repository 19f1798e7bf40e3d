"""Bad `--data` and a damaged cache give one clear line, not a traceback or a hang, and lose
no work (issue: runs you can trust). Each failed before: a traceback, a run blocked
forever on a FIFO, an array file failed row by row, a run refused over a broken cache."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import sqlite3
from pathlib import Path

import pytest
from fakeserver import FakeServer
from helpers import judge_graph, orchestrator_command, results, write_graph, write_rows

from orchestrator.data.dataset import read_rows
from orchestrator.errors import DatasetError
from orchestrator.store.cache import ResponseCache, open_cache

pytestmark = pytest.mark.reliability


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate: {{ text }}"})


def run_cli(graph: Path, data: Path | str, out: Path, url: str, *extra: str):
    command = ["run", str(graph), "--data", str(data), "--out", str(out), "--base-url", url]
    return orchestrator_command(*command, *extra)


def one_clean_line(stderr: str, *words: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for word in words:
        assert word in lines[0], stderr


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo"])
def test_data_that_is_not_a_file(graph: Path, tmp_path: Path, kind: str):
    data = tmp_path / "rows.jsonl"
    if kind == "folder":
        data.mkdir()
    elif kind == "fifo":
        os.mkfifo(data)
    says = {"missing": "not found", "folder": "is a folder", "fifo": "not a regular file"}
    with FakeServer() as server:
        done = run_cli(graph, data, tmp_path / "run", server.base_url, "--no-cache")
        assert server.requests == []
    assert done.returncode == 1
    one_clean_line(done.stderr, str(data), says[kind])


def test_json_array_file_is_read_as_rows(graph: Path, tmp_path: Path):
    data = tmp_path / "rows.json"
    rows = [{"id": "a", "text": "one"}, {"id": "b", "text": "two"}, 7]
    data.write_text(json.dumps(rows, indent=2))
    with FakeServer() as server:
        done = run_cli(graph, data, tmp_path / "run", server.base_url, "--no-cache")
    lines = results(tmp_path / "run")
    assert done.returncode == 2  # one item is not an object
    assert lines["a"]["status"] == lines["b"]["status"] == "ok"
    assert "item 3 is not an object" in lines["row-3"]["error"]


def test_json_file_with_one_object_says_what_to_do(graph: Path, tmp_path: Path):
    data = tmp_path / "rows.json"
    data.write_text(json.dumps({"rows": [{"text": "x"}]}, indent=2))
    with FakeServer() as server:
        done = run_cli(graph, data, tmp_path / "run", server.base_url, "--no-cache")
    assert done.returncode == 1
    one_clean_line(done.stderr, "holds a JSON dict", "JSON Lines", "array")


def test_made_up_id_that_clashes_with_a_real_one(graph: Path, tmp_path: Path):
    """Line 1 is called "row-2"; line 2 has no id, so it would be "row-2" too: the run is
    refused before any request, naming both lines (issue 35: one id, two result lines)."""
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "row-2", "text": "a"}, {"text": "b"}])
    with FakeServer() as server:
        done = run_cli(graph, data, tmp_path / "run", server.base_url, "--no-cache")
        assert server.requests == []
    assert done.returncode == 1
    one_clean_line(done.stderr, f"{data}:2:", "line 1 and line 2", "made-up id")


def test_damaged_cache_is_named_and_the_run_goes_on(graph: Path, tmp_path: Path):
    cache = tmp_path / "cache.sqlite"
    cache.write_bytes(b"\x00garbage, not SQLite\x00" * 64)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}])
    with FakeServer() as server:
        done = run_cli(graph, data, tmp_path / "run", server.base_url, "--cache", str(cache))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the response cache {cache} cannot be read" in done.stderr  # a library warning
    assert {line["status"] for line in results(tmp_path / "run").values()} == {"ok"}


def _filled_cache(path: Path, entries: int = 2000) -> int:
    """A real cache file with `entries` replies, its WAL folded in; returns its size."""
    store = ResponseCache(path)
    for i in range(entries):
        store.put(f"key-{i}", {"choice": {"content": "x" * 200}})
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for side in path.parent.glob(path.name + "-*"):
        side.unlink()
    return path.stat().st_size


@pytest.mark.parametrize("damage", ["pages", "truncated"])
def test_cache_damaged_inside_is_named_and_the_run_goes_on(
    graph: Path, tmp_path: Path, damage: str
):
    """A cache whose header is intact opens fine and fails on the first read ("database
    disk image is malformed"): before, every node call failed on it, or the run stopped at
    its first flush. Now it is named once and the run goes on without it."""
    cache = tmp_path / "cache.sqlite"
    size = _filled_cache(cache)
    with cache.open("r+b") as handle:
        if damage == "pages":  # the schema page stays, the data pages are noise
            handle.seek(8192)
            handle.write(random.Random(7).randbytes(size - 8192))
        else:
            handle.truncate(size // 2)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}])
    with FakeServer() as server:
        done = run_cli(graph, data, tmp_path / "run", server.base_url, "--cache", str(cache))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.count(f"the response cache {cache} cannot be read") == 1, done.stderr
    assert {line["status"] for line in results(tmp_path / "run").values()} == {"ok"}


@pytest.mark.parametrize("damage", ["garbage", "pages"])
@pytest.mark.parametrize("clear", [False, True])
def test_cache_verb_on_a_damaged_cache_is_one_line(tmp_path: Path, damage: str, clear: bool):
    """Garbage fails on open; damaged pages open fine and fail on the first count."""
    cache = tmp_path / "cache.sqlite"
    if damage == "garbage":
        cache.write_bytes(b"\x00garbage, not SQLite\x00" * 64)
    else:
        size = _filled_cache(cache)
        with cache.open("r+b") as handle:
            handle.seek(8192)
            handle.write(random.Random(7).randbytes(size - 8192))
    done = orchestrator_command("cache", "--path", str(cache), *(["--clear"] if clear else []))
    assert done.returncode == 1
    one_clean_line(done.stderr, str(cache), "cannot be read")


def test_open_cache_on_a_damaged_file_warns_and_gives_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    cache = tmp_path / "cache.sqlite"
    cache.write_bytes(b"\x00garbage, not SQLite\x00" * 64)
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        assert open_cache(cache) is None
    assert f"the response cache {cache} cannot be read" in caplog.text


def test_reply_that_does_not_decode_is_a_miss(tmp_path: Path):
    """SQLite checks its pages, not the bytes we store: a damaged reply is asked again."""
    store = ResponseCache(tmp_path / "cache.sqlite")
    store.put("good", {"choice": {"content": "x"}})
    store.flush()
    store._db.execute("INSERT INTO responses VALUES ('bad', x'00ff7b', 0)")
    store._db.execute("INSERT INTO responses VALUES ('list', '[1]', 0)")
    assert store.get("good") == {"choice": {"content": "x"}}
    assert store.get("bad") is None and store.get("list") is None
    store.close()


def test_manifest_names_a_new_empty_cache(graph: Path, tmp_path: Path):
    """`if cache` used to count the rows: an empty cache was falsy and the manifest said the
    run had none (and a damaged one failed the run right there)."""
    cache = tmp_path / "new" / "cache.sqlite"
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "a", "text": "x"}])
    with FakeServer() as server:
        done = run_cli(graph, data, tmp_path / "run", server.base_url, "--cache", str(cache))
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["parameters"]["cache"] == str(cache)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # An unreadable line fails as row-2; a real id "row-2" later must not join it.
        ("not json at all", '{"id": "row-2", "text": "b"}'),
        ('{"text": "a"}', '{"id": "row-2", "text": "b"}'),
    ],
)
def test_real_id_after_a_made_up_one_names_both_lines(
    tmp_path: Path, first: str, second: str
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(f'{{"id": "x", "text": "0"}}\n{first}\n{second}\n')
    with pytest.raises(DatasetError) as refused:
        list(read_rows(data))
    message = str(refused.value)
    assert message.startswith(f"{data}:3: id 'row-2' is used twice")
    assert "line 2 and line 3" in message and "made-up id" in message


def test_duplicate_explicit_ids_name_both_lines(tmp_path: Path) -> None:
    """An id used twice stops the reading (issue 35: it used to fail the second row only,
    leaving results.jsonl two lines for one id)."""
    data = write_rows(tmp_path / "rows.jsonl", [{"id": 7, "text": "a"}, {"id": "7", "text": "b"}])
    with pytest.raises(DatasetError) as refused:
        list(read_rows(data))
    assert str(refused.value) == (
        f"{data}:2: duplicate id '7' (first on line 1); give every row its own id"
    )
