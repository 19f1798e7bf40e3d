"""A run folder as flat files: its result lines and node runs to Parquet, CSV or JSONL,
streamed in batches (memory does not grow with the lines), the same columns in every format."""

from __future__ import annotations

import csv
import os
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from ..errors import ConfigurationError, RunFolderError
from ..shipped import pip_install
from ..store import RESULTS, TRACES, WHOLE, NodeRun, ResultLine, RunReader, damaged_line, read_only

Format = Literal["parquet", "csv", "jsonl"]
What = Literal["results", "node_runs", "both"]
FORMATS: tuple[str, ...] = ("parquet", "csv", "jsonl")
TABLES: tuple[str, ...] = ("results", "node_runs")
EXPORT_DIR = "export"  # the default destination, inside the run folder
BATCH_ROWS = 2000

# A node run's row: column -> kind (see `_cell`). `item` is empty for a node's own record,
# the item's index for one foreach item; `value` is JSON text.
NODE_RUN_COLUMNS: dict[str, str] = {
    "node_run_id": "int",
    "run_id": "str",
    "example_id": "str",
    "node": "str",
    "item": "int",
    "status": "str",
    "error": "str",
    "model": "str",
    "endpoint": "str",
    "cached": "bool",
    "prompt_tokens": "int",
    "completion_tokens": "int",
    "latency": "float",
    "started": "float",
    "finished": "float",
    "attempts": "int",
    "attempt_kinds": "str",
    "samples": "int",
    "failed_samples": "int",
    "requests": "int",
    "reasks": "int",
    "value": "str",
}


@dataclass
class Table:
    """Columns in order, each one's kind, and a way to stream the rows (more than once)."""

    name: str
    columns: list[str]
    kinds: dict[str, str]
    rows: Callable[[], Iterator[dict[str, Any]]]


def _kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "json"


def _merged(seen: set[str]) -> str:
    """One kind for a column: ints among floats are floats; any other mix is JSON text."""
    if not seen:
        return "null"
    if len(seen) == 1:
        return next(iter(seen))
    return "float" if seen == {"int", "float"} else "json"


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def _cell(value: Any, kind: str, native_json: bool = False) -> Any:
    """A value as its column's kind holds it (JSONL keeps lists and objects as JSON)."""
    if value is None:
        return None
    if kind == "float":
        return float(value)
    if kind == "json" and not native_json:
        return _json(value)
    return value


# -- result lines ---------------------------------------------------------------------


def _result_lines(path: Path) -> Iterator[tuple[int, ResultLine]]:
    """(byte offset, line) for each result line; a torn last line is skipped, as readers do."""
    offset = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            start, offset = offset, offset + len(raw)
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError:
                if not raw.endswith(b"\n"):
                    continue  # the torn last line of a killed run
                raise damaged_line(path, number, "JSON") from None
            try:
                yield start, ResultLine.model_validate(data)
            except ValueError:
                raise damaged_line(path, number, "a result line") from None


def results_table(folder: Path | str) -> Table:
    """The latest line per example, in `RunResult.to_pandas()`'s row and column order."""
    reader = RunReader(folder)
    path = reader.path / RESULTS
    if not path.is_file():
        raise RunFolderError(f"{reader.path} has no {RESULTS}; is it a run folder?")
    # The index holds no line: per id a slot in arrays of integers (its input number, the
    # latest line's offset and row, when it was first seen, which set of columns it has);
    # lines mostly share a handful of column sets, so those are kept once.
    slots: dict[str, int] = {}
    number, offset, row, first, signature = (array("q") for _ in range(5))

    def slot(example: str) -> int:
        found = slots.get(example)
        if found is None:
            found = slots[example] = len(number)
            for column in (number, offset, row, first, signature):
                column.append(-1)
        return found

    for given in reader.inputs():
        number[slot(given.id)] = given.number
    last = len(slots) + 1
    signatures: dict[tuple[str, ...], int] = {}
    seen: dict[str, set[str]] = {}
    lines = 0
    for start, line in _result_lines(path):
        flat = line.flat()
        at = slot(line.id)
        if first[at] < 0:
            first[at], lines = lines, lines + 1
        offset[at], row[at] = start, line.row or 0
        signature[at] = signatures.setdefault(tuple(flat), len(signatures))
        for name, value in flat.items():
            kind = _kind(value)
            found = seen.setdefault(name, set())
            if kind is not None:
                found.add(kind)
    # As RunResult.results orders them: a failed line's own row, else its input number,
    # then the order in which the ids first appeared in the file (one int, not a tuple, as
    # the key: a key is held per example while sorting).
    order = sorted(
        (at for at in range(len(number)) if offset[at] >= 0),
        key=lambda at: (row[at] or (number[at] if number[at] >= 0 else last)) * lines + first[at],
    )
    keys_of = {code: keys for keys, code in signatures.items()}
    columns: dict[str, None] = {}
    merged: set[int] = set()
    for at in order:
        if signature[at] not in merged:  # a DataFrame's columns: first seen, row by row
            merged.add(signature[at])
            columns.update(dict.fromkeys(keys_of[signature[at]]))
    offsets = array("q", (offset[at] for at in order))

    def rows() -> Iterator[dict[str, Any]]:
        with path.open("rb") as handle:
            for start in offsets:
                handle.seek(start)
                yield ResultLine.model_validate(orjson.loads(handle.readline())).flat()

    return Table("results", list(columns), {c: _merged(seen[c]) for c in columns}, rows)


# -- node runs ------------------------------------------------------------------------


def node_run_row(rec: NodeRun) -> dict[str, Any]:
    """One node execution as a flat row: what it did, and its attempts summed up."""
    tally = rec.tally()
    counted = tally is not None and not tally.unsorted  # an old trace has no sample numbers
    return {
        "node_run_id": rec.id,
        "run_id": rec.run_id,
        "example_id": rec.example_id,
        "node": rec.node,
        "item": None if rec.item == WHOLE else rec.item,
        "status": rec.status,
        "error": rec.error,
        "model": rec.model,
        "endpoint": rec.endpoint,
        "cached": rec.cached,
        "prompt_tokens": rec.prompt_tokens,
        "completion_tokens": rec.completion_tokens,
        "latency": rec.latency,
        "started": rec.started,
        "finished": rec.finished,
        "attempts": len(rec.attempts),
        "attempt_kinds": ",".join(a.kind for a in rec.attempts) or None,
        "samples": tally.samples if tally and counted else None,
        "failed_samples": tally.failed_samples if tally and counted else None,
        "requests": tally.requests if tally and counted else None,
        "reasks": tally.reasks if tally and counted else None,
        "value": None if rec.value is None else _json(rec.value),
    }


def node_runs_table(folder: Path | str) -> Table:
    """Every node execution of the run, example by example, oldest first within each."""
    reader = RunReader(folder)
    if not reader.has_trace:
        raise RunFolderError(f"{reader.path} has no {TRACES}; is it a run folder?")
    with reader.trace() as trace:
        examples = trace.example_ids()

    def rows() -> Iterator[dict[str, Any]]:
        # The reader fetches one example's node runs at a time (the trace indexes them by
        # example), so the whole trace is never in memory.
        with reader.trace() as trace:
            for example in examples:
                for rec in trace.node_runs(example):
                    yield node_run_row(rec)

    return Table("node_runs", list(NODE_RUN_COLUMNS), dict(NODE_RUN_COLUMNS), rows)


def node_runs_frame(folder: Path | str) -> Any:
    """The node runs as a pandas DataFrame, the same rows and columns the export writes."""
    try:
        import pandas as pd
    except ImportError:
        raise ConfigurationError(
            f"node_runs_frame needs pandas: pip install pandas (or {pip_install('data')})"
        ) from None
    table = node_runs_table(folder)
    return pd.DataFrame(list(table.rows()), columns=table.columns)


# -- writers --------------------------------------------------------------------------


def _batches(rows: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigurationError(
            f"Parquet export needs pyarrow: {pip_install('data')} (the 'data' extra) "
            "or pip install pyarrow; CSV and JSONL need nothing more (--format csv|jsonl)"
        ) from None
    return pa, pq


def _write_parquet(table: Table, path: Path, batch_size: int) -> int:
    pa, pq = _pyarrow()
    types = {
        "bool": pa.bool_(),
        "int": pa.int64(),
        "float": pa.float64(),
        "str": pa.string(),
        "json": pa.string(),
        "null": pa.null(),
    }
    schema = pa.schema([(c, types[table.kinds[c]]) for c in table.columns])
    count = 0
    with pq.ParquetWriter(path, schema) as writer:
        for batch in _batches(table.rows(), batch_size):
            arrays = {
                c: [_cell(row.get(c), table.kinds[c]) for row in batch] for c in table.columns
            }
            writer.write_batch(pa.RecordBatch.from_pydict(arrays, schema=schema))
            count += len(batch)
    return count


def _csv_text(value: Any, kind: str) -> str:
    value = _cell(value, kind)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _write_csv(table: Table, path: Path, batch_size: int) -> int:
    count = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(table.columns)
        for batch in _batches(table.rows(), batch_size):
            writer.writerows(
                [_csv_text(row.get(c), table.kinds[c]) for c in table.columns] for row in batch
            )
            count += len(batch)
    return count


def _write_jsonl(table: Table, path: Path, batch_size: int) -> int:
    count = 0
    with path.open("wb") as handle:
        for batch in _batches(table.rows(), batch_size):
            for row in batch:
                line = {c: _cell(row.get(c), table.kinds[c], True) for c in table.columns}
                handle.write(orjson.dumps(line, option=orjson.OPT_NON_STR_KEYS) + b"\n")
            count += len(batch)
    return count


WRITERS: dict[str, Callable[[Table, Path, int], int]] = {
    "parquet": _write_parquet,
    "csv": _write_csv,
    "jsonl": _write_jsonl,
}


def _targets(folder: Path, to: Path | str | None, fmt: str, names: list[str]) -> dict[str, Path]:
    """Where each table goes: a file when `to` ends in a format's suffix, else a folder."""
    if to is not None and Path(to).suffix.lstrip(".") in FORMATS:
        target = Path(to)
        if target.suffix != f".{fmt}":
            raise ConfigurationError(f"{target} does not end in .{fmt}, the format asked for")
        if len(names) > 1:
            raise ConfigurationError(
                f"{target} is one file; exporting both tables needs a folder to hold two"
            )
        return {names[0]: target}
    base = folder / EXPORT_DIR if to is None else Path(to)
    return {name: base / f"{name}.{fmt}" for name in names}


def export(
    run_dir: Path | str,
    to: Path | str | None = None,
    *,
    format: Format | None = None,
    what: What = "results",
    batch_size: int = BATCH_ROWS,
) -> dict[str, Path]:
    """Write a run's result lines and/or node runs; `to` is a file (one table) or a folder
    (default RUN_DIR/export/), `format` defaults to its suffix, else parquet."""
    folder = Path(run_dir)
    if format is None:
        suffix = Path(to).suffix.lstrip(".") if to is not None else ""
        format = suffix if suffix in FORMATS else "parquet"  # type: ignore[assignment]
    if format not in FORMATS:
        raise ConfigurationError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if what not in (*TABLES, "both"):
        raise ConfigurationError(f"what must be results, node_runs or both, got {what!r}")
    if batch_size < 1:
        raise ConfigurationError("batch_size must be at least 1")
    if format == "parquet":
        _pyarrow()  # fail before reading anything
    names: list[str] = list(TABLES) if what == "both" else [what]
    builders = {"results": results_table, "node_runs": node_runs_table}
    tables = [builders[name](folder) for name in names]
    written: dict[str, Path] = {}
    for table, (name, path) in zip(
        tables, _targets(folder, to, format, names).items(), strict=True
    ):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Written aside and moved in place, so an interrupted export leaves no torn file.
            partial = path.with_name(path.name + ".partial")
            try:
                WRITERS[format](table, partial, batch_size)
                os.replace(partial, path)
            finally:
                partial.unlink(missing_ok=True)
        except OSError as exc:
            refused = None
            if to is None:
                advice = "export elsewhere with --out FOLDER (`to=` from Python)"
                refused = read_only(folder, exc, advice)
            if refused is None:
                raise
            raise refused from None
        written[name] = path
    return written
