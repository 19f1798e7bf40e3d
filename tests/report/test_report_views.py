"""The report's run-level views (registered per protocol in report/*_view.py), in the real
Chromium: each view renders for runs of the shipped graphs against the fake server, with
one mark per number it draws, placed and labelled as the run's summary.json says.

Expected counts and values are read from the run folder (summary.json, results.jsonl,
meta_eval.json), never written into the test, so a view that drops, repeats or misplaces a
number fails. Needs chromium and playwright like test_report_browser.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import test_report_browser as shared
from test_report import ROOT, results

from orchestrator.analysis.metaeval import meta_eval
from orchestrator.report import build_report
from orchestrator.report import svg as plots
from orchestrator.report.views import Aggregate, RunContext, run_views

# The browser is the browser tests' own module fixture; the runs are conftest.py's.
browser = shared.browser
GRAPHS = ("aupel", "perse_pointwise", "perse_pairwise", "perq_jury", "style_ensemble", "pointwise")


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, shipped: dict[str, Path | str]
) -> dict[str, Path]:
    """Copies of the shipped graphs' runs (conftest.py), so that meta-evaluating two of
    them leaves the browser tests' folders as they were."""
    root = tmp_path_factory.mktemp("views")
    found = {}
    for name in GRAPHS:
        made = shipped[name]
        assert isinstance(made, Path), f"graphs/{name}.yaml did not run: {made}"
        found[name] = Path(shutil.copytree(made, root / name))
    meta_eval(
        found["perse_pointwise"],
        ROOT / "examples/perse_pointwise_annotators_labels.jsonl",
        baseline="profile_mean",
    )
    meta_eval(
        found["perse_pairwise"],
        ROOT / "examples/perse_pairwise_labels.jsonl",
        baseline="profile_choices",
    )
    for out in found.values():
        build_report(out)
    return found


def summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


class Views(shared.Page):
    """A report tab with helpers reading the run views' marks."""

    def views(self) -> list[str]:
        return self.tab.eval_on_selector_all(
            "#views .run-view", "vs => vs.map(v => v.dataset.view)"
        )

    def titles(self, view: str, figure: int | None = None) -> list[str]:
        """The hover text of every mark of a view (or of one of its figures)."""
        scope = f'#views [data-view="{view}"]'
        if figure is not None:
            scope += f" figure:nth-of-type({figure + 1})"
        return self.tab.eval_on_selector_all(
            f"{scope} .mark", "ms => ms.map(m => m.querySelector('title').textContent)"
        )

    def figures(self, view: str) -> list[str]:
        return self.tab.eval_on_selector_all(
            f'#views [data-view="{view}"] figure > h4', "hs => hs.map(h => h.textContent)"
        )

    def boxes(self, selector: str) -> list[dict[str, float]]:
        return self.tab.eval_on_selector_all(
            selector,
            "ms => ms.map(m => { const b = m.getBBox(); "
            "return {x: b.x, y: b.y, w: b.width, h: b.height, "
            "o: Number(m.getAttribute('fill-opacity') || 1)}; })",
        )


def open_views(browser: Any, out: Path) -> Views:
    return Views(browser, (out / "report.html").as_uri())


def test_each_run_gets_its_protocols_views_and_no_other(
    browser: Any, runs: dict[str, Path]
) -> None:
    expected = {
        "aupel": ["win_matrix", "ratings", "length_controlled", "position_bias", "judge_card"],
        "perse_pointwise": ["perse_scores", "score_histograms", "meta_eval", "judge_card"],
        "perse_pairwise": ["position_bias", "perse_choices", "meta_eval", "judge_card"],
        "perq_jury": ["jury_agreement", "jury_labels", "groups", "judge_card"],
        "style_ensemble": ["style_accuracy", "judge_card"],
        "pointwise": ["score_histograms", "judge_card"],
    }
    for name, views in expected.items():
        page = open_views(browser, runs[name])
        try:
            assert page.views() == views, name
            assert page.errors == []
        finally:
            page.close()


def test_win_matrix_cells_are_the_win_table(browser: Any, runs: dict[str, Path]) -> None:
    table = summary(runs["aupel"])["win_table"]
    page = open_views(browser, runs["aupel"])
    try:
        assert page.figures("win_matrix") == [f"win_table · {d}" for d in table]
        for k, (dimension, entry) in enumerate(table.items()):
            expected = set()
            for row in entry["pairs"].values():
                a, b, rate = row["a"], row["b"], row["win_rate_a"]
                expected.add(
                    f"{a} against {b}: {row['wins_a']} won, {row['ties']} tied, "
                    f"{row['wins_b']} lost of {row['matches']}; win rate {rate:.4g}"
                )
                expected.add(
                    f"{b} against {a}: {row['wins_b']} won, {row['ties']} tied, "
                    f"{row['wins_a']} lost of {row['matches']}; win rate {1 - rate:.4g}"
                )
            titles = page.titles("win_matrix", k)
            assert len(titles) == 2 * len(entry["pairs"]) and set(titles) == expected, dimension
            # Darker is a higher win rate.
            scope = f'#views [data-view="win_matrix"] figure:nth-of-type({k + 1}) .mark'
            texts = page.tab.eval_on_selector_all(
                scope, "ms => ms.map(m => m.nextSibling.textContent)"
            )
            shades = [b["o"] for b in page.boxes(scope)]
            order = sorted(zip(map(float, texts), shades, strict=True))
            assert [s for _, s in order] == sorted(s for _, s in order)
        assert page.errors == []
    finally:
        page.close()


def test_ratings_draw_each_player_with_its_interval(browser: Any, runs: dict[str, Path]) -> None:
    data = summary(runs["aupel"])
    page = open_views(browser, runs["aupel"])
    try:
        figure = 0
        # Each rating table's figure; the style-controlled fit's follows its plain one.
        drawn = [
            (name, dimension, shown)
            for name in ("elo", "bradley_terry")
            for dimension, table in data[name].items()
            for shown in (table, table.get("style_controlled"))
            if shown is not None
        ]
        assert any("style_controlled" in t for t in data["bradley_terry"].values())
        for name, dimension, table in drawn:
            players = table["players"]
            titles = page.titles("ratings", figure)
            expected = {
                f"{player}: {p['rating']:.4g} [{p['ci_low']:.4g}, {p['ci_high']:.4g}]"
                for player, p in players.items()
            }
            assert len(titles) == len(players) and set(titles) == expected, (name, dimension)
            # Best first: the points go down the plot as the rating falls.
            scope = f'#views [data-view="ratings"] figure:nth-of-type({figure + 1})'
            ys = [b["y"] for b in page.boxes(f"{scope} .mark")]
            ranked = sorted(players, key=lambda n: -players[n]["rating"])
            assert [t.split(":")[0] for t in titles] == ranked and ys == sorted(ys)
            # Every point sits on its own whisker.
            whiskers = page.boxes(f"{scope} .whisker")
            for point, whisker in zip(page.boxes(f"{scope} .mark"), whiskers, strict=True):
                centre = point["x"] + point["w"] / 2
                assert whisker["x"] - 0.5 <= centre <= whisker["x"] + whisker["w"] + 0.5
            figure += 1
        assert figure == len(page.figures("ratings"))
        assert page.errors == []
    finally:
        page.close()


@pytest.mark.parametrize("graph", ["aupel", "perse_pairwise"])
def test_position_bias_segments_have_the_rates(
    browser: Any,
    runs: dict[str, Path],
    graph: str,
) -> None:
    bias = summary(runs[graph])["position_bias"]
    rows = [stats for judge in bias.values() for stats in judge.values()]
    page = open_views(browser, runs[graph])
    try:
        scope = '#views [data-view="position_bias"] svg .mark'
        titles = page.titles("position_bias")
        shares = [s for r in rows for s in (r["first_rate"], r["tie_rate"], r["second_rate"]) if s]
        assert len(titles) == len(shares)
        boxes = page.boxes(scope)
        full = page.boxes('#views [data-view="position_bias"] svg .axis')[0]["w"]
        for box, share in zip(boxes, shares, strict=True):
            assert box["w"] == pytest.approx(share * full, abs=0.2)
        assert page.errors == []
    finally:
        page.close()


def test_jury_agreement_matrix_and_label_distribution(browser: Any, runs: dict[str, Path]) -> None:
    agreement = summary(runs["perq_jury"])["agreement"]
    pairs = {k: v for k, v in agreement["pairwise_agreement"].items() if "~" in k}
    page = open_views(browser, runs["perq_jury"])
    try:
        titles = page.titles("jury_agreement")
        assert len(titles) == 2 * len(pairs)
        for key, rate in pairs.items():
            a, b = key.split("~")
            title = f"{a} and {b} gave the same score on {rate:.4g} of the items both scored"
            assert titles.count(title) == 2
        labels = page.titles("jury_labels")
        counts = agreement["label_distribution"]
        assert [t.split(":")[0] for t in labels] == [f"label {k}" for k in counts]
        heights = [b["h"] for b in page.boxes('#views [data-view="jury_labels"] .mark rect')]
        top = max(counts.values())
        tallest = max(heights)
        for height, count in zip(heights, counts.values(), strict=True):
            assert height == pytest.approx(tallest * count / top, abs=0.2)
        assert page.errors == []
    finally:
        page.close()


def test_style_accuracy_bars_per_metric_and_ensemble(browser: Any, runs: dict[str, Path]) -> None:
    accuracy = summary(runs["style_ensemble"])["accuracy"]
    members = [
        (name, entry)
        for group in ("metrics", "ensembles")
        for name, entry in accuracy[group].items()
        if entry.get("available")
    ]
    page = open_views(browser, runs["style_ensemble"])
    try:
        bars = page.titles("style_accuracy", 0)
        assert [t.split(": ")[0] for t in bars] == [name for name, _ in members]
        widths = [
            b["w"]
            for b in page.boxes('#views [data-view="style_accuracy"] figure:nth-of-type(1) .mark')
        ]
        axis = page.boxes('#views [data-view="style_accuracy"] figure:nth-of-type(1) .axis')[0]["w"]
        for width, (_, entry) in zip(widths, members, strict=True):
            assert width == pytest.approx(max(entry["overall"] * axis, 1), abs=0.2)
        ensembles = page.tab.locator('#views [data-view="style_accuracy"] .mark.ensemble').count()
        assert ensembles == sum(1 for name, _ in members if name in accuracy["ensembles"])
        cells = page.titles("style_accuracy", 1)
        expected = sum(len(entry["per_setting"]) for _, entry in members)
        assert len(cells) == expected
        assert page.errors == []
    finally:
        page.close()


@pytest.mark.parametrize("graph", ["pointwise", "perse_pointwise"])
def test_score_histograms_per_declared_score_field(
    browser: Any,
    runs: dict[str, Path],
    graph: str,
) -> None:
    import yaml

    spec = yaml.safe_load((ROOT / "graphs" / f"{graph}.yaml").read_text())
    fields = {}
    for output, expression in spec["outputs"].items():
        node, _, name = expression.partition(".")
        declared = spec["nodes"].get(node, {}).get("output", {}).get(name)
        if isinstance(declared, dict) and declared.get("type") in ("integer", "number"):
            fields[output] = declared
    assert fields, "the graph declares no score field; pick another graph"
    ok = [r for r in results(runs[graph]).values() if r["status"] == "ok"]
    page = open_views(browser, runs[graph])
    try:
        assert [h.split(" (")[0] for h in page.figures("score_histograms")] == list(fields)
        for k, (output, declared) in enumerate(fields.items()):
            titles = page.titles("score_histograms", k)
            # One column per value of the declared scale, empty ones too.
            assert len(titles) == int(declared["max"] - declared["min"] + 1)
            drawn = {
                int(m.group(1)): int(m.group(2))
                for t in titles
                if (m := re.fullmatch(rf"{output} (\d+): (\d+) examples", t))
            }
            assert drawn == {v: Counter(r[output] for r in ok)[v] for v in drawn}
            assert sum(drawn.values()) == len(ok)
        assert page.errors == []
    finally:
        page.close()


def test_perse_views_per_reviewer_and_agreement(browser: Any, runs: dict[str, Path]) -> None:
    lines = [r for r in results(runs["perse_pointwise"]).values() if r["status"] == "ok"]
    report = json.loads((runs["perse_pointwise"] / "meta_eval.json").read_text())
    page = open_views(browser, runs["perse_pointwise"])
    try:
        titles = page.titles("perse_scores")
        assert len(titles) == 2 * len(lines)
        for line in lines:
            assert f"{line['id']}: judge's predicted score · {line['score']:.4g}" in titles
            assert (
                f"{line['id']}: the reviewer's profile mean · {line['profile_mean']:.4g}" in titles
            )
        agreement = page.titles("meta_eval")
        scores = report["scores"]
        r, low, high = scores["pearson"]["r"], *scores["pearson_ci"]
        assert f"pearson: the run (score) · {r:.4g} [{low:.4g}, {high:.4g}]" in agreement
        ceiling = scores["humans"]["human_human"]
        assert any(
            t.startswith(f"alpha: human vs human (the ceiling) · {ceiling['alpha']:.4g}")
            for t in agreement
        )
        assert page.errors == []
    finally:
        page.close()
    lines = [r for r in results(runs["perse_pairwise"]).values() if r["status"] == "ok"]
    page = open_views(browser, runs["perse_pairwise"])
    try:
        cells = page.titles("perse_choices")
        assert len(cells) == sum(len(line["choices"]) for line in lines)
        shaded = [b["o"] for b in page.boxes('#views [data-view="perse_choices"] .mark')]
        same = [
            line["choices"][a] == line["profile_choices"].get(a)
            for line in lines
            for a in line["choices"]
        ]
        assert [o > 0.3 for o in shaded] == same
        per_key = json.loads((runs["perse_pairwise"] / "meta_eval.json").read_text())["choices"]
        agreement = page.titles("meta_eval")
        for key, entry in per_key["per_key"].items():
            assert any(
                t.startswith(f"accuracy · {key}: the run (choices) · {entry['accuracy']:.4g}")
                for t in agreement
            )
        assert page.errors == []
    finally:
        page.close()


def test_plots_print_dark_on_white(browser: Any, runs: dict[str, Path]) -> None:
    page = open_views(browser, runs["aupel"])
    try:
        page.tab.emulate_media(media="print")
        seen = page.tab.evaluate(
            """() => {
              const grey = (c) => { const m = c.match(/\\d+(\\.\\d+)?/g) || [];
                const [r, g, b] = m.map(Number); return r === g && g === b ? r : -1; };
              const out = {texts: [], strokes: [],
                body: getComputedStyle(document.body).backgroundColor};
              document.querySelectorAll('#views svg.plot text').forEach((t) => {
                const s = getComputedStyle(t);
                out.texts.push([grey(s.fill), parseFloat(s.fontSize)]);
              });
              const lines = '#views svg.plot .whisker, #views svg.plot .axis';
              document.querySelectorAll(lines).forEach((l) => {
                out.strokes.push(grey(getComputedStyle(l).stroke));
              });
              return out;
            }"""
        )
        assert seen["body"] in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)")
        assert seen["texts"] and all(fill == 0 and size >= 11 for fill, size in seen["texts"])
        assert seen["strokes"] and all(stroke == 0 for stroke in seen["strokes"])
        assert page.errors == []
    finally:
        page.close()


def test_screenshot_of_the_plots(browser: Any, runs: dict[str, Path], tmp_path: Path) -> None:
    """The AuPEL run's plots; REPORT_SCREENSHOT=1 refreshes docs/report-plots.png."""
    page = open_views(browser, runs["aupel"])
    try:
        page.tab.set_viewport_size({"width": 1280, "height": 900})
        box = page.tab.locator("#views").bounding_box()
        assert box is not None
        shot = tmp_path / "plots.png"
        clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": 1000}
        page.tab.screenshot(path=str(shot), clip=clip, full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("REPORT_SCREENSHOT"):
            shutil.copy(shot, ROOT / "docs" / "report-plots.png")
        assert page.errors == []
    finally:
        page.close()


# -- without a browser -----------------------------------------------------------------


def test_a_failed_aggregate_gets_no_panel() -> None:
    failed = {"failed": True, "error": "ValueError: boom"}
    panels, folded = run_views(RunContext([Aggregate("win_table", "win_table", failed)], []))
    assert panels == [] and folded == set()


def test_known_inputs_give_one_mark_each() -> None:
    marks = re.compile(r'class="mark')
    bars = plots.hbars([plots.Bar("a", 0.5), plots.Bar("b", None), plots.Bar("c", 1.0)], "x")
    assert len(marks.findall(bars)) == 2 and "n/a" in bars
    cells = {(0, 1): plots.Cell("0.25", 0.25), (1, 0): plots.Cell("0.75", 0.75)}
    assert len(marks.findall(plots.matrix(["p", "q"], ["p", "q"], cells, "m"))) == 2
    shares = plots.stacked([("r", [0.5, 0.0, 0.5])], ("first", "tie", "second"), "s")
    assert len(marks.findall(shares)) == 2
    points = [plots.Point(1, 2, ("a", "b")), plots.Point(2, 2, ("c",))]
    scatter = plots.scatter(points, "x", "y", "s")
    assert len(marks.findall(scatter)) == 2 and 'data-count="2"' in scatter
    # Text from a run is escaped, never markup.
    assert "<script>" not in plots.hbars([plots.Bar("<script>", 1.0)], "x")


def test_the_generic_page_names_no_protocol() -> None:
    generic = [
        "app.js",
        "template.html",
        "build.py",
        "collect.py",
        "render.py",
        "svg.py",
        "views.py",
        "compare_page.py",
        "compare_tables.py",
    ]
    names = re.compile(r"aupel|perse|perq|expert|style_ensemble|jury", re.I)
    for name in generic:
        text = (ROOT / "orchestrator/report" / name).read_text()
        # views.py lists the built-in view modules by module name, and app.js holds the
        # renderer of the ExPerT example view (VIEW_RENDERERS); nothing else may.
        text = re.sub(r'"orchestrator\.report\.\w+_view",', "", text)
        if name == "app.js":
            head, _, rest = text.partition("/* ExPerT:")
            text = head + rest.partition("async function showExample")[2]
        assert not names.search(text), (name, names.search(text))


def test_panel_order_does_not_depend_on_which_view_module_was_imported_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A built-in view module imported early (by a caller, or by a test that reaches for it)
    registers first; its panel must still come where `_BUILTIN_MODULES` puts it (seen in CI:
    the per-language panel jumped ahead of the jury's when its test ran first)."""
    from orchestrator.report import views

    views.run_views(RunContext([], []))  # every built-in registered
    before = [v.name for v in views.in_order(views._RUN_VIEWS.values())]
    # The per-language and card modules imported first: their views registered first.
    early = ("orchestrator.report.groups_view", "orchestrator.report.card_view")
    items = list(views._RUN_VIEWS.items())
    shuffled = dict(
        [i for i in items if i[1].build.__module__ in early]
        + [i for i in items if i[1].build.__module__ not in early]
    )
    assert list(shuffled) != before  # the registration order did change
    monkeypatch.setattr(views, "_RUN_VIEWS", shuffled)
    assert [v.name for v in views.in_order(views._RUN_VIEWS.values())] == before
    modules = [v.build.__module__ for v in views.in_order(shuffled.values())]
    ranks = [views._BUILTIN_MODULES.index(m) for m in modules if m in views._BUILTIN_MODULES]
    assert ranks == sorted(ranks) and len(set(modules)) > 3
