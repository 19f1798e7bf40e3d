"""The trace's SQL lives in store/ (issue 36, item 2): every other package reads a run
through the store's readers (`RunReader`, `TraceReader`), so a change of the trace's
layout is made, and migrated, in one place."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import orchestrator

PACKAGE = Path(orchestrator.__file__).parent
SQL = re.compile(r"\b(SELECT|INSERT INTO|DELETE FROM|UPDATE \w+ SET|PRAGMA|CREATE TABLE)\b")


def sql_outside_store(package: Path) -> list[str]:
    """Where a module outside `package`/store holds a query or opens a database itself."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package)
        if where.parts[0] == "store":
            continue
        source = path.read_text(encoding="utf-8")
        names: list[str] = []  # the code's names and dots so far: `sqlite3 . connect`
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NAME, tokenize.OP):
                names.append(token.string)
            query = token.type == tokenize.STRING and SQL.search(token.string)
            opens = names[-3:] == ["sqlite3", ".", "connect"] or names[-1:] == ["open_read_only"]
            if query or (opens and token.type == tokenize.NAME):
                found.append(f"{where.as_posix()}:{token.start[0]}")
    return found


def test_no_module_outside_store_queries_the_trace() -> None:
    assert sql_outside_store(PACKAGE) == []


def test_the_check_finds_a_query_and_leaves_the_store_alone(tmp_path: Path) -> None:
    (tmp_path / "analysis").mkdir()
    (tmp_path / "store").mkdir()
    query = 'SQL = "SELECT example_id FROM node_runs"\ndb = sqlite3.connect("t")\n'
    (tmp_path / "analysis" / "export.py").write_text(query, encoding="utf-8")
    (tmp_path / "store" / "reader.py").write_text(query, encoding="utf-8")
    assert sql_outside_store(tmp_path) == ["analysis/export.py:1", "analysis/export.py:2"]
