"""Row sources: where a run's examples come from — a file, a list of dicts, a pandas or
polars DataFrame, a Hugging Face `Dataset` or `IterableDataset`.

Every source reads lazily (DataFrames in slices of `CHUNK` rows), so a run's memory does
not grow with the number of rows, and gives each row a stable id (its `id` field, else
`row-N`) and a fingerprint for the run key. `as_source` picks the right one for a value.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson

from ..errors import DatasetError
from ..shipped import pip_install
from .dataset import (
    Row,
    check_fields,
    count_lines,
    file_hash,
    read_rows,
    row_id,
    unique_ids,
)

CHUNK = 1000  # DataFrame rows converted to dicts at a time
_HASH_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


@runtime_checkable
class RowSource(Protocol):
    """What a run needs from its data."""

    location: str  # how row errors name the source, e.g. "rows.jsonl" or "DataFrame"

    def rows(self, limit: int | None = None) -> Iterator[Row]:
        """The rows in order, lazily; a bad row is a Row with `error` set, not an exception."""
        ...

    def count(self, limit: int | None = None) -> int | None:
        """How many rows `rows` will yield (for progress), or None when unknown."""
        ...

    def fingerprint(self) -> str:
        """A short hash of the content: the same data gives the same value."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the manifest records about the source."""
        ...


def _short(digest: hashlib._Hash) -> str:
    return digest.hexdigest()[:16]


def _hash_rows(records: Iterable[Any]) -> str:
    """The fingerprint of in-memory rows: the same rows give the same value whether they
    came as a list, a pandas or polars DataFrame or a Hugging Face Dataset."""
    digest = hashlib.sha256()
    for record in records:
        if isinstance(record, Mapping):
            record = {str(k): _clean(v) for k, v in record.items()}
        digest.update(orjson.dumps(record, option=_HASH_OPTIONS, default=str) + b"\n")
    return _short(digest)


def _capped(total: int, limit: int | None) -> int:
    return min(total, limit) if limit is not None else total


def _clean(value: Any) -> Any:
    """Missing values of a DataFrame (NaN, None, pandas NA) as None, so a row with a missing
    field fails as "null" rather than sending the word "nan" to the judge."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    return value


def _with_ids(records: Iterable[Any], location: str, limit: int | None) -> Iterator[Row]:
    """Rows numbered from 1 with their ids (as a file's are); a non-mapping fails its row."""

    def rows() -> Iterator[Row]:
        for index, record in enumerate(records):
            if limit is not None and index >= limit:
                return
            number = index + 1
            if not isinstance(record, Mapping):
                problem = f"{location}:{number}: a {type(record).__name__}, not a mapping"
                yield Row(number, f"row-{number}", error=problem)
                continue
            data = {str(k): _clean(v) for k, v in record.items()}
            the_id, auto = row_id(data, number)
            yield Row(number, the_id, data, auto_id=auto)

    return unique_ids(rows(), location)


class FileSource:
    """A JSONL, CSV or JSON file (see `dataset.read_rows`), or a Parquet file (pyarrow). A
    read the disk refuses or fails is a DatasetError naming the file, never an OSError."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.location = str(self.path)

    def _is_parquet(self) -> bool:
        return self.path.suffix.lower() in (".parquet", ".pq")

    @contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise DatasetError(
                f"dataset {self.path} cannot be read ({exc.strerror or exc}): check the file "
                "and the disk it is on"
            ) from exc

    def rows(self, limit: int | None = None) -> Iterator[Row]:
        with self._reading():
            if self._is_parquet():
                yield from _with_ids(self._parquet_records(), self.location, limit)
            else:
                yield from read_rows(self.path, limit)

    def _parquet_records(self) -> Iterator[dict[str, Any]]:
        parquet = _import("pyarrow.parquet", "pyarrow", "a Parquet file")
        with parquet.ParquetFile(self.path) as handle:
            for batch in handle.iter_batches(batch_size=CHUNK):
                yield from batch.to_pylist()

    def count(self, limit: int | None = None) -> int | None:
        with self._reading():
            if self._is_parquet():
                parquet = _import("pyarrow.parquet", "pyarrow", "a Parquet file")
                with parquet.ParquetFile(self.path) as handle:
                    return _capped(handle.metadata.num_rows, limit)
            if not self.path.is_file():
                return None
            total = count_lines(self.path)
        if self.path.suffix.lower() == ".csv":
            total = max(total - 1, 0)
        return _capped(total, limit)

    def fingerprint(self) -> str:
        with self._reading():
            return file_hash(self.path)

    def describe(self) -> dict[str, Any]:
        return {"kind": "file", "path": str(self.path)}


class RecordsSource:
    """A list (or other re-readable sequence) of dicts."""

    def __init__(self, records: Sequence[Any], location: str = "rows") -> None:
        self.records = records
        self.location = location

    def rows(self, limit: int | None = None) -> Iterator[Row]:
        return _with_ids(self.records, self.location, limit)

    def count(self, limit: int | None = None) -> int | None:
        return _capped(len(self.records), limit)

    def fingerprint(self) -> str:
        return _hash_rows(self.records)

    def describe(self) -> dict[str, Any]:
        return {"kind": "records", "rows": len(self.records)}


class PandasSource:
    """A pandas DataFrame, converted CHUNK rows at a time."""

    location = "DataFrame"

    def __init__(self, frame: Any) -> None:
        self.frame = frame

    def _records(self) -> Iterator[dict[str, Any]]:
        for start in range(0, len(self.frame), CHUNK):
            yield from self.frame.iloc[start : start + CHUNK].to_dict("records")

    def rows(self, limit: int | None = None) -> Iterator[Row]:
        return _with_ids(self._records(), self.location, limit)

    def count(self, limit: int | None = None) -> int | None:
        return _capped(len(self.frame), limit)

    def fingerprint(self) -> str:
        return _hash_rows(self._records())

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "pandas",
            "rows": len(self.frame),
            "columns": [str(c) for c in self.frame.columns],
        }


class PolarsSource:
    """A polars DataFrame, converted CHUNK rows at a time."""

    location = "DataFrame"

    def __init__(self, frame: Any) -> None:
        self.frame = frame

    def _records(self) -> Iterator[dict[str, Any]]:
        for part in self.frame.iter_slices(n_rows=CHUNK):
            yield from part.to_dicts()

    def rows(self, limit: int | None = None) -> Iterator[Row]:
        return _with_ids(self._records(), self.location, limit)

    def count(self, limit: int | None = None) -> int | None:
        return _capped(self.frame.height, limit)

    def fingerprint(self) -> str:
        return _hash_rows(self._records())

    def describe(self) -> dict[str, Any]:
        return {"kind": "polars", "rows": self.frame.height, "columns": list(self.frame.columns)}


class HFSource:
    """A Hugging Face `datasets.Dataset` (read lazily from Arrow) or `IterableDataset`."""

    location = "Dataset"

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.streaming = type(dataset).__name__ == "IterableDataset"

    def rows(self, limit: int | None = None) -> Iterator[Row]:
        return _with_ids(iter(self.dataset), self.location, limit)

    def count(self, limit: int | None = None) -> int | None:
        if self.streaming:
            return limit
        return _capped(len(self.dataset), limit)

    def fingerprint(self) -> str:
        # One more pass over the rows (Arrow-backed, fast); a streamed dataset is read twice.
        return _hash_rows(iter(self.dataset))

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": "datasets", "streaming": self.streaming}
        if not self.streaming:
            info["rows"] = len(self.dataset)
        return info


@dataclass
class DataScan:
    """What one read of every row, before the first request, found."""

    rows: int  # rows the run reads (its limit applied)
    sample: list[dict[str, Any]]  # the fields of the first readable rows
    failing: int = 0  # rows that fail before any node runs (unreadable, a field missing)
    first_failure: str | None = None


def scan_rows(
    source: RowSource, limit: int | None, required: list[str], sample_size: int
) -> DataScan:
    """Every row of `source` read once, streamed, before a request is made: what would
    stop the run midway (an id used twice, a line too long to be a row) or leave it with
    nothing to do (no rows) is a DatasetError now, and the rows that will fail are known.
    Only the first `sample_size` readable rows are kept."""
    scan = DataScan(rows=0, sample=[])
    for row in source.rows(limit):
        scan.rows += 1
        check_fields(row, required, source.location)
        if row.error is not None:
            scan.failing += 1
            scan.first_failure = scan.first_failure or row.error
        elif len(scan.sample) < sample_size:
            scan.sample.append(row.data)
    if scan.rows == 0:
        if limit is not None and limit < 1:
            raise DatasetError(f"limit {limit} leaves no row of {source.location} to run")
        raise DatasetError(
            f"{source.location} holds no rows: nothing to run (JSON Lines: one object a line; "
            "CSV: a header line, then one row a line)"
        )
    return scan


def _import(module: str, package: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise DatasetError(
            f"reading {what} needs {package}: pip install {package} (or {pip_install('data')})"
        ) from None


def as_source(data: Any) -> RowSource:
    """The row source for `data`: a path, a list of dicts, a pandas/polars DataFrame, a
    Hugging Face Dataset/IterableDataset, or a RowSource of your own."""
    if isinstance(data, str | Path):
        return FileSource(data)
    module = type(data).__module__.split(".", 1)[0]
    name = type(data).__name__
    if module == "pandas" and name == "DataFrame":
        return PandasSource(data)
    if module == "polars" and name == "DataFrame":
        return PolarsSource(data)
    if module == "datasets" and name in ("Dataset", "IterableDataset"):
        return HFSource(data)
    if isinstance(data, RowSource):
        return data
    if isinstance(data, Sequence) and not isinstance(data, bytes | bytearray):
        return RecordsSource(data)
    if isinstance(data, Iterable):
        raise DatasetError(
            f"a {name} can be read only once; pass a list (list(...)) or a DataFrame, so the "
            "run can fingerprint the rows and then read them"
        )
    raise DatasetError(
        f"cannot read rows from a {name}: give a file path, a list of dicts, a pandas or "
        "polars DataFrame, or a Hugging Face Dataset"
    )
