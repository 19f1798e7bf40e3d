"""Rows in: datasets read lazily from JSONL or CSV, and the row sources a run takes its
examples from (files, lists of dicts, DataFrames, Hugging Face datasets)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..faces import lazy

if TYPE_CHECKING:
    from .dataset import Row, check_fields, file_hash, read_rows
    from .sources import FileSource, RowSource, as_source, scan_rows

lazy(__name__)

__all__ = [
    "FileSource",
    "Row",
    "RowSource",
    "as_source",
    "check_fields",
    "file_hash",
    "read_rows",
    "scan_rows",
]
