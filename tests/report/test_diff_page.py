"""The comparison page shows where two runs part (`diff`): per node how many examples changed,
each changed example's first differing node with both values, and links that open that node
in both runs' reports (checked in the real Chromium: the node's card is the one shown)."""

from __future__ import annotations

import re
import shutil
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import test_report_browser as shared
from test_diff import PLANTED, responder, run

import orchestrator as orc
from orchestrator.report import write_compare_page
from orchestrator.report.compare_page import run_diffs

browser = shared.browser  # the browser tests' module fixture


def _planted(t: str) -> str:
    return f"k-{t}" if f"e0{t[1:]}" not in PLANTED else f"other-{t}!"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("diffpage")
    return run(root / "a", responder()), run(root / "planted", responder(key=_planted))


def _rows(html: str, css: str) -> list[str]:
    body = re.search(rf'<table class="data {css}">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert body, f"no {css} table"
    return re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)


def test_the_page_lists_each_changed_example_at_its_first_differing_node(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = pair
    out = tmp_path / "page" / "compare.html"
    write_compare_page(orc.compare(a, b), out)
    html = out.read_text(encoding="utf-8")
    assert '<section class="panel" id="diff">' in html
    nodes = {
        re.sub("<[^>]+>", "", cells[0]): cells[1:]
        for row in _rows(html, "diff-nodes")
        for cells in [re.findall(r"<td>(.*?)</td>", row, re.S)]
    }
    assert nodes["extract"] == ["<b>3</b>", "10"] and nodes["judge"] == ["<b>3</b>", "10"]
    assert nodes["check"] == ["0", "10"]
    changed = _rows(html, "diff-examples")
    assert len(changed) == 3
    links = [unescape(h) for h in re.findall(r'class="diff-link" href="([^"]+)"', html)]
    assert len(links) == 6
    # Relative to the page, each into its own run's report, at the node where they part.
    opened = {((out.parent / link.split("#")[0]).resolve(), link.split("#")[1]) for link in links}
    assert opened == {
        (folder.resolve() / "report.html", f"example={example}&node=extract")
        for folder in (a, b)
        for example in PLANTED
    }


def test_a_pair_without_a_trace_is_a_note_not_a_failure(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = pair
    copy = tmp_path / "copy"
    shutil.copytree(b, copy)
    (copy / "traces.sqlite").unlink()
    diffs, notes = run_diffs(orc.compare(a, copy))
    assert diffs == [] and len(notes) == 1 and "traces.sqlite" in notes[0]


def test_a_link_opens_the_differing_node_in_the_report(
    browser: Any, pair: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = pair
    out = tmp_path / "compare.html"
    write_compare_page(orc.compare(a, b), out)
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    try:
        tab.goto(out.as_uri())
        href = tab.eval_on_selector("a.diff-link", "link => link.href")  # resolved
        assert href.endswith("#example=e01&node=extract")
        tab.goto(href)
        tab.wait_for_function("window.__reportReady === true", timeout=20_000)
        tab.wait_for_selector("#example-view .node-card.target")
        assert tab.text_content("#example-view .ex-head h2") == "e01"
        assert tab.get_attribute(".node-card.target", "data-node") == "extract"
        # The plain link still opens the example, with no node marked.
        tab.goto(href.split("&node=")[0])
        tab.wait_for_selector("#example-view .node-card")
        assert tab.locator(".node-card.target").count() == 0
        assert errors == []
    finally:
        tab.close()
