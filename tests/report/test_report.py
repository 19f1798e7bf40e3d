"""The HTML report of a run folder: what it embeds, how it abridges, the served variant.

Runs are real: graphs run through the engine against the fake server. The page's data is
read back out of the HTML, so these tests check what a browser would get; the browser
itself is exercised in test_report_browser.py.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakeserver import FakeServer, Reply
from helpers import run_graph, trace_records

from orchestrator.compute.expert import aspect_credit
from orchestrator.report import build_report, make_server
from orchestrator.report.collect import PROMPT_LIMIT
from orchestrator.report.dag import dag_svg, layout
from orchestrator.report.expert_view import expert_view
from orchestrator.report.render import histogram, interval, render_value, summary_tables
from orchestrator.report.sources import NodeInfo
from orchestrator.report.values import abridge

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "BROKEN-REPLY-MARKER"
HOSTILE = "</script><script>window.__pwned = 1</script><!--"
PHRASE = (
    "the generated text keeps the main facts but shifts the tone toward formal prose; "
    "sentence length and punctuation differ from the user's habits while the opinion stays"
)
WORDS = PHRASE.split(" ")


# -- a fake judge that gives varied, schema-valid answers --------------------------------


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = {**{k: v for k, v in schema.items() if k != "$ref"}, **target}
    return schema


def varied_instance(schema: dict[str, Any], root: dict[str, Any], seed: int) -> Any:
    """A schema-valid value that differs from prompt to prompt (seeded by the prompt)."""
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if _resolve(o, root).get("type") != "null"]
            return varied_instance(options[0], root, seed) if options else None
    if schema.get("enum"):
        return schema["enum"][seed % len(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        return {
            name: varied_instance(sub, root, zlib.crc32(f"{seed}{name}".encode()))
            for name, sub in schema.get("properties", {}).items()
        }
    if kind == "array":
        low = schema.get("minItems", 1)
        high = min(schema.get("maxItems", 3), 3)
        count = max(low, min(high, 1 + seed % 3))
        items = schema.get("items", {"type": "string"})
        return [
            varied_instance(items, root, zlib.crc32(f"{seed}:{i}".encode())) for i in range(count)
        ]
    if kind in ("integer", "number"):
        low = schema.get("minimum", 0)
        high = schema.get("maximum", low + 10)
        value = low + seed % (int(high - low) + 1)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return seed % 3 != 0
    if kind == "string":
        start = seed % len(WORDS)
        text = " ".join(WORDS[start : start + 6]) or "fine"
        return text[: schema.get("maxLength", len(text))]
    return None


def judge_responder(body: dict[str, Any]) -> Reply:
    """Varied valid JSON for every request; never valid JSON for the BROKEN example."""
    text = "\n".join(str(m.get("content")) for m in body.get("messages", []))
    if BROKEN in text:
        return Reply(content="I would rather not answer in JSON today.")
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema")
    if not schema:
        return Reply(content="ok")
    return Reply(content=json.dumps(varied_instance(schema, schema, zlib.crc32(text.encode()))))


# -- runs ----------------------------------------------------------------------------------


def run(
    graph: Path, data: Path, out: Path, server: FakeServer, params: dict[str, Any] | None = None
) -> Path:
    cache = out.parent / f"{out.name}-cache.sqlite"
    # In a thread of its own: playwright's sync API keeps an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(
            run_graph, graph, data, out, server.base_url, cache=cache, params=params or {}
        ).result()
    return out


def shipped_graphs() -> list[str]:
    """Graphs in graphs/ that ship an example dataset beside them."""
    return sorted(
        p.stem
        for p in (ROOT / "graphs").glob("*.yaml")
        if (ROOT / "examples" / f"{p.stem}.jsonl").is_file()
    )


def pointwise_rows() -> list[dict[str, Any]]:
    rows = [
        json.loads(line) for line in (ROOT / "examples/pointwise.jsonl").read_text().splitlines()
    ]
    base = dict(rows[0])
    rows.append({**base, "id": "broken-one", "output": f"{base['output']} {BROKEN}"})
    rows.append(
        {
            **base,
            "id": "hostile-text",
            "reference": f"Emoji first 😀🎉, then the rest. {base['reference']}",
            "output": f"A review 🙂 of words, long enough to be pointed at. {HOSTILE} The end.",
        }
    )
    rows.append({**base, "id": "very-long", "output": "Lorem ipsum dolor. " * 800})
    return rows


def pointwise_run(root: Path, server: FakeServer) -> Path:
    """The shipped pointwise graph over its examples plus a failing, a hostile, a long row."""
    data = root / "pointwise.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in pointwise_rows()))
    return run(ROOT / "graphs/pointwise.yaml", data, root / "pointwise-run", server)


def foreach_graph(root: Path) -> Path:
    """A graph with foreach items (one skipped by `when`) and a node skipped as a whole."""
    prompts = root / "prompts"
    prompts.mkdir(parents=True, exist_ok=True)
    (prompts / "list.jinja").write_text(
        "List the claims the text makes, each with a short title.\n\n## Text\n{{ output }}\n"
    )
    (prompts / "check.jinja").write_text(
        "Is this claim supported by the user's text?\n\n## Claim\n{{ claim.title }}\n\n"
        "## User's text\n{{ reference }}\n"
    )
    (prompts / "escalate.jinja").write_text("Explain why the text has no claims.\n{{ output }}\n")
    graph = {
        "name": "claims",
        "description": "Lists claims, checks each but the second, escalates when none.",
        "inputs": ["reference", "output"],
        "prompts": "prompts",
        "defaults": {"temperature": 0.0, "max_tokens": 200, "retries": 1},
        "nodes": {
            "claims": {
                "kind": "llm",
                "prompt": "list.jinja",
                "output": {
                    "claims": {
                        "type": "list",
                        "min_items": 3,
                        "max_items": 3,
                        "items": {"type": "object", "fields": {"title": "string"}},
                    }
                },
            },
            "check": {
                "kind": "llm",
                "foreach": "claims.claims",
                "as": "claim",
                "when": "claim_index != 1",
                "prompt": "check.jinja",
                "output": {"reason": "string", "supported": "boolean"},
            },
            "escalate": {
                "kind": "llm",
                "when": "claims.claims | length == 0",
                "prompt": "escalate.jinja",
                "output": {"reason": "string"},
            },
            "supported": {
                "kind": "compute",
                "function": "mean",
                "args": {
                    "values": "check | reject('none') | map(attribute='supported')"
                    + " | map('int') | list"
                },
            },
        },
        "outputs": {"supported": "supported", "claims": "claims.claims | length"},
    }
    path = root / "claims.yaml"
    path.write_text(yaml.safe_dump(graph, sort_keys=False))
    return path


def foreach_run(root: Path, server: FakeServer) -> Path:
    data = root / "claims.jsonl"
    rows = pointwise_rows()[:3]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run(foreach_graph(root), data, root / "claims-run", server)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    with FakeServer(judge_responder) as fake:
        yield fake


@pytest.fixture(scope="module")
def pointwise(tmp_path_factory: pytest.TempPathFactory, server: FakeServer) -> Path:
    return pointwise_run(tmp_path_factory.mktemp("pointwise"), server)


@pytest.fixture(scope="module")
def claims(tmp_path_factory: pytest.TempPathFactory, server: FakeServer) -> Path:
    return foreach_run(tmp_path_factory.mktemp("claims"), server)


# -- reading the page back ------------------------------------------------------------------


def blob(html: str, name: str) -> Any:
    match = re.search(
        rf'<script type="application/json" id="{name}-data">(.*?)</script>', html, re.S
    )
    assert match, f"no {name} block in the page"
    text = match.group(1).strip()
    return json.loads(text) if text else None


def page_data(path: Path) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    html = path.read_text(encoding="utf-8")
    return blob(html, "meta"), blob(html, "rows"), blob(html, "details")


def results(run_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return {str(r["id"]): r for r in map(json.loads, lines)}


def detail_of(rows: dict[str, Any], details: list[Any], example: str) -> dict[str, Any]:
    return details[rows["id"].index(example)]


def node(detail: dict[str, Any], name: str) -> dict[str, Any]:
    return next(entry for entry in detail["path"] if entry["node"] == name)


def input_text(detail: dict[str, Any], name: str) -> str:
    """A dataset field as the page shows it (resolving a pointer into a prompt)."""
    value = detail["inputs"][name]
    if isinstance(value, str):
        return value
    _, path, message, start, length = value
    tail = detail["path"][path]["rec"]["m"][message][2].encode("utf-16-le")
    return tail[2 * start : 2 * (start + length)].decode("utf-16-le")


def prompt_text(meta: dict[str, Any], message: list[Any]) -> str:
    _role, shared, tail = message
    return (meta["shared"][shared] if shared >= 0 else "") + tail


# -- the file -------------------------------------------------------------------------------


def test_report_lists_every_example_failed_first(pointwise: Path) -> None:
    path = build_report(pointwise)
    assert path == pointwise / "report.html"
    meta, rows, details = page_data(path)
    expected = results(pointwise)
    assert sorted(rows["id"]) == sorted(expected)
    assert rows["id"][0] == "broken-one"
    assert rows["status"][0] == "failed"
    assert rows["error"][0] == expected["broken-one"]["error"]
    assert all(s == "ok" for s in rows["status"][1:])
    assert meta["score"] == "score"
    for example, score in zip(rows["id"], rows["num"]["score"], strict=True):
        assert score == expected[example].get("score")
    assert len(details) == len(expected) and all(d is not None for d in details)
    assert meta["embedded"] == len(expected)


def test_ok_example_shows_node_path_with_parsed_outputs(pointwise: Path) -> None:
    _meta, rows, details = page_data(build_report(pointwise))
    result = results(pointwise)["review-near-copy"]
    detail = detail_of(rows, details, "review-near-copy")
    assert [e["node"] for e in detail["path"]] == ["judge", "score"]
    judge = node(detail, "judge")
    assert judge["status"] == "ok"
    assert judge["rec"]["v"]["content"] == result["content"]
    assert judge["rec"]["v"]["style_reason"] == result["style_reason"]
    assert [a["k"] for a in judge["rec"]["a"]] == ["ok"]
    assert judge["rec"]["pt"] > 0
    assert node(detail, "score")["rec"]["v"] == pytest.approx(result["score"])
    assert detail["outputs"]["score"] == result["score"]
    assert input_text(detail, "reference") == pointwise_rows()[0]["reference"]
    assert input_text(detail, "input") == pointwise_rows()[0]["input"]
    assert isinstance(detail["inputs"]["reference"], list)  # stored once, in the prompt
    # The raw reply repeats the parsed value, so it is left out.
    assert "r" not in judge["rec"]


def test_failed_example_keeps_every_attempt_and_its_error(pointwise: Path) -> None:
    _meta, rows, details = page_data(build_report(pointwise))
    detail = detail_of(rows, details, "broken-one")
    judge = node(detail, "judge")
    assert judge["status"] == "failed"
    assert judge["rec"]["e"]
    kinds = [a["k"] for a in judge["rec"]["a"]]
    assert len(kinds) == 3 and set(kinds) == {"invalid"}  # retries: 2 in pointwise.yaml
    assert all("rather not answer" in a["r"] for a in judge["rec"]["a"])
    assert node(detail, "score")["status"] == "not run"
    assert detail["outputs"] == {}


def test_shared_prompt_head_is_stored_once_and_rebuilds_the_prompt(pointwise: Path) -> None:

    meta, rows, details = page_data(build_report(pointwise))
    assert meta["shared"], "the pointwise instructions are the same for every example"
    original = trace_records(pointwise / "traces.sqlite", "review-near-copy", "judge")[0][
        "messages"
    ]
    messages = node(detail_of(rows, details, "review-near-copy"), "judge")["rec"]["m"]
    assert [prompt_text(meta, m) for m in messages] == [m["content"] for m in original]
    assert any(m[1] >= 0 for m in messages)


def test_long_prompts_are_abridged_unless_full_prompts(pointwise: Path) -> None:

    original = trace_records(pointwise / "traces.sqlite", "very-long", "judge")[0]["messages"]
    original = original[-1]["content"]
    meta, rows, details = page_data(build_report(pointwise))
    short = prompt_text(meta, node(detail_of(rows, details, "very-long"), "judge")["rec"]["m"][-1])
    assert "characters omitted" in short
    assert len(short) < len(original)
    assert short.endswith(original[-200:])
    meta, rows, details = page_data(build_report(pointwise, full_prompts=True))
    full = prompt_text(meta, node(detail_of(rows, details, "very-long"), "judge")["rec"]["m"][-1])
    assert full == original


def test_run_text_cannot_break_out_of_the_page(pointwise: Path) -> None:
    html = build_report(pointwise).read_text(encoding="utf-8")
    assert HOSTILE not in html
    assert "</script><script>window.__pwned" not in html
    _meta, rows, details = page_data(build_report(pointwise))
    hostile = next(r for r in pointwise_rows() if r["id"] == "hostile-text")
    detail = detail_of(rows, details, "hostile-text")
    assert input_text(detail, "output") == hostile["output"]
    assert input_text(detail, "reference") == hostile["reference"]


def test_graph_is_drawn_from_the_graph_file(pointwise: Path) -> None:
    html = build_report(pointwise).read_text(encoding="utf-8")
    assert 'data-node="judge"' in html and 'data-node="score"' in html
    assert 'data-from="judge" data-to="score"' in html
    assert "http://" not in re.sub(r"http://127\.0\.0\.1:\d+/v1", "", html.split("<script")[0])


def test_foreach_items_grouped_and_skips_shown(claims: Path) -> None:
    meta, _rows, details = page_data(build_report(claims))
    detail = details[0]
    check = node(detail, "check")
    assert check["status"] == "ok"
    assert [item["i"] for item in check["items"]] == [0, 1, 2]
    assert [item["s"] for item in check["items"]] == ["ok", "skipped", "ok"]
    assert "supported" in check["items"][0]["v"]
    assert check["rec"]["v"][1] is None
    assert node(detail, "escalate")["status"] == "skipped"
    names = [n["name"] for n in meta["nodes"]]
    assert names.index("claims") < names.index("check") < names.index("supported")
    info = {n["name"]: n for n in meta["nodes"]}
    assert info["check"]["foreach"] == "claims.claims"
    assert info["escalate"]["when"]


def test_embed_budget_leaves_the_rest_to_serve(pointwise: Path) -> None:
    path = build_report(pointwise, max_embed_bytes=1)
    meta, rows, details = page_data(path)
    assert meta["embedded"] == 1
    assert details[0] is not None and rows["status"][0] == "failed"
    assert all(d is None for d in details[1:])
    assert "--serve" in path.read_text(encoding="utf-8")


def test_report_survives_a_moved_run_without_graph_or_dataset(
    pointwise: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(pointwise, moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["graph"]["path"] = "no/such/graph.yaml"
    manifest["dataset"]["path"] = "no/such/data.jsonl"
    (moved / "manifest.json").write_text(json.dumps(manifest))
    html = build_report(moved).read_text(encoding="utf-8")
    meta, _rows, details = page_data(moved / "report.html")
    # Self-contained: the graph comes from the folder's snapshot, inputs from inputs.jsonl.
    assert [n["name"] for n in meta["nodes"]] == ["judge", "score"]
    assert "not found" not in html
    assert "inputs" in details[1]
    assert node(details[1], "judge")["status"] == "ok"
    # A folder from before snapshots (layout 1) still reports, saying what it lacks.
    shutil.rmtree(moved / "snapshot")
    (moved / "inputs.jsonl").unlink()
    html = build_report(moved).read_text(encoding="utf-8")
    meta, _rows, details = page_data(moved / "report.html")
    assert [n["name"] for n in meta["nodes"]] == ["judge", "score"]
    assert "not found" in html
    assert "inputs" not in details[1]


def test_resumed_example_shows_the_earlier_failure(tmp_path: Path) -> None:
    data = tmp_path / "one.jsonl"
    row = pointwise_rows()[0]
    data.write_text(json.dumps(row) + "\n")
    graph = ROOT / "graphs/pointwise.yaml"
    # One server (a resume must talk to the same endpoint), bad replies then good ones.
    with FakeServer(
        lambda body: (
            judge_responder(body)
            if "token" in json.dumps(body.get("response_format", {}))
            else Reply(content="not json")
        )
    ) as server:
        out = run(graph, data, tmp_path / "run", server)
        assert results(out)[row["id"]]["status"] == "failed"
        server.responder = judge_responder
        run(graph, data, out, server)
    _meta, _rows, details = page_data(build_report(out))
    judge = node(details[0], "judge")
    assert judge["status"] == "ok"
    assert [e["s"] for e in judge["earlier"]] == ["failed"]


# -- the served page ------------------------------------------------------------------------


def test_served_page_loads_traces_on_demand(pointwise: Path) -> None:
    server = make_server(pointwise, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        html = urllib.request.urlopen(server.url, timeout=10).read().decode()
        meta = blob(html, "meta")
        rows = blob(html, "rows")
        assert meta["mode"] == "serve"
        assert blob(html, "details") is None
        assert sorted(rows["id"]) == sorted(results(pointwise))
        position = rows["id"].index("broken-one")
        detail = json.loads(urllib.request.urlopen(f"{server.url}example/{position}.json").read())
        assert node(detail, "judge")["status"] == "failed"
        assert len(node(detail, "judge")["rec"]["a"]) == 3
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{server.url}example/{len(rows['id'])}.json")
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_serving_says_where_through_the_log_and_the_cli_on_stdout(
    pointwise: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The library logs the report's address (it never prints); `report --serve` prints
    it as the command's answer. Ctrl-C is simulated at once, and the port is released."""
    from typer.testing import CliRunner

    from orchestrator.cli import app
    from orchestrator.report.serve import ReportServer, serve_report

    closed: list[ReportServer] = []
    monkeypatch.setattr(ReportServer, "serve_forever", lambda self: _interrupt())
    real_close = ReportServer.server_close
    monkeypatch.setattr(
        ReportServer, "server_close", lambda self: (closed.append(self), real_close(self))
    )
    with caplog.at_level(logging.INFO, logger="orchestrator.report"):
        serve_report(pointwise, port=0)
    assert capsys.readouterr().out == ""
    said = [r.getMessage() for r in caplog.records if r.name == "orchestrator.report.serve"]
    assert len(said) == 1 and re.fullmatch(
        rf"Report of {re.escape(str(pointwise))} at http://127\.0\.0\.1:\d+/ \(Ctrl-C stops it\)",
        said[0],
    )
    shown = CliRunner().invoke(app, ["report", str(pointwise), "--serve", "--port", "0"])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"Report of .* at http://127\.0\.0\.1:\d+/ \(Ctrl-C stops it\)", shown.stdout)
    assert len(closed) == 2


def _interrupt() -> None:
    raise KeyboardInterrupt


# -- parts ----------------------------------------------------------------------------------


def test_abridge_keeps_head_and_tail() -> None:
    text = "A" * 5000 + "Z" * 5000
    short = abridge(text, PROMPT_LIMIT)
    assert short.startswith("A" * 100) and short.endswith("Z" * 100)
    assert "7000 characters omitted" in short
    assert abridge("short", PROMPT_LIMIT) == "short"
    assert abridge(text, None) == text


def test_dag_layout_layers_and_no_overlap() -> None:
    nodes = [
        NodeInfo("a", "llm"),
        NodeInfo("b", "llm", deps=["a"]),
        NodeInfo("c", "compute", deps=["a"], function="mean"),
        NodeInfo("d", "compute", deps=["b", "c", "a"], function="identity"),
    ]
    placed, routes, _width, _height = layout(nodes)
    assert [placed[n].layer for n in "abcd"] == [0, 1, 1, 2]
    boxes = [placed[n] for n in "abcd"]
    for i, one in enumerate(boxes):
        for other in boxes[i + 1 :]:
            apart_x = one.x + one.width <= other.x or other.x + other.width <= one.x
            apart_y = one.y + one.height <= other.y or other.y + other.height <= one.y
            assert apart_x or apart_y, (one, other)
    skipping = next(r for r in routes if r[0] == "a" and r[-1] == "d")
    assert len(skipping) == 3  # through one waypoint in layer 1
    svg = dag_svg(nodes)
    assert svg.count('class="dag-edge"') == 5
    assert 'data-node="d"' in svg and "compute mean" in svg


def test_rating_tables_get_ci_bars_and_odd_shapes_render() -> None:
    elo = {
        "personalization": {
            "players": {
                "big": {"rating": 1040.0, "ci_low": 1010.0, "ci_high": 1075.0, "matches": 12},
                "small": {"rating": 960.0, "ci_low": 925.0, "ci_high": 990.0, "matches": 12},
            },
            "ranking": ["big", "small"],
            "level": 0.95,
        }
    }
    html = summary_tables({"graph": "x", "counts": {}, "means": {"score": 0.5}, "elo": elo})
    assert html.count('class="ci"') == 2
    assert html.index("big") < html.index("small")  # best first
    assert interval({"median": 1.0, "ci": [0.5, 1.5]}) == ("median", 1.0, 0.5, 1.5)
    assert interval({"rating": 3.0}) is None
    odd = {
        "nothing": None,
        "nan": float("nan"),
        "empty": {},
        "matrix": [[1, 2], [3]],
        "mixed": [1, {"a": 2}, "x"],
        "deep": {"a": {"b": {"c": {"d": {"e": [1]}}}}},
        "records": [{"model": "m1", "accuracy": 0.7}, {"model": "m2", "accuracy": 0.6}],
    }
    text = render_value(odd)
    assert "m1" in text and "0.7" in text and "nan" in text


def test_histogram_bins_hold_every_value() -> None:
    values = [0.0, 0.1, 0.1, 0.5, 0.95, 1.0]
    svg = histogram(values, "score")
    counts = [int(c) for c in re.findall(r": (\d+) examples</title>", svg)]
    assert sum(counts) == len(values) and len(counts) == 20
    integers = histogram([1, 2, 2, 5], "content")
    assert [int(c) for c in re.findall(r": (\d+) examples</title>", integers)] == [1, 2, 0, 0, 1]


def test_expert_view_recomputes_the_scores_from_the_aspects() -> None:
    from orchestrator.compute.expert import scores_from_explanation

    def aspect(ident: str, match: str | None, content: bool, style: bool) -> dict[str, Any]:
        return {
            "id": ident,
            "aspect": f"title {ident}",
            "matched": match is not None,
            "matched_id": match,
            "matched_aspect": f"title {match}" if match else None,
            "content": content if match else None,
            "style": style if match else None,
            "failed": False,
        }

    explanation = {
        "recall": [
            aspect("R1", "O2", True, False),
            aspect("R2", None, False, False),
            aspect("R3", "O1", True, True),
        ],
        "precision": [aspect("O1", "R3", True, True), aspect("O2", "R1", False, False)],
    }
    scores = scores_from_explanation(explanation)
    view = expert_view({"explanation": explanation, "scores": scores})
    assert view is not None
    assert [e["_to"] for e in view["recall"]] == [1, None, 0]
    assert [e["_to"] for e in view["precision"]] == [2, 0]
    by_name = {row["aggregation"]: row for row in view["aggregations"]}
    assert set(by_name) == {
        "content_only",
        "style_only",
        "content_and_style",
        "content_or_style",
        "content_style_average",
    }
    for name, row in by_name.items():
        assert row["recall"] == pytest.approx(scores[f"{name}_recall"])
        assert row["precision"] == pytest.approx(scores[f"{name}_precision"])
        assert row["f1"] == pytest.approx(scores[f"{name}_f1"])
        assert row["reported"]["f1"] == scores[f"{name}_f1"]
    assert by_name["content_style_average"]["recall_terms"] == [0.5, 0.0, 1.0]
    assert aspect_credit(explanation["recall"][0], "content_only") == 1.0
    assert expert_view({"score": 1.0}) is None


def test_protocol_views_are_registered_not_wired() -> None:
    """A protocol adds its panel by registering a view; the generic page code names none."""
    from orchestrator.report import collect, views

    views.register_view(
        "spread_view",
        lambda out: {"spread": out["hi"] - out["lo"]} if "hi" in out else None,
        shows=("hi",),
    )
    try:
        outputs = {"hi": 9, "lo": 2, "explanation": "not ExPerT's shape"}
        found = views.example_views(outputs)
        assert found == {"spread_view": {"spread": 7}}
        assert outputs == {"lo": 2, "explanation": "not ExPerT's shape"}  # `hi` shown there
        assert "expert" not in Path(collect.__file__).read_text(encoding="utf-8")
    finally:
        views._VIEWS.pop("spread_view")
