"""Inline SVG plots the report draws itself, with no plotting library: horizontal bars,
stacked shares, estimates with intervals, a shaded matrix, columns and a scatter.

Every data mark has the class `mark` and a <title> giving its number, so a reader hovers
for the value and a test counts the marks. Colours come from classes that style.css maps
to dark strokes and light fills in print, and text is never smaller than 11px.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH = 560
ROW = 22  # height of one labelled row
LABEL_CHARS = 30  # row labels past this many characters are cut (the title keeps them)


def num(value: float | None) -> str:
    """A number as plots print it: four significant digits, "n/a" for none."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.4g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        if value >= lo - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _open(css: str, width: float, height: float, label: str) -> str:
    return (
        f'<svg class="plot {css}" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>"
    )


class Scale:
    """Maps data values on [lo, hi] to pixels on [left, right]."""

    def __init__(self, lo: float, hi: float, left: float, right: float) -> None:
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        self.lo, self.hi, self.left, self.right = lo, hi, left, right

    def __call__(self, value: float) -> float:
        value = min(max(value, self.lo), self.hi)
        return self.left + (value - self.lo) / (self.hi - self.lo) * (self.right - self.left)


def _x_axis(scale: Scale, y: float, caption: str) -> str:
    parts = [f'<line class="axis" x1="{scale.left}" x2="{scale.right}" y1="{y}" y2="{y}"/>']
    for tick in nice_ticks(scale.lo, scale.hi):
        x = scale(tick)
        parts.append(
            f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + 4}"/>'
            f'<text class="tick-label mid" x="{x:.1f}" y="{y + 15}">{num(tick)}</text>'
        )
    mid = (scale.left + scale.right) / 2
    parts.append(f'<text class="caption mid" x="{mid:.1f}" y="{y + 30}">{escape(caption)}</text>')
    return "".join(parts)


def _reference(scale: Scale, value: float | None, top: float, bottom: float) -> str:
    if value is None:
        return ""
    x = scale(value)
    return f'<line class="reference" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}"/>'


def _row_label(text: str, y: float, right: float) -> str:
    return (
        f'<text class="row-label end" x="{right:.1f}" y="{y + 4:.1f}">'
        f"<title>{escape(text)}</title>{escape(_short(text))}</text>"
    )


# -- horizontal bars -------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    """One labelled bar; `value` None draws no bar and says n/a."""

    label: str
    value: float | None
    note: str = ""  # said after the value, e.g. "n = 15"
    css: str = ""  # an extra class, e.g. to set an ensemble apart from a single metric


def hbars(
    bars: Sequence[Bar],
    caption: str,
    lo: float = 0.0,
    hi: float | None = None,
    reference: float | None = None,
) -> str:
    """Horizontal bars from `lo`, one row each, on one axis (to the largest value by default)."""
    values = [b.value for b in bars if b.value is not None and math.isfinite(b.value)]
    top = hi if hi is not None else max([lo, *values]) or 1.0
    label_w, pad = 190, 12
    scale = Scale(lo, top, label_w + pad, WIDTH - 140)
    height = len(bars) * ROW + 44
    parts = [_open("bars", WIDTH, height, caption)]
    for i, bar in enumerate(bars):
        y = 6 + i * ROW
        parts.append(_row_label(bar.label, y + 8, label_w))
        text = num(bar.value) + (f" · {bar.note}" if bar.note else "")
        if bar.value is not None and math.isfinite(bar.value):
            x0, x1 = scale(lo), scale(bar.value)
            parts.append(
                f'<rect class="mark bar {escape(bar.css)}" x="{min(x0, x1):.1f}" y="{y}" '
                f'width="{max(abs(x1 - x0), 1):.1f}" height="{ROW - 6}">'
                f"<title>{escape(bar.label)}: {escape(text)}</title></rect>"
            )
            end = max(x0, x1)
        else:
            end = scale(lo)
        parts.append(f'<text class="value" x="{end + 4:.1f}" y="{y + 12}">{escape(text)}</text>')
    bottom = 6 + len(bars) * ROW
    parts.append(_reference(scale, reference, 2, bottom))
    parts.append(_x_axis(scale, bottom, caption))
    return "".join(parts) + "</svg>"


# -- stacked shares --------------------------------------------------------------------


def stacked(
    rows: Sequence[tuple[str, Sequence[float | None]]],
    parts: Sequence[str],
    caption: str,
    reference: float | None = None,
) -> str:
    """One bar per row split into `parts` (shares summing to at most 1), with a legend."""
    label_w, pad = 190, 12
    scale = Scale(0.0, 1.0, label_w + pad, WIDTH - 20)
    height = len(rows) * ROW + 64
    out = [_open("stacked", WIDTH, height, caption)]
    for i, (label, shares) in enumerate(rows):
        y = 6 + i * ROW
        out.append(_row_label(label, y + 8, label_w))
        start = 0.0
        for k, share in enumerate(shares):
            if share is None or share <= 0:
                continue
            x0, x1 = scale(start), scale(start + share)
            out.append(
                f'<rect class="mark seg seg-{k}" x="{x0:.1f}" y="{y}" width="{x1 - x0:.1f}" '
                f'height="{ROW - 6}"><title>{escape(label)} · {escape(parts[k])}: '
                f"{num(share)}</title></rect>"
            )
            start += share
    bottom = 6 + len(rows) * ROW
    out.append(_reference(scale, reference, 2, bottom))
    out.append(_x_axis(scale, bottom, caption))
    x = label_w + pad
    for k, part in enumerate(parts):
        out.append(
            f'<rect class="seg seg-{k}" x="{x}" y="{height - 14}" width="12" height="10"/>'
            f'<text class="value" x="{x + 16}" y="{height - 5}">{escape(part)}</text>'
        )
        x += 24 + 7 * len(part)
    return "".join(out) + "</svg>"


# -- estimates with intervals ----------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its interval (either end None: the point alone)."""

    label: str
    point: float
    low: float | None = None
    high: float | None = None
    series: int = 0  # 0: filled circle, 1: open square, 2: open diamond (see `legend`)


SERIES_SHAPES = 3  # filled circle, open square, open diamond


def _point_mark(series: int, x: float, y: float, title: str) -> str:
    css = f"mark point series-{series % SERIES_SHAPES}"
    body = f"<title>{escape(title)}</title>"
    if series % SERIES_SHAPES == 0:
        return f'<circle class="{css}" cx="{x:.1f}" cy="{y}" r="4.5">{body}</circle>'
    if series % SERIES_SHAPES == 1:
        return f'<rect class="{css}" x="{x - 4:.1f}" y="{y - 4}" width="8" height="8">{body}</rect>'
    diamond = f"{x:.1f},{y - 5} {x + 5:.1f},{y} {x:.1f},{y + 5} {x - 5:.1f},{y}"
    return f'<polygon class="{css}" points="{diamond}">{body}</polygon>'


def intervals(
    rows: Sequence[Estimate],
    caption: str,
    lo: float | None = None,
    hi: float | None = None,
    reference: float | None = None,
    legend: Sequence[str] = (),
) -> str:
    """Dot-and-whisker rows on one shared axis; estimates with the same label share a row
    (one per series, told apart by shape and named in `legend`)."""
    seen = [v for r in rows for v in (r.point, r.low, r.high, reference) if v is not None]
    low = lo if lo is not None else min(seen, default=0.0)
    high = hi if hi is not None else max(seen, default=1.0)
    span = (high - low) or 1.0
    if lo is None:
        low -= span * 0.05
    if hi is None:
        high += span * 0.05
    label_w, pad = 190, 12
    scale = Scale(low, high, label_w + pad, WIDTH - 20)
    slots = list(dict.fromkeys(r.label for r in rows))
    extra = 16 * sum(map(bool, legend))
    height = len(slots) * ROW + 44 + extra
    out = [_open("intervals", WIDTH, height, caption)]
    for i, label in enumerate(slots):
        out.append(_row_label(label, 6 + i * ROW + 8, label_w))
    for row in rows:
        # Series sit a little apart within a row so overlapping whiskers stay readable.
        y = (
            6
            + slots.index(row.label) * ROW
            + 8
            + (row.series % SERIES_SHAPES - 1) * 4 * (sum(map(bool, legend)) > 1)
        )
        text = num(row.point)
        if row.low is not None and row.high is not None:
            text += f" [{num(row.low)}, {num(row.high)}]"
            out.append(
                f'<line class="whisker series-{row.series % SERIES_SHAPES}" '
                f'x1="{scale(row.low):.1f}" x2="{scale(row.high):.1f}" y1="{y}" y2="{y}"/>'
            )
        name = legend[row.series] + " · " if row.series < len(legend) and legend[row.series] else ""
        out.append(_point_mark(row.series, scale(row.point), y, f"{row.label}: {name}{text}"))
    bottom = 6 + len(slots) * ROW
    out.append(_reference(scale, reference, 2, bottom))
    out.append(_x_axis(scale, bottom, caption))
    x, y = label_w + pad, bottom + 50
    for series, name in enumerate(legend):
        if not name:
            continue
        out.append(_point_mark(series, x + 5, y - 4, name).replace("mark ", ""))
        out.append(f'<text class="value" x="{x + 14}" y="{y}">{escape(name)}</text>')
        y += 16
    return "".join(out) + "</svg>"


# -- a shaded matrix -------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A matrix cell: `shade` in [0, 1] sets how dark it is (None: unshaded), `text` is
    printed in it and `title` is the hover text."""

    text: str
    shade: float | None = None
    title: str = ""


def matrix(
    rows: Sequence[str],
    columns: Sequence[str],
    cells: dict[tuple[int, int], Cell],
    caption: str,
    corner: str = "",
) -> str:
    """A grid with a cell per (row, column) present in `cells`; row labels on the left,
    column labels on top."""
    label_w, cell_w, cell_h, head = 150, max(64, 7 * max(map(len, columns), default=4)), 26, 30
    cell_w = min(cell_w, 130)
    width = label_w + cell_w * len(columns) + 10
    height = head + cell_h * len(rows) + 26
    out = [_open("matrix", width, height, caption)]
    if corner:
        out.append(f'<text class="caption" x="4" y="{head - 10}">{escape(corner)}</text>')
    for j, column in enumerate(columns):
        x = label_w + j * cell_w + cell_w / 2
        out.append(
            f'<text class="col-label mid" x="{x:.1f}" y="{head - 10}"><title>{escape(column)}'
            f"</title>{escape(column if len(column) <= 18 else column[:17] + '…')}</text>"
        )
    for i, row in enumerate(rows):
        y = head + i * cell_h
        out.append(_row_label(row, y + cell_h / 2, label_w - 8))
        for j in range(len(columns)):
            cell = cells.get((i, j))
            if cell is None:
                continue
            x = label_w + j * cell_w
            shade = "" if cell.shade is None else f' fill-opacity="{0.08 + 0.5 * cell.shade:.3f}"'
            css = "mark cell" + ("" if cell.shade is not None else " plain")
            out.append(
                f'<rect class="{css}" x="{x + 1}" y="{y + 1}" width="{cell_w - 2}" '
                f'height="{cell_h - 2}"{shade}><title>{escape(cell.title or cell.text)}</title>'
                f'</rect><text class="cell-text mid" x="{x + cell_w / 2:.1f}" '
                f'y="{y + cell_h / 2 + 4:.1f}">{escape(cell.text)}</text>'
            )
    out.append(
        f'<text class="caption" x="4" y="{height - 8}">{escape(caption)}</text>' if caption else ""
    )
    return "".join(out) + "</svg>"


# -- vertical columns ------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of a distribution: its label under the axis, its count, and extra
    attributes for the group (a histogram bar's range, which a click filters by)."""

    label: str
    count: int
    title: str
    attrs: dict[str, str] = field(default_factory=dict)


def columns(
    cols: Sequence[Column], caption: str, css: str = "columns", edge_labels: bool = False
) -> str:
    """Vertical bars on a baseline; all labels shown when few, else only the two ends."""
    width, height, pad = WIDTH, 160, 28
    step = (width - 2 * pad) / max(len(cols), 1)
    top = max([c.count for c in cols], default=0) or 1
    out = [_open(css, width, height + 34, caption)]
    few = len(cols) <= 16 and not edge_labels
    for i, col in enumerate(cols):
        h = (height - 20) * col.count / top
        attrs = "".join(f' {k}="{escape(v)}"' for k, v in col.attrs.items())
        out.append(
            f'<g class="mark col"{attrs}><title>{escape(col.title)}</title>'
            f'<rect x="{pad + i * step + 1:.1f}" y="{height - h:.1f}" '
            f'width="{max(step - 2, 1):.1f}" height="{h:.1f}"/></g>'
        )
        if few:
            x = pad + (i + 0.5) * step
            out.append(
                f'<text class="tick-label mid" x="{x:.1f}" y="{height + 14}">'
                f"{escape(col.label)}</text>"
            )
            if col.count:
                out.append(
                    f'<text class="value mid" x="{x:.1f}" y="{height - h - 3:.1f}">'
                    f"{col.count}</text>"
                )
    out.append(f'<line class="axis" x1="{pad}" x2="{width - pad}" y1="{height}" y2="{height}"/>')
    if not few and cols:
        out.append(
            f'<text class="tick-label" x="{pad}" y="{height + 14}">{escape(cols[0].label)}</text>'
            f'<text class="tick-label end" x="{width - pad}" y="{height + 14}">'
            f"{escape(cols[-1].label)}</text>"
        )
    out.append(
        f'<text class="caption mid" x="{width / 2}" y="{height + 30}">{escape(caption)}</text>'
    )
    return "".join(out) + "</svg>"


# -- scatter ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """Examples at one (x, y): drawn as one mark, larger for more, linked to the first."""

    x: float
    y: float
    ids: tuple[str, ...]
    href: str | None = None


def scatter(points: Sequence[Point], x_caption: str, y_caption: str, caption: str) -> str:
    """Points on a square plot with the y = x diagonal (above it: y scored higher)."""
    size, pad = 360, 46
    seen = [v for p in points for v in (p.x, p.y)]
    lo, hi = min(seen, default=0.0), max(seen, default=1.0)
    span = (hi - lo) or 1.0
    lo, hi = lo - span * 0.06, hi + span * 0.06
    xs = Scale(lo, hi, pad, size - 12)
    ys = Scale(lo, hi, size - pad + 12, 12)  # upside down: larger y is higher
    out = [_open("scatter", size, size + 10, caption)]
    out.append(
        f'<line class="reference" x1="{xs(lo):.1f}" y1="{ys(lo):.1f}" x2="{xs(hi):.1f}" '
        f'y2="{ys(hi):.1f}"><title>y = x: no change</title></line>'
    )
    base = size - pad + 12
    out.append(f'<line class="axis" x1="{pad}" x2="{size - 12}" y1="{base}" y2="{base}"/>')
    out.append(f'<line class="axis" x1="{pad}" x2="{pad}" y1="12" y2="{base}"/>')
    for tick in nice_ticks(lo, hi):
        out.append(
            f'<text class="tick-label mid" x="{xs(tick):.1f}" y="{base + 14}">{num(tick)}</text>'
            f'<text class="tick-label end" x="{pad - 4}" y="{ys(tick) + 4:.1f}">{num(tick)}</text>'
        )
    out.append(
        f'<text class="caption mid" x="{(pad + size) / 2:.1f}" y="{base + 30}">'
        f"{escape(x_caption)}</text>"
        f'<text class="caption mid" transform="translate(12 {(base + 12) / 2:.1f}) rotate(-90)">'
        f"{escape(y_caption)}</text>"
    )
    for p in points:
        listed = ", ".join(p.ids[:8]) + (f" and {len(p.ids) - 8} more" if len(p.ids) > 8 else "")
        title = f"{listed}: {num(p.x)} → {num(p.y)}"
        radius = min(3.5 + 1.5 * math.sqrt(len(p.ids) - 1), 12)
        dot = (
            f'<circle class="mark dot" cx="{xs(p.x):.1f}" cy="{ys(p.y):.1f}" r="{radius:.1f}" '
            f'data-count="{len(p.ids)}"><title>{escape(title)}</title></circle>'
        )
        out.append(f'<a href="{escape(p.href)}">{dot}</a>' if p.href else dot)
    return "".join(out) + "</svg>"


def figure(heading: str, svg: str, note: str = "") -> str:
    """A plot with its heading and an optional note under it (`note` is plain text)."""
    under = f'<p class="muted small">{escape(note)}</p>' if note else ""
    return f'<figure class="plot-figure"><h4>{escape(heading)}</h4>{svg}{under}</figure>'
