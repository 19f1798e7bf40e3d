"""Datasets read lazily, one row at a time, from JSONL or CSV.

A row that cannot be used (bad JSON, a missing field) becomes a failed example with its
row number; it never stops the run.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .errors import DatasetError
from .paths import sha256_file


@dataclass
class Row:
    """One dataset row: its 1-based number in the file, its id and fields, or why it is bad."""

    number: int
    id: str
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _row_id(data: dict[str, Any], number: int) -> str:
    value = data.get("id")
    return str(value) if value not in (None, "") else f"row-{number}"


def _jsonl(path: Path) -> Iterator[Row]:
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                yield Row(number, f"row-{number}", error=f"{path}:{number}: not valid JSON ({exc})")
                continue
            if not isinstance(data, dict):
                yield Row(
                    number, f"row-{number}", error=f"{path}:{number}: a row must be a JSON object"
                )
                continue
            yield Row(number, _row_id(data, number), data)


def _csv(path: Path) -> Iterator[Row]:
    with path.open(newline="", encoding="utf-8") as handle:
        # Row 1 is the header, so data rows are numbered as a spreadsheet shows them.
        for number, data in enumerate(csv.DictReader(handle), start=2):
            yield Row(number, _row_id(data, number), dict(data))


def read_rows(path: Path, limit: int | None = None) -> Iterator[Row]:
    """Rows of a .jsonl/.json-lines or .csv file, lazily; ids must be unique."""
    if not path.is_file():
        raise DatasetError(f"dataset {path} not found")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        rows = _jsonl(path)
    elif suffix in (".csv",):
        rows = _csv(path)
    else:
        raise DatasetError(f"dataset {path}: unsupported format '{suffix}' (use .jsonl or .csv)")
    seen: set[str] = set()
    for count, row in enumerate(rows):
        if limit is not None and count >= limit:
            return
        if row.error is None and row.id in seen:
            row.error = f"{path}:{row.number}: duplicate id '{row.id}'"
        seen.add(row.id)
        yield row


def check_fields(row: Row, required: list[str], path: Path) -> None:
    """Mark the row failed when a field the graph reads is missing."""
    if row.error is not None:
        return
    missing = [name for name in required if name not in row.data]
    if missing:
        row.error = (
            f"{path}:{row.number}: row '{row.id}' lacks field(s) {', '.join(missing)} "
            "that the graph reads"
        )


def file_hash(path: Path) -> str:
    """Short sha256 of the dataset file (to recognise the same dataset on resume)."""
    return sha256_file(path)[:16]
