"""`orchestrator report RUN_DIR`: one self-contained HTML page of a run folder."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from ..shipped import __version__
from ..store import NodeRun, read_only
from .collect import (
    DetailOptions,
    RunData,
    example_detail,
    example_order,
    load_run,
    records_by_example,
    shared_heads,
    table_rows,
)
from .dag import dag_svg
from .payload import page_keys
from .render import facts, histogram, summary_tables
from .views import Aggregate, RunContext, RunPanel, run_views

REPORT = "report.html"
# Past this much per-example data the file would be slow to open: the rest is left to
# `report --serve`. Failed examples come first, so they are always among those embedded.
MAX_EMBED_BYTES = 96 * 1024 * 1024
_MARKER = re.compile(r"@@([A-Z_]+)@@")


def asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `<` can end it early."""
    return _script_safe(orjson.dumps(data, default=str, option=orjson.OPT_SERIALIZE_NUMPY))


def _script_safe(blob: bytes) -> str:
    # `<` only occurs inside JSON strings, where \u003c means the same character.
    return blob.replace(b"<", b"\\u003c").decode()


@dataclass
class Page:
    """The parts of a page that differ between a file and a served report."""

    mode: str  # "file" | "serve"
    full_prompts: bool
    shared: list[str]
    details: str  # the JSON array of per-example data, "" when served
    embedded: int


def _meta(run: RunData, page: Page) -> dict[str, Any]:
    return {
        "mode": page.mode,
        "title": run.title,
        "run_dir": str(run.run_dir),
        "nodes": [n.as_dict() for n in run.graph.nodes],
        "score": run.score_column,
        "numeric": run.numeric_columns,
        "text": run.text_columns,
        "shared": page.shared,
        "full_prompts": page.full_prompts,
        "embedded": page.embedded,
        "total": len(run.results),
        "keys": page_keys(),
    }


def run_context(run: RunData) -> RunContext:
    """What the run views draw from: each aggregate with the function that made it."""
    aggregates = [
        Aggregate(name, run.graph.aggregates.get(name), value)
        for name, value in run.summary.aggregates.items()
    ]
    meta_eval: dict[str, Any] | None = None
    path = run.run_dir / "meta_eval.json"
    if path.is_file():
        try:
            meta_eval = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            run.notes.append(f"{path} is not valid JSON: its agreement panel is left out")
    return RunContext(
        aggregates, run.results, run.graph.score_fields, meta_eval, run.inputs, run.run_dir
    )


def views_section(panels: list[RunPanel]) -> str:
    """The run views' panels, or nothing when no view applies to this run."""
    if not panels:
        return ""
    body = "".join(
        f'<section class="run-view" data-view="{escape(p.name)}"><h3>{escape(p.title)}</h3>'
        f'<div class="figures">{p.html}</div></section>'
        for p in panels
    )
    return (
        '<section id="views" class="panel"><h2>Plots <span class="muted small">(hover a mark '
        "for its number)</span></h2>" + body + "</section>"
    )


def render_page(run: RunData, order: list[int], page: Page) -> str:
    """Fill the template; each marker is replaced once, so run text cannot inject one."""
    title = run.title
    score = run.score_column
    rows = table_rows(run, order)
    values: list[float] = []
    if score is not None:
        pairs = zip(rows["num"][score], rows["status"], strict=True)
        values = [v for v, status in pairs if v is not None and status == "ok"]
    notes = list(run.notes)
    if page.mode == "file" and page.embedded < len(run.results):
        notes.append(
            f"Traces of {len(run.results) - page.embedded} of {len(run.results)} examples are not "
            f"embedded (the file would be too large to open quickly): "
            f"`orchestrator report {run.run_dir} --serve` shows every one."
        )
    if not page.full_prompts:
        notes.append(
            "Long prompts and replies are abridged; `orchestrator report --full-prompts` keeps "
            "them whole."
        )
    description = run.graph.description or ""
    panels, drawn = run_views(run_context(run))
    parts = {
        "TITLE": escape(title),
        "STYLE": asset("style.css"),
        "SCRIPT": asset("app.js").replace("</script", "<\\/script"),
        "NOTES": "".join(f'<p class="note">{escape(n)}</p>' for n in notes),
        "FACTS": facts(run.manifest, run.runs, len(run.results), run.served),
        "SCORE": escape(score or "score"),
        "HIST": histogram(values, score or "score"),
        "VIEWS": views_section(panels),
        "SUMMARY": summary_tables(run.summary, folded=drawn),
        "GRAPH_DESCRIPTION": f'<p class="muted">{escape(description)}</p>' if description else "",
        "DAG": dag_svg(run.graph.nodes),
        "FOOTER": escape(
            f"orchestrator {__version__} · report of {run.run_dir} · "
            f"generated {time.strftime('%Y-%m-%d %H:%M:%S')}"
        ),
        "META": embed_json(_meta(run, page)),
        "ROWS": embed_json(rows),
        "DETAILS": page.details,
    }
    return _MARKER.sub(lambda m: parts.get(m.group(1), m.group(0)), asset("template.html"))


def embedded_details(
    run: RunData, order: list[int], full_prompts: bool, max_bytes: int
) -> tuple[str, list[str], int]:
    """The per-example JSON array (in table order), the shared prompt heads, how many fit."""
    grouped: dict[str, list[NodeRun]] = {}
    if run.reader.has_trace:
        with run.reader.trace() as trace:
            grouped = records_by_example(trace)
    shared, index = shared_heads(grouped)
    opts = DetailOptions(full=full_prompts, shared=shared, shared_index=index)
    parts: list[bytes] = []
    size = 0
    embedded = 0
    for position in order:
        result = run.results[position]
        if size > max_bytes:
            parts.append(b"null")
            continue
        records = grouped.get(result.id, [])
        blob = orjson.dumps(example_detail(run, result, records, opts), default=str)
        size += len(blob)
        parts.append(blob)
        embedded += 1
    return _script_safe(b"[" + b",".join(parts) + b"]"), shared, embedded


def build_report(
    run_dir: Path,
    full_prompts: bool = False,
    max_embed_bytes: int = MAX_EMBED_BYTES,
    out: Path | None = None,
) -> Path:
    """Write the report page (RUN_DIR/report.html unless `out` names another file):
    overview, graph, examples table and every trace."""
    run_dir = Path(run_dir)
    run = load_run(run_dir, full_prompts)
    order = example_order(run)
    details, shared, embedded = embedded_details(run, order, full_prompts, max_embed_bytes)
    html = render_page(run, order, Page("file", full_prompts, shared, details, embedded))
    target = run_dir / REPORT if out is None else Path(out)
    tmp = target.with_name(target.name + ".tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        advice = "write the report elsewhere with --out FILE, or view it with --serve"
        refused = read_only(run_dir, exc, advice) if out is None else None
        if refused is None:
            raise
        raise refused from None
    return target
