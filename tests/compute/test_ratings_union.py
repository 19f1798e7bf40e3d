"""Ratings across runs (issue 18): Elo and Bradley–Terry over the union of several AuPEL
runs' battles equal one run's over all of them, by the same single-run functions."""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.analysis.ratings import gather_battles, ratings_across_runs
from orchestrator.cli import app
from orchestrator.compute.ratings import bradley_terry, elo_ratings
from orchestrator.errors import ConfigurationError

REPO = Path(__file__).resolve().parents[2]
ROWS = [json.loads(line) for line in (REPO / "examples" / "aupel.jsonl").read_text().splitlines()]
PARAMS = {"repeats_per_order": 1}  # one vote per order keeps the runs small


def verdict(request: Any) -> str:
    """A judge that answers by the prompt: the same comparison gets the same answer in any run."""
    text = "".join(str(m["content"]) for m in request.messages)
    answer = ("first", "second", "tie", "second")[zlib.crc32(text.encode()) % 4]
    return json.dumps({"reason": "r", "answer": answer})


def aupel(out: Path, rows: list[dict[str, Any]], model: str = "judge-a", **kw: Any) -> Path:
    fake = orc.FakeTransport(verdict, models=[model])
    graph = kw.pop("graph", REPO / "graphs" / "aupel.yaml")
    orc.run(graph, rows, out=out, transport=fake, model=model, params=PARAMS, **kw)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("union")
    return {
        "first": aupel(root / "first", ROWS[:3]),
        "second": aupel(root / "second", ROWS[3:]),
        "all": aupel(root / "all", ROWS),
    }


def test_the_union_of_two_runs_rates_as_one_run_holding_every_battle(runs: dict[str, Path]):
    union = ratings_across_runs([runs["second"], runs["first"]])  # the order given is no matter
    whole = ratings_across_runs([runs["all"]])
    assert union["matches"] == whole["matches"] == 6 * 3 * 3  # cases x pairs x dimensions
    assert union["cases"] == 6 and union["duplicates"] == 0 and union["warnings"] == []
    for name in ("elo", "bradley_terry"):
        assert union[name] == whole[name]  # exactly: same battles, same order, same seed
    # The pooled battles are the one run's, in the order its aggregates saw them.
    pooled = gather_battles([runs["first"], runs["second"]]).matches
    assert pooled == gather_battles([runs["all"]]).matches
    # Not a trivial agreement: the judge made winners, so ratings spread.
    ratings = [p["rating"] for p in whole["bradley_terry"]["quality"]["players"].values()]
    assert max(ratings) - min(ratings) > 10


def test_one_run_rates_as_its_own_summary_and_the_single_run_functions(runs: dict[str, Path]):
    result = ratings_across_runs([runs["all"]])
    summary = json.loads((runs["all"] / "summary.json").read_text())
    # The graph's own arguments are used (K 4, 1000 replicates, seed 0), so the numbers are
    # the ones the run's aggregates wrote.
    assert result["settings"]["elo"] == {"k": 4, "initial": 1000, "replicates": 1000, "seed": 0}
    assert result["elo"] == summary["elo"]
    assert result["bradley_terry"] == summary["bradley_terry"]
    matches = gather_battles([runs["all"]]).matches
    assert result["elo"] == elo_ratings(matches, k=4, replicates=1000, seed=0)
    fewer = ratings_across_runs([runs["all"]], method="bt", replicates=50, seed=3)
    assert "elo" not in fewer
    # AuPEL's fit asks for the style-controlled ratings too (style: true).
    assert fewer["bradley_terry"] == bradley_terry(matches, replicates=50, seed=3, style=True)
    assert "style_controlled" in fewer["bradley_terry"]["quality"]


def test_generators_judged_in_separate_runs_are_rated_together(tmp_path: Path):
    large = aupel(tmp_path / "large", [{**r, "compare": ["user", "gen-large"]} for r in ROWS])
    small = aupel(tmp_path / "small", [{**r, "compare": ["user", "gen-small"]} for r in ROWS])
    result = ratings_across_runs([large, small], method="elo", replicates=20)
    players = result["elo"]["quality"]["players"]
    assert set(players) == {"user", "gen-large", "gen-small"}
    assert players["user"]["matches"] == 12 and players["gen-large"]["matches"] == 6
    assert result["duplicates"] == 0


def test_battles_found_in_two_runs_are_kept_and_warned_of(
    runs: dict[str, Path], caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        result = ratings_across_runs([runs["first"], runs["all"]], method="elo", replicates=10)
    assert result["duplicates"] == 3 * 3 * 3  # the first run's cases, again in the whole run
    assert result["matches"] == 3 * 9 + 6 * 9
    assert "appear in more than one run" in caplog.text


def test_runs_of_different_graphs_or_judges_are_refused_unless_asked(
    runs: dict[str, Path], tmp_path: Path
):
    text = (REPO / "graphs" / "aupel.yaml").read_text().replace("name: aupel", "name: aupel_copy")
    (tmp_path / "copy.yaml").write_text(text)
    copy = orc.load_graph(tmp_path / "copy.yaml", prompts_dir=REPO / "prompts")
    other_graph = aupel(tmp_path / "copy", ROWS[3:], graph=copy)
    with pytest.raises(ConfigurationError, match=r"different graphs.*aupel_copy"):
        ratings_across_runs([runs["first"], other_graph])
    pooled = ratings_across_runs([runs["first"], other_graph], mixed_graphs=True, replicates=10)
    assert pooled["matches"] == 6 * 9
    other_judge = aupel(tmp_path / "judge-b", ROWS[3:], model="judge-b")
    with pytest.raises(ConfigurationError, match=r"different models.*judge-a.*judge-b"):
        ratings_across_runs([runs["first"], other_judge])
    mixed = ratings_across_runs([runs["first"], other_judge], mixed_judges=True, replicates=10)
    assert mixed["judges"] == ["judge-a", "judge-b"]
    with pytest.raises(ConfigurationError, match="named twice"):
        ratings_across_runs([runs["first"], runs["first"]])


def test_cli_prints_a_table_with_intervals_and_json(runs: dict[str, Path]):
    folders = [str(runs["first"]), str(runs["second"])]
    table = CliRunner().invoke(app, ["ratings", *folders, "--replicates", "20"])
    assert table.exit_code == 0, table.output
    assert "quality: 18 battles" in table.output and "95% CI" in table.output
    assert "gen-large" in table.output and "judged by judge-a" in table.output
    printed = CliRunner().invoke(app, ["ratings", *folders, "--format", "json", "--method", "bt"])
    assert printed.exit_code == 0, printed.output
    data = json.loads(printed.output)
    assert data["bradley_terry"] == ratings_across_runs([runs["all"]], method="bt")["bradley_terry"]
    refused = CliRunner().invoke(app, ["ratings", folders[0], folders[0]])
    assert refused.exit_code == 1 and "named twice" in refused.output
