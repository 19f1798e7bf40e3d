"""The comparison page (`orchestrator compare ... --html`, `write_compare_page`) in the real
Chromium: it loads with nothing from the network, its table is the comparison's, its
scatter has one mark per place examples sit, the examples that moved most come largest
move first, and every link opens the example's decision path in that run's report.

The worked example of docs/analysis.md is run here too, against the fake server standing
in for the judge, and its pasted table must be what the commands print.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import test_report_browser as shared
from fakeserver import FakeServer
from helpers import CLI
from test_expert import ExpertResponder
from test_report import ROOT, judge_responder, run
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.analysis.comparison import format_number
from orchestrator.analysis.examples import paired_examples
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError
from orchestrator.report import write_compare_page

browser = shared.browser  # the browser tests' module fixture
DOC = ROOT / "docs" / "analysis.md"
HEADLINE = "scores.content_style_average_f1"
ODD_ID = "odd id #1 & é/2"  # needs quoting in a link, and survives it


@pytest.fixture(scope="module")
def expert_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The shipped ExPerT examples judged for two systems (examples/expert_system_b.jsonl)."""
    root = tmp_path_factory.mktemp("expert")
    with FakeServer(ExpertResponder()) as fake:
        a = run(ROOT / "graphs/expert.yaml", ROOT / "examples/expert.jsonl", root / "sys-a", fake)
        data = ROOT / "examples/expert_system_b.jsonl"
        b = run(ROOT / "graphs/expert.yaml", data, root / "sys-b", fake)
    return a, b


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three pointwise runs whose outputs differ, one example with an id that needs quoting."""
    root = tmp_path_factory.mktemp("three")
    rows = [json.loads(line) for line in (ROOT / "examples/pointwise.jsonl").open()]
    rows[0]["id"] = ODD_ID
    runs = []
    with FakeServer(judge_responder) as fake:
        for system in ("first", "second", "third"):
            data = root / f"{system}.jsonl"
            changed = [{**r, "output": f"{r['output']} ({system} system)"} for r in rows]
            data.write_text("".join(json.dumps(r) + "\n" for r in changed))
            runs.append(run(ROOT / "graphs/pointwise.yaml", data, root / system, fake))
    return runs


class ComparePage(shared.Page):
    """A tab on a comparison page; it has no script, so it is ready once loaded."""

    def __init__(self, browser: Any, url: str) -> None:
        self.tab = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.tab.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.tab.on("pageerror", lambda e: self.errors.append(str(e)))
        self.tab.on("request", lambda r: self.requests.append(r.url))
        self.tab.goto(url)

    def cells(self, selector: str) -> list[list[str]]:
        return self.tab.eval_on_selector_all(
            f"{selector} tbody tr",
            # textContent: rows folded in a closed <details> have no rendered text.
            "rs => rs.map(r => [...r.cells].map(c => c.textContent.trim()))",
        )


def _follow(page: ComparePage, href: str, example: str) -> None:
    """Open a decision-path link and check it shows that example's node path."""
    page.tab.goto(href)
    page.tab.wait_for_function("window.__reportReady === true", timeout=20_000)
    page.tab.wait_for_selector("#example-view .node-card")
    assert page.tab.text_content("#example-view .ex-head h2") == example
    assert page.tab.locator("#example-view .path > .node-card").count() > 0


def test_the_page_shows_the_comparison_and_links_both_paths(
    browser: Any, expert_runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = expert_runs
    out = tmp_path / "elsewhere" / "deeper" / "compare.html"  # links must climb out of here
    result = orc.compare(a, b, outputs=[HEADLINE])
    write_compare_page(result, out, top=4)
    pair = result.pair(HEADLINE)
    (shifts,) = paired_examples(result)
    page = ComparePage(browser, out.as_uri())
    try:
        assert all(url.startswith(("file:", "data:")) for url in page.requests), page.requests
        (row,) = page.cells("table.compare")
        assert row[:6] == [
            HEADLINE,
            f"{pair.run_a} → {pair.run_b}",
            str(pair.n),
            format_number(pair.mean_a),
            format_number(pair.mean_b),
            format_number(pair.difference),
        ]
        assert pair.ci is not None
        assert row[6] == f"{format_number(pair.ci.low)}, {format_number(pair.ci.high)}"
        assert row[-1] == f"{pair.wins}/{pair.ties}/{pair.losses}"
        # One mark per place, standing for every example there.
        dots = page.tab.locator("svg.scatter .mark")
        places = {(s.a, s.b) for s in shifts.examples}
        assert dots.count() == len(places)
        counts = dots.evaluate_all("ds => ds.map(d => Number(d.dataset.count))")
        assert sum(counts) == pair.n == len(shifts.examples)
        # Largest move first; the first four open, the rest folded.
        moved = page.cells(".pair > table.moved")
        assert len(moved) == 4
        folded = page.cells(".pair details table.moved")
        assert len(moved) + len(folded) == pair.n
        differences = [abs(float(r[3])) for r in moved + folded]
        assert differences == sorted(differences, reverse=True)
        largest = max(abs(s.difference) for s in shifts.examples)
        assert differences[0] == pytest.approx(largest, abs=5e-4)
        # Every point links to its example's row on this page.
        targets = dots.evaluate_all("ds => ds.map(d => d.parentElement.getAttribute('href'))")
        assert all(page.tab.locator(f"[id='{t[1:]}']").count() == 1 for t in targets)
        links = page.tab.eval_on_selector_all(
            "a.path-link",
            "ls => ls.map(l => [l.href, l.closest('tr').cells[0].textContent.trim()])",
        )
        assert len(links) == 2 * pair.n
        for href, example in links[:4]:  # both runs' paths of the two that moved most
            _follow(page, href, example)
        assert page.errors == []
    finally:
        page.close()


def test_three_runs_and_an_id_that_needs_quoting(
    browser: Any, three_runs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "three.html"
    runner = CliRunner()
    args = ["compare", *map(str, three_runs), "--output", "score", "--html", str(out)]
    with ThreadPoolExecutor(1) as pool:  # the report build may not share playwright's loop
        done = pool.submit(runner.invoke, app, args).result()
    assert done.exit_code == 0, done.output
    result = orc.compare(*three_runs, outputs=["score"])
    page = ComparePage(browser, out.as_uri())
    try:
        assert page.tab.locator("svg.scatter").count() == 3  # one per pair of runs
        assert len(page.cells("table.compare")) == 3
        assert page.tab.locator(".pair").count() == len(result.output("score").pairs)
        hrefs = page.tab.eval_on_selector_all(
            "a.path-link",
            "(ls, id) => ls.filter(l => l.closest('tr').cells[0].textContent.trim() === id)"
            ".map(l => l.href)",
            ODD_ID,
        )
        assert len(hrefs) == 2 * 3  # each pair lists it with both runs' paths
        _follow(page, hrefs[-1], ODD_ID)
        assert page.errors == []
    finally:
        page.close()


def test_json_stays_clean_with_html(expert_runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    runner = CliRunner()
    args = ["compare", *map(str, expert_runs), "--format", "json", "--html", str(out)]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["kind"] == "system"
    assert out.is_file() and "<script" not in out.read_text()


def test_runs_held_in_memory_are_named(expert_runs: tuple[Path, Path]) -> None:
    result = orc.compare(*expert_runs, outputs=[HEADLINE])
    result.runs[1].path = None
    with pytest.raises(ConfigurationError, match="sys-b were compared in memory"):
        paired_examples(result)


# -- docs/analysis.md's worked example ----------------------------------------------------


def _section() -> str:
    return DOC.read_text(encoding="utf-8").split("### Two systems on the ExPerT examples", 1)[1]


def _block(section: str, after: str) -> str:
    """The first fenced block after a line containing `after`."""
    rest = section.split(after, 1)[1]
    return rest.split("```", 2)[1].split("\n", 1)[1]


@pytest.fixture(scope="module")
def worked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The doc's commands, run verbatim but for the server's address, in a scratch folder."""
    section = _section()
    commands = [c for c in _block(section, "commands").splitlines() if c.startswith("orchestrator")]
    model = re.search(r"--model (\S+)", commands[0])
    root = tmp_path_factory.mktemp("worked")
    (root / "examples").symlink_to(ROOT / "examples")
    old = Path.cwd()
    os.chdir(root)  # the server and the processes see the doc's relative paths from here
    printed = ""
    try:
        with FakeServer(ExpertResponder(), model=model.group(1) if model else "fake-model") as fake:
            # As a user runs them: a process each (PYTHONPATH keeps this checkout's code).
            env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)}
            for command in commands:
                args = shlex.split(command)[1:]
                if "--base-url" in args:
                    args[args.index("--base-url") + 1] = fake.base_url
                done = CLI.run("orchestrator", args, env, timeout=300)
                assert done.returncode == 0, (command, done.stdout, done.stderr)
                printed = done.stdout
        yield root, printed
    finally:
        os.chdir(old)


def test_the_docs_table_is_what_the_commands_print(worked: tuple[Path, str]) -> None:
    _, printed = worked
    pasted = _block(_section(), "prints")
    assert [line.rstrip() for line in pasted.strip().splitlines()] == [
        line.rstrip() for line in printed.strip().splitlines()
    ], printed


def test_the_docs_page_and_screenshots(browser: Any, worked: tuple[Path, str]) -> None:
    """The page the doc's last command wrote, opened; REPORT_SCREENSHOT=1 refreshes the
    doc's screenshots of it and of system b's report."""
    root, _ = worked
    page_path = root / re.findall(r"--html (\S+)", _block(_section(), "commands"))[0]
    page = ComparePage(browser, page_path.as_uri())
    try:
        page.tab.set_viewport_size({"width": 1100, "height": 1250})
        shot = root / "compare.png"
        page.tab.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000 and page.errors == []
        if os.environ.get("REPORT_SCREENSHOT"):
            shutil.copy(shot, ROOT / "docs" / "compare-screenshot.png")
    finally:
        page.close()
