"""`orchestrator review`'s page in a real headless Chromium (issue 38): a person answers
three examples, a reload resumes at the fourth, a second reviewer in blind mode does not see
the judge's answer until they have given theirs, and every answer is a line of the file.

Needs Debian's chromium and the playwright package, as test_report_browser.py (whose
browser fixture this reuses: one browser for every check here). Set REVIEW_SCREENSHOT=1 to
also refresh docs/review-screenshot.png.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_report_browser import ROOT, browser  # noqa: F401 - the shared browser fixture
from test_review import Served, lines, make_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("review-page"))


class Tab:
    """A page of a review server that records console errors and uncaught exceptions."""

    def __init__(self, chromium: Any, served: Served) -> None:
        self.tab = chromium.new_page(viewport={"width": 1280, "height": 860})
        self.errors: list[str] = []
        self.tab.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.tab.on("pageerror", lambda e: self.errors.append(str(e)))
        self.tab.goto(served.server.url)
        self.ready()

    def ready(self) -> None:
        self.tab.wait_for_function("window.__reviewReady === true", timeout=20_000)

    @property
    def example(self) -> str:
        return str(self.tab.evaluate("document.body.dataset.example"))

    def text(self, selector: str) -> str:
        return str(self.tab.inner_text(selector))

    def answer(self, score: int, note: str = "") -> None:
        before = self.example
        self.tab.fill("#score", str(score))
        if note:
            self.tab.fill("#note", note)
        self.tab.click("#submit")
        self.tab.wait_for_function(
            "b => window.__reviewReady === true && document.body.dataset.example !== b",
            arg=before,
        )


@pytest.fixture
def labels(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "labels.jsonl"


def test_answer_reload_resume_and_a_blind_second_reviewer(
    browser: Any,  # noqa: F811 - the fixture imported above
    finished: Path,
    labels: Path,
) -> None:
    ann = Served(finished, labels=labels, reviewer="ann")
    try:
        page = Tab(browser, ann)
        assert page.example == "r0" and page.text("#progress") == "0 of 5 answered"
        assert page.text("#verdict") == "1"
        assert "Rate: text 0" in page.text("#calls .prompt")
        assert page.text("#path") == "judge: ok"
        page.answer(2, note="too harsh")
        assert page.example == "r1"
        assert "re-ask after try 1 (invalid)" in page.text("#calls .reask")
        page.answer(3)
        page.answer(4)
        assert page.text("#last") == "r2: you 4, the judge 3"
        assert [(x["id"], x["score"], x["reviewer"]) for x in lines(labels)] == [
            ("r0", 2, "ann"),
            ("r1", 3, "ann"),
            ("r2", 4, "ann"),
        ]
        assert lines(labels)[0]["note"] == "too harsh"
        page.tab.reload()
        page.ready()
        assert page.example == "r3" and page.text("#progress") == "3 of 5 answered"
        if os.environ.get("REVIEW_SCREENSHOT"):
            page.tab.screenshot(path=str(ROOT / "docs" / "review-screenshot.png"))
        assert page.errors == []
        page.tab.close()
    finally:
        ann.close()
    bob = Served(finished, labels=labels, reviewer="bob", blind=True)
    try:
        page = Tab(browser, bob)
        assert page.example == "r0" and page.text("#progress") == "0 of 5 answered"
        assert not page.tab.is_visible("#verdict-line")  # no anchoring on the judge
        assert page.tab.query_selector_all("#calls .reply") == []
        page.answer(5)
        assert page.text("#last") == "r0: you 5, the judge 1"  # shown once answered
        assert page.errors == []
        page.tab.close()
    finally:
        bob.close()
    assert [(x["id"], x["reviewer"]) for x in lines(labels)][-1] == ("r0", "bob")
    assert len(lines(labels)) == 4
