"""HTML fragments rendered once at build time: run facts, score histogram, summary tables.

summary.json's aggregate tables come from compute functions that are free to pick their
shape, so rendering is by shape: a flat dict is a key/value table, a list of dicts or a
dict of dicts is a table, and rows that carry a point estimate with an interval (median /
ci_low / ci_high and similar names) get a CI bar on one shared axis.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

import orjson

from ..store import (
    WORK_COUNTERS,
    Manifest,
    NodeServer,
    Summary,
    TraceRun,
    duration_text,
)
from .svg import Column, columns

# Counts shown with each part's after the total in a resumed run's header.
PARTED = tuple(name for name in WORK_COUNTERS if not name.endswith("_tokens"))

POINT_KEYS = ("median", "mean", "rating", "elo", "estimate", "score", "value", "strength", "bt")
LOW_KEYS = ("ci_low", "ci_lower", "low", "lower", "lo", "ci_lo", "q_low", "q025", "p2_5")
HIGH_KEYS = ("ci_high", "ci_upper", "high", "upper", "hi", "ci_hi", "q_high", "q975", "p97_5")
PAIR_KEYS = ("ci", "ci95", "interval", "ci_95")
NAME_KEYS = ("name", "model", "system", "label", "id", "player", "item")
MAX_TABLE_ROWS = 500
MAX_DEPTH = 4


def fmt(value: Any) -> str:
    """A cell: numbers to 4 significant digits, containers as short JSON."""
    if value is None:
        return '<span class="muted">—</span>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return escape(str(value))
        return escape(f"{value:.4g}")
    if isinstance(value, int):
        return escape(str(value))
    if isinstance(value, dict | list):
        text = orjson.dumps(value, default=str).decode()
        if len(text) > 300:
            text = text[:300] + "…"
        return f"<code>{escape(text)}</code>"
    return escape(str(value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def interval(row: Any) -> tuple[str, float, float, float] | None:
    """(point key, point, low, high) when a row carries an estimate with an interval."""
    if not isinstance(row, dict):
        return None
    point_key = next((k for k in POINT_KEYS if _number(row.get(k)) is not None), None)
    if point_key is None:
        return None
    low = next((_number(row[k]) for k in LOW_KEYS if _number(row.get(k)) is not None), None)
    high = next((_number(row[k]) for k in HIGH_KEYS if _number(row.get(k)) is not None), None)
    if low is None or high is None:
        pair = next((row[k] for k in PAIR_KEYS if isinstance(row.get(k), list | tuple)), None)
        if pair is not None and len(pair) == 2 and all(_number(v) is not None for v in pair):
            low, high = float(pair[0]), float(pair[1])
    if low is None or high is None:
        return None
    point = _number(row[point_key])
    assert point is not None
    return point_key, point, min(low, high), max(low, high)


def _ci_bar(point: float, low: float, high: float, lo: float, hi: float) -> str:
    width, height = 220, 16
    span = (hi - lo) or 1.0

    def x(v: float) -> float:
        return 6 + (v - lo) / span * (width - 12)

    return (
        f'<svg class="ci" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f'<line class="ci-axis" x1="6" x2="{width - 6}" y1="8" y2="8"/>'
        f'<line class="ci-range" x1="{x(low):.1f}" x2="{x(high):.1f}" y1="8" y2="8"/>'
        f'<circle class="ci-point" cx="{x(point):.1f}" cy="8" r="4">'
        f"<title>{point:.4g} [{low:.4g}, {high:.4g}]</title></circle></svg>"
    )


def html_table(
    columns: list[str], rows: list[list[str]], css: str = "data", numeric: Iterable[int] = ()
) -> str:
    """A table of already-escaped cells; the `numeric` columns (by position) right-aligned,
    so their digits line up."""
    right = set(numeric)

    def cell(tag: str, position: int, text: str) -> str:
        css_class = ' class="num"' if position in right else ""
        return f"<{tag}{css_class}>{text}</{tag}>"

    head = "".join(cell("th", i, escape(c)) for i, c in enumerate(columns))
    body = "".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _more(total: int) -> str:
    if total <= MAX_TABLE_ROWS:
        return ""
    return f'<p class="muted">first {MAX_TABLE_ROWS} of {total} rows shown</p>'


def rating_table(named_rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Rows with an interval, best first, with CI bars on one axis."""
    parsed = [(name, row, interval(row)) for name, row in named_rows]
    lows = [iv[2] for _, _, iv in parsed if iv]
    highs = [iv[3] for _, _, iv in parsed if iv]
    lo, hi = min(lows), max(highs)
    parsed.sort(key=lambda t: -(t[2][1] if t[2] else -math.inf))
    extra: list[str] = []
    for _, row, _ in parsed:
        for key in row:
            if key not in extra:
                extra.append(key)
    columns = ["", *extra, "interval"]
    rows = []
    for name, row, iv in parsed[:MAX_TABLE_ROWS]:
        bar = _ci_bar(iv[1], iv[2], iv[3], lo, hi) if iv else ""
        rows.append([f"<b>{escape(name)}</b>", *(fmt(row.get(k)) for k in extra), bar])
    axis = f'<p class="muted">axis {lo:.4g} … {hi:.4g}</p>'
    return html_table(columns, rows, "data rating") + axis + _more(len(parsed))


def _row_name(row: dict[str, Any], index: int) -> tuple[str, dict[str, Any]]:
    for key in NAME_KEYS:
        if isinstance(row.get(key), str | int) and not isinstance(row.get(key), bool):
            return str(row[key]), {k: v for k, v in row.items() if k != key}
    return str(index + 1), row


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def render_value(value: Any, depth: int = 0) -> str:
    """Any JSON value from summary.json as a readable table (never fails)."""
    if _scalar(value):
        return f"<p>{fmt(value)}</p>"
    if depth >= MAX_DEPTH:
        return f"<pre>{escape(orjson.dumps(value, default=str).decode())}</pre>"
    if isinstance(value, dict):
        if not value:
            return '<p class="muted">(empty)</p>'
        if interval(value) and all(_scalar(v) or isinstance(v, list) for v in value.values()):
            return rating_table([("", value)])
        if all(_scalar(v) for v in value.values()):
            items = list(value.items())
            rows = [[f"<b>{escape(str(k))}</b>", fmt(v)] for k, v in items[:MAX_TABLE_ROWS]]
            return html_table(["", "value"], rows, "data kv") + _more(len(items))
        if all(isinstance(v, dict) for v in value.values()):
            named = [(str(k), v) for k, v in value.items()]
            if sum(1 for _, v in named if interval(v)) >= max(1, len(named) // 2):
                return rating_table(named)
            if all(all(_scalar(x) for x in v.values()) for _, v in named):
                return _record_table(named)
        # Mixed: the plain entries in one table, the nested ones each under its name.
        flat = [
            (k, v)
            for k, v in value.items()
            if _scalar(v) or (isinstance(v, list) and len(v) <= 20 and all(map(_scalar, v)))
        ]
        parts = []
        if flat:
            rows = [
                [
                    f"<b>{escape(str(k))}</b>",
                    ", ".join(fmt(x) for x in v) if isinstance(v, list) else fmt(v),
                ]
                for k, v in flat
            ]
            parts.append(html_table(["", "value"], rows, "data kv"))
        flat_keys = {k for k, _ in flat}
        for key, inner in value.items():
            if key in flat_keys:
                continue
            parts.append(
                f'<div class="nested"><h4>{escape(str(key))}</h4>'
                f"{render_value(inner, depth + 1)}</div>"
            )
        return "".join(parts)
    if isinstance(value, list):
        if not value:
            return '<p class="muted">(empty list)</p>'
        if all(_scalar(v) for v in value):
            text = ", ".join(fmt(v) for v in value[:MAX_TABLE_ROWS])
            return f"<p>{text}</p>" + _more(len(value))
        if all(isinstance(v, dict) for v in value):
            named = [_row_name(v, i) for i, v in enumerate(value)]
            if sum(1 for _, v in named if interval(v)) >= max(1, len(named) // 2):
                return rating_table(named)
            return _record_table(named)
        if all(isinstance(v, list) for v in value) and all(
            all(_scalar(x) for x in v) for v in value
        ):
            width = max(len(v) for v in value)
            rows = [[fmt(x) for x in v] + [""] * (width - len(v)) for v in value[:MAX_TABLE_ROWS]]
            return html_table([str(i) for i in range(width)], rows) + _more(len(value))
    return f"<pre>{escape(orjson.dumps(value, default=str).decode())}</pre>"


def _record_table(named: list[tuple[str, dict[str, Any]]]) -> str:
    columns: list[str] = []
    for _, row in named:
        for key in row:
            if key not in columns:
                columns.append(key)
    rows = [
        [f"<b>{escape(name)}</b>", *(fmt(row.get(c)) for c in columns)]
        for name, row in named[:MAX_TABLE_ROWS]
    ]
    return html_table(["", *columns], rows) + _more(len(named))


def summary_tables(summary: Summary | dict[str, Any], folded: set[str] | None = None) -> str:
    """Every dataset-level table of summary.json except the counts shown elsewhere; the
    aggregates in `folded` are drawn as plots above, so their tables start closed."""
    if isinstance(summary, dict):
        summary = Summary.model_validate(summary)
    parts = []
    if summary.means:
        parts.append(
            f'<section class="agg"><h3>means of outputs (ok examples)</h3>'
            f"{render_value(summary.means)}</section>"
        )
    for name, value in summary.aggregates.items():
        table = render_value(value)
        if name in (folded or set()):
            table = f"<details><summary>the numbers (plotted above)</summary>{table}</details>"
        parts.append(
            f'<section class="agg" data-aggregate="{escape(name)}"><h3>{escape(name)}</h3>'
            f"{table}</section>"
        )
    return "".join(parts) or '<p class="muted">summary.json has no dataset-level tables.</p>'


def histogram(
    values: list[float],
    label: str,
    bins: int = 20,
    bounds: tuple[float | None, float | None] = (None, None),
    css: str = "hist",
) -> str:
    """A distribution as SVG columns; each carries its range (data-lo, data-hi) so a click
    can filter. Integers get one column per value; `bounds` (a schema's min and max) widen
    the axis so an empty end of the scale still shows."""
    if not values:
        return f'<p class="muted">no numeric {escape(label)} among ok examples</p>'
    lo = min([v for v in (bounds[0],) if v is not None] + values)
    hi = max([v for v in (bounds[1],) if v is not None] + values)
    integers = all(float(v).is_integer() for v in [*values, lo, hi]) and hi - lo <= 30
    if integers:
        edges = [lo - 0.5 + i for i in range(int(hi - lo) + 2)]
    elif hi == lo:
        edges = [lo - 0.5, hi + 0.5]
    else:
        step = (hi - lo) / bins
        edges = [lo + i * step for i in range(bins + 1)]
    counts = [0] * (len(edges) - 1)
    for v in values:
        index = min(int((v - edges[0]) / (edges[1] - edges[0])), len(counts) - 1)
        counts[index] += 1
    cols = []
    for i, count in enumerate(counts):
        low = edges[i] + 0.5 if integers else edges[i]
        high = edges[i + 1] - 0.5 if integers else edges[i + 1]
        text = f"{low:.4g}" if integers else f"{low:.3g} – {high:.3g}"
        cols.append(
            Column(
                text,
                count,
                f"{label} {text}: {count} examples",
                {"data-lo": repr(edges[i]), "data-hi": repr(edges[i + 1])},
            )
        )
    caption = f"{label} · {len(values)} ok examples · max bin {max(counts)}"
    return columns(cols, caption, css=css, edge_labels=not integers)


def _when(stamp: Any) -> str:
    if not isinstance(stamp, int | float):
        return "—"
    return dt.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def facts(
    manifest: Manifest,
    runs: list[TraceRun],
    results_count: int,
    served: Sequence[NodeServer] = (),
) -> str:
    """Key/value tables of what ran where (`served`: each LLM node's model and server, from
    the trace), and the run's counts."""
    graph = manifest.graph
    server_text = "; ".join(
        f"{s.base_url} ({s.structured_output or '?'} structured output"
        + (f", vLLM {s.version}" if s.version else "")
        + ")"
        for s in manifest.servers.values()
    )
    last = runs[-1] if runs else None
    if not server_text and last is not None:
        server_text = str(last.base_url or "—")
    dataset = manifest.dataset
    rows = [
        (
            "graph",
            f"<b>{escape(str(graph.name or '—'))}</b> · "
            f"<code>{escape(str(graph.hash or '—'))}</code> · "
            f"{escape(str(graph.path))}",
        ),
        ("model", escape(str(manifest.model or (last.model if last else "—")))),
        ("server", escape(server_text or "—")),
        *(
            [
                (
                    "models by node",
                    "<br>".join(
                        f"<b>{escape(entry.node)}</b>: {escape(entry.describe(manifest))}"
                        for entry in served
                    ),
                )
            ]
            if served
            else []
        ),
        (
            "dataset",
            f"{escape(str(dataset.path or '—'))} · <code>{escape(str(dataset.hash or '—'))}</code>",
        ),
        (
            "status",
            escape(manifest.status) + (f" — {escape(manifest.error)}" if manifest.error else ""),
        ),
        ("started", _when(manifest.started)),
        (
            "wall time",
            duration_text(wall) if (wall := _number(manifest.wall_seconds)) is not None else "—",
        ),
        ("runs in this folder", str(len(runs) or 1)),
    ]
    # A manifest from a run that never finished has no counts: dashes, not zeros.
    counts: dict[str, Any] = (
        manifest.counts.as_dict() if "counts" in manifest.model_fields_set else {}
    )
    known = counts.keys()

    def count(name: str, default: Any = "—") -> Any:
        if name not in known:
            return default
        # A resumed run's total, with each part's own after it.
        return manifest.count_text(name) if name in (*PARTED, "tokens") else counts[name]

    tokens = count("tokens", None)
    count_rows = [
        ("examples", str(count("examples", results_count))),
        ("ok / failed", f"{count('examples_ok')} / {count('examples_failed')}"),
        # Counted apart from ok and failed; means and aggregates leave them out.
        *(
            [("abstained (not in means or aggregates)", str(abstained))]
            if (abstained := counts.get("examples_abstained"))
            else []
        ),
        ("resumed", str(count("examples_resumed"))),
        *(
            [("parts (first run + resumes)", str(len(manifest.parts)))]
            if len(manifest.parts) > 1
            else []
        ),
        ("LLM requests", str(count("requests"))),
        ("cache hits", str(count("cache_hits"))),
        ("shared in flight", str(count("shared"))),
        ("retries", str(count("retries"))),
        (
            "tokens",
            f"{tokens if tokens is not None else '—'} · {counts.get('prompt_tokens', '—')} "
            f"prompt + {counts.get('completion_tokens', '—')} completion",
        ),
    ]

    def kv(items: list[tuple[str, str]], css: str) -> str:
        body = "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in items)
        return f'<table class="kv {css}">{body}</table>'

    return kv(rows, "facts") + kv(count_rows, "counts")
