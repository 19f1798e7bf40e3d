"""Datasets read lazily, one row at a time, from JSONL or CSV.

A row that cannot be used becomes a failed example whose error names the file and line; it
never stops the run. That covers bad JSON, a line that is not a JSON object, bytes that are
not UTF-8, malformed CSV quoting, a CSV row with more values than the header has columns,
and a field the graph reads that is missing or null. What makes the whole file unusable
stops the run instead (a DatasetError naming file and line, before any request: the run
reads every row once first): an id used twice, which would give one example two result
lines, and a line longer than MAX_ROW_BYTES, past which no row is read into memory (a
3 GB file without line breaks would be read whole).

Values are otherwise passed through as they are: numbers, lists and objects are legitimate
inputs (profiles, candidate lists), and a template that prints one gets Jinja's rendering of
it (``str(value)``: ``7``, ``['a', 'b']``); use ``|tojson`` for JSON. Text is never
rendered as a template, so Jinja syntax or instructions inside a row reach the model as
written.
"""

from __future__ import annotations

import csv
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from ..errors import DatasetError
from ..paths import sha256_file

# The longest line (a CSV record: the lines it spans) a row may take: far past any text a
# judge reads (the tests send 8 MB ones), and what bounds the memory reading one row takes.
MAX_ROW_BYTES = 64 * 2**20
# A .json file is one document, parsed whole: past this, JSON Lines is the way to read it.
MAX_JSON_BYTES = 256 * 2**20
# A CSV cell may hold a whole document; the csv module's default cap (128 KiB) would turn a
# long text into an error. Records are bounded by MAX_ROW_BYTES instead (`_Lines`), so the
# module's cap is only raised; 2**31 - 1 fits a C long everywhere.
_CSV_FIELD_LIMIT = 2**31 - 1
# What `surrogateescape` decodes each byte of an invalid UTF-8 sequence to.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_BOM = b"\xef\xbb\xbf"


@dataclass
class Row:
    """One dataset row: its 1-based line in the file, its id and fields, or why it is bad."""

    number: int
    id: str
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    auto_id: bool = False  # the row had no id: `id` is row-N


def bad_row(number: int, error: str) -> Row:
    """A row that could not be read: it fails under the made-up id `row-N` (its own id, if
    it had one, is lost with the row), which later rows must not reuse."""
    return Row(number, f"row-{number}", error=error, auto_id=True)


def row_id(data: dict[str, Any], number: int) -> tuple[str, bool]:
    """The row's id and whether it was made up (`row-N`) for a row that has none."""
    value = data.get("id")
    return (str(value), False) if value not in (None, "") else (f"row-{number}", True)


def unique_ids(rows: Iterable[Row], location: str) -> Iterator[Row]:
    """Rows as given, until an id comes a second time: a DatasetError naming both lines.
    Two examples under one id would give it two result lines, counted twice by the summary
    and matched to either by `compare` and `export`. A made-up `row-N` clashing with a real
    id says so."""
    # id -> line of its first row, negated when that id was made up. Memory grows by one id
    # string and one int a row (no tuple), which a file of millions of rows can afford.
    seen: dict[str, int] = {}
    for row in rows:
        if row.id in seen:
            first = abs(seen[row.id])
            if row.auto_id or seen[row.id] < 0:
                raise DatasetError(
                    f"{location}:{row.number}: id '{row.id}' is used twice (line {first} and "
                    f"line {row.number}), once as the made-up id of a row without one; give "
                    "every row its own id"
                )
            raise DatasetError(
                f"{location}:{row.number}: duplicate id '{row.id}' (first on line {first}); "
                "give every row its own id"
            )
        seen[row.id] = -row.number if row.auto_id else row.number
        yield row


def check_data_path(path: Path) -> None:
    """A data path that can be read as a file, or a DatasetError saying what it is instead
    (a FIFO would otherwise block the run forever on open)."""
    if not path.exists():
        raise DatasetError(f"dataset {path} not found: check the --data path")
    if path.is_dir():
        raise DatasetError(
            f"dataset {path} is a folder: give a .jsonl, .csv, .json or .parquet file"
        )
    if not stat.S_ISREG(path.stat().st_mode):
        raise DatasetError(
            f"dataset {path} is not a regular file (a pipe or a device): write the rows to a "
            "file first, the run reads it more than once"
        )


class _Lines:
    """The lines of an open file (bytes or text), numbered from 1, none read past
    MAX_ROW_BYTES: a longer line is a DatasetError naming the file and line, found after
    reading at most that much. For CSV (`records`), so is a record longer than that: the
    lines read since `new_record` (a quote left open takes every later line into one cell,
    which the csv module would hold whole)."""

    def __init__(self, handle: IO[Any], path: Path, records: bool = False) -> None:
        self.handle = handle
        self.path = path
        self.number = 0
        self.records = records
        self.record_start = 1
        self.record_size = 0

    def new_record(self) -> None:
        """The next line read starts a record."""
        self.record_start = self.number + 1
        self.record_size = 0

    def __iter__(self) -> Iterator[Any]:
        # A generator rather than __next__: a third of the cost a line.
        readline, records, limit = self.handle.readline, self.records, MAX_ROW_BYTES
        while line := readline(limit + 1):
            self.number += 1
            if len(line) > limit and line[-1:] not in ("\n", "\r", b"\n"):
                raise DatasetError(
                    f"{self.path}:{self.number}: line {self.number} is longer than "
                    f"{limit // 2**20} MiB, more than a row may hold; is this a file of rows (a "
                    "binary file, or one without line breaks, is not)? Split or shorten it"
                )
            if records:
                self.record_size += len(line)
                if self.record_size > limit:
                    start = self.record_start
                    raise DatasetError(
                        f"{self.path}:{start}: the CSV record from line {start} runs past "
                        f"{limit // 2**20} MiB by line {self.number}, more than a row may "
                        "hold: is a quote left open?"
                    )
            yield line


def _json_problem(line: bytes, exc: orjson.JSONDecodeError) -> str:
    """Why a JSONL line was rejected: bad UTF-8 is named as such, not as bad JSON."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        byte = line[bad.start]
        return f"not valid UTF-8 (byte 0x{byte:02x} at position {bad.start + 1} of the line)"
    return f"not valid JSON ({exc})"


def _jsonl(path: Path) -> Iterator[Row]:
    with path.open("rb") as handle:
        lines = _Lines(handle, path)
        for line in lines:
            number = lines.number
            if number == 1 and line.startswith(_BOM):
                line = line[len(_BOM) :]  # written by some Windows tools; not part of the row
            if not line.strip():
                continue
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                problem = _json_problem(line, exc)
                yield bad_row(number, f"{path}:{number}: {problem}")
                continue
            if not isinstance(data, dict):
                yield bad_row(number, f"{path}:{number}: a row must be a JSON object")
                continue
            the_id, auto = row_id(data, number)
            yield Row(number, the_id, data, auto_id=auto)


def _json_array(path: Path) -> Iterator[Row]:
    """A .json file holding one array of row objects (read whole: JSON has no lines)."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise DatasetError(
            f"{path}: a .json file is one document, read whole, and this one is {size:,} "
            f"bytes, over {MAX_JSON_BYTES // 2**20} MiB: write the rows as JSON Lines "
            "(.jsonl, one object a line), which is read row by row"
        )
    try:
        items = orjson.loads(path.read_bytes().removeprefix(_BOM))
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(items, list):
        raise DatasetError(
            f"{path} holds a JSON {type(items).__name__}, not rows: use JSON Lines (.jsonl, "
            "one object per line) or a JSON array of objects"
        )
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            problem = f"{path}:{number}: item {number} is not an object"
            yield bad_row(number, problem)
            continue
        the_id, auto = row_id(item, number)
        yield Row(number, the_id, item, auto_id=auto)


def _starts_with(path: Path, char: bytes) -> bool:
    """Whether the file's first non-blank byte (after a byte-order mark) is `char`."""
    with path.open("rb") as handle:
        head = handle.read(4096).removeprefix(_BOM).lstrip()
    return head[:1] == char


def _one_json_document(path: Path) -> bool:
    """A .json file that is one document over several lines (not JSON Lines): its first
    line does not parse alone, the whole file does. (A JSON Lines file with a broken first
    line stays JSON Lines: that row fails, the others run.)"""
    try:
        with path.open("rb") as handle:
            first = next((line for line in _Lines(handle, path) if line.strip()), b"")
    except DatasetError:
        return True  # only one document can have a line that long: `_json_array` judges it
    try:
        orjson.loads(first.removeprefix(_BOM))
        return False
    except orjson.JSONDecodeError:
        pass
    if path.stat().st_size > MAX_JSON_BYTES:
        return True  # too big to parse whole: `_json_array` says so
    try:
        orjson.loads(path.read_bytes().removeprefix(_BOM))
    except orjson.JSONDecodeError:
        return False
    return True


def _undecodable(text: str) -> str | None:
    """The first byte that was not UTF-8 in a `surrogateescape`-decoded string, as 0xNN."""
    if text.isascii():
        return None
    found = _ESCAPED_BYTE.search(text)
    return None if found is None else f"0x{ord(found.group()) - 0xDC00:02x}"


def _csv_row(path: Path, number: int, header: list[str], values: list[str]) -> Row:
    """One CSV record as a Row, or a failed Row saying what is wrong with it."""
    where = f"{path}:{number}"
    # A short row lacks its last columns (check_fields fails it if the graph reads them).
    data = dict(zip(header, values, strict=False))
    raw_id = data.get("id")
    the_id, auto = row_id(data, number)
    if raw_id and _undecodable(raw_id):
        the_id, auto = f"row-{number}", True
    if len(values) > len(header):
        return Row(
            number,
            the_id,
            error=f"{where}: {len(values)} values but the header has {len(header)} columns",
            auto_id=auto,
        )
    for name, value in data.items():
        byte = _undecodable(value)
        if byte is not None:
            problem = f"not valid UTF-8 (byte {byte} in column '{name}')"
            return Row(number, the_id, error=f"{where}: {problem}", auto_id=auto)
    return Row(number, the_id, data, auto_id=auto)


def _csv(path: Path) -> Iterator[Row]:
    csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))
    # surrogateescape keeps an invalid byte as a marker in its row instead of failing the
    # whole file; utf-8-sig drops a byte-order mark in front of the header.
    with path.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as handle:
        # strict: a quote left open would otherwise swallow every later line into one cell.
        lines = _Lines(handle, path, records=True)
        reader = csv.reader(lines, strict=True)
        try:
            header = next(reader, None)
        except csv.Error as exc:
            raise DatasetError(f"{path}:1: the header is not valid CSV ({exc})") from exc
        if header is None:
            return
        for name in header:
            byte = _undecodable(name)
            if byte is not None:
                raise DatasetError(f"{path}:1: the header is not valid UTF-8 (byte {byte})")
        # Numbers are lines as an editor shows them: a record starts after the previous one.
        start = reader.line_num + 1
        while True:
            lines.new_record()
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                end = reader.line_num
                span = f"; the record runs from line {start} to {end}" if end > start else ""
                yield bad_row(start, f"{path}:{start}: not valid CSV ({exc}){span}")
                start = end + 1
                continue
            number, start = start, reader.line_num + 1
            if values:  # a blank line is no row
                yield _csv_row(path, number, header, values)


def read_rows(path: Path, limit: int | None = None) -> Iterator[Row]:
    """Rows of a .jsonl, .csv or .json (JSON Lines, or one array) file, lazily; ids must be
    unique."""
    check_data_path(path)
    suffix = path.suffix.lower()
    if suffix == ".json" and (_starts_with(path, b"[") or _one_json_document(path)):
        rows = _json_array(path)
    elif suffix in (".jsonl", ".ndjson", ".json"):
        rows = _jsonl(path)
    elif suffix in (".csv",):
        rows = _csv(path)
    else:
        raise DatasetError(
            f"dataset {path}: unsupported format '{suffix}' (use .jsonl, .csv, .json or .parquet)"
        )
    for count, row in enumerate(unique_ids(rows, str(path))):
        if limit is not None and count >= limit:
            return
        yield row


def count_lines(path: Path) -> int:
    """The file's non-blank lines, read as `read_rows` reads them (none past the row
    limit): a quick count of its rows for progress."""
    with path.open("rb") as handle:
        return sum(1 for line in _Lines(handle, path) if line.strip())


def check_fields(row: Row, required: list[str], path: Path | str) -> None:
    """Mark the row failed when a field the graph reads is missing or null.

    Null is treated as missing: rendered, it would put the word "None" in the prompt.
    """
    if row.error is not None:
        return
    missing = [name for name in required if name not in row.data]
    null = [name for name in required if name in row.data and row.data[name] is None]
    if missing:
        row.error = (
            f"{path}:{row.number}: row '{row.id}' lacks field(s) {', '.join(missing)} "
            "that the graph reads"
        )
    elif null:
        row.error = (
            f"{path}:{row.number}: row '{row.id}' has null in field(s) {', '.join(null)} "
            "that the graph reads"
        )


def file_hash(path: Path) -> str:
    """Short sha256 of the dataset file (to recognise the same dataset on resume)."""
    check_data_path(path)
    return sha256_file(path)[:16]
