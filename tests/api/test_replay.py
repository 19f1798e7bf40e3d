"""`orc.replay` / `orchestrator replay` (issue 39): a finished run with one node asked
again and every other node's output read back from its trace. Requests are counted on the
fake server (real sockets), so "read back" means no request reached it."""

from __future__ import annotations

import json
import logging
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, results, user_text, write_graph, write_rows
from typer.testing import CliRunner

import orchestrator as orc
from orchestrator.cli import app
from orchestrator.errors import ConfigurationError, RunFolderError, RunKeyMismatch

ROWS = [{"id": f"r{i}", "text": f"text number {i}"} for i in range(4)]
SCORE = {"score": {"type": "integer", "min": 1, "max": 10}}
TEMPLATES = {
    "draft.jinja": "Draft for: {{ text }}",
    "judge.jinja": "Judge the draft {{ draft.score }} of: {{ text }}",
    "side.jinja": "Side look at: {{ text }}",
}


def graph_spec() -> dict[str, Any]:
    """draft → judge (reads draft), side (reads nothing), and a compute node over both."""
    llm = {"kind": "llm", "output": SCORE}
    return {
        "name": "replayed",
        "inputs": ["text"],
        "params": {"bonus": 0},
        "defaults": {"temperature": 0.0, "max_tokens": 60},
        "nodes": {
            "draft": {**llm, "prompt": "draft.jinja"},
            "judge": {**llm, "prompt": "judge.jinja"},
            "side": {**llm, "prompt": "side.jinja"},
            "total": {
                "kind": "compute",
                "function": "mean",
                "args": {"values": "[judge.score, side.score, params.bonus]"},
            },
        },
        "outputs": {
            "draft": "draft.score",
            "judge": "judge.score",
            "side": "side.score",
            "total": "total",
        },
    }


def by_prompt(body: dict) -> Reply:
    """A score that depends on the prompt's text: another prompt, another score."""
    if is_canary(body):
        return schema_responder(body)
    score = zlib.crc32(user_text(body).encode()) % 10 + 1
    return Reply(content=json.dumps({"score": score}))


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(by_prompt) as fake:
        yield fake


def asked(server: FakeServer, since: int = 0) -> list[str]:
    """The prompts of the node requests since request `since` (the canary left out)."""
    return [user_text(b) for b in server.requests[since:] if not is_canary(b)]


def first_run(root: Path, server: FakeServer) -> Path:
    graph = write_graph(root / "g", graph_spec(), TEMPLATES)
    data = write_rows(root / "rows.jsonl", ROWS)
    orc.run(graph, data, out=root / "run", base_url=server.base_url, cache=False)
    return root / "run"


def test_a_replay_asks_the_node_named_and_what_reads_it_and_nothing_upstream(
    tmp_path: Path, server: FakeServer
) -> None:
    run = first_run(tmp_path, server)
    before = len(server.requests)
    new = tmp_path / "judge.jinja"
    new.write_text("A stricter look at draft {{ draft.score }} of: {{ text }}", encoding="utf-8")
    again = orc.replay(
        run, node="judge", prompt=new, out=tmp_path / "r2", base_url=server.base_url, cache=False
    )
    prompts = asked(server, before)
    assert len(prompts) == len(ROWS)  # judge's calls, one per example; draft and side: none
    assert all(p.startswith("A stricter look") for p in prompts)
    old, replayed = results(run), results(tmp_path / "r2")
    for row in ROWS:
        was, now = old[row["id"]], replayed[row["id"]]
        assert (now["draft"], now["side"]) == (was["draft"], was["side"])  # read back
        assert now["judge"] == by_prompt_score(
            f"A stricter look at draft {was['draft']} of: {row['text']}"
        )
        assert now["total"] == pytest.approx((now["judge"] + now["side"]) / 3)  # ran again
    lineage = again.manifest.parameters.replay
    assert lineage is not None and lineage.source == str(run)
    assert lineage.named == ["judge"] and lineage.nodes == ["judge", "total"]
    assert lineage.changes is not None and str(new) in lineage.changes["prompt"]
    source_key = json.loads((run / "manifest.json").read_text())["run_key"]["digest"]
    assert again.manifest.run_key is not None
    assert lineage.source_key == source_key != again.manifest.run_key.digest
    # The replay's trace holds every node, so it is an ordinary run to read.
    with orc.RunReader(tmp_path / "r2").trace() as trace:
        assert {r.node for r in trace.node_runs(example_id="r0")} == {
            "draft",
            "judge",
            "side",
            "total",
        }


def by_prompt_score(text: str) -> int:
    return zlib.crc32(text.encode()) % 10 + 1


def test_several_nodes_at_once_and_a_param_change(tmp_path: Path, server: FakeServer) -> None:
    run = first_run(tmp_path, server)
    before = len(server.requests)
    again = orc.replay(
        run,
        node=["draft", "side"],
        params={"bonus": 5},
        out=tmp_path / "r2",
        base_url=server.base_url,
        cache=False,
    )
    # draft, its reader judge, and side: asked; total recomputed with the new param.
    assert len(asked(server, before)) == 3 * len(ROWS)
    lineage = again.manifest.parameters.replay
    assert lineage is not None and lineage.nodes == ["draft", "judge", "side", "total"]
    assert lineage.changes == {"params.bonus": "0 → 5"}
    line = results(tmp_path / "r2")["r1"]
    assert line["total"] == pytest.approx((line["judge"] + line["side"] + 5) / 3)


def test_a_replay_asks_as_the_run_asked_unless_told(tmp_path: Path, server: FakeServer) -> None:
    """The run's structured mode and timeout carry over to a replay: one that had the server
    enforce the schema where the run put it in the prompt would differ for that alone, and
    said nothing of it. A mode given is a change the lineage names."""
    graph = write_graph(tmp_path / "g", graph_spec(), TEMPLATES)
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    run = tmp_path / "run"
    orc.run(
        graph, data, out=run, base_url=server.base_url, cache=False, structured="prompt", timeout=77
    )

    def node_bodies(since: int) -> list[dict]:
        return [b for b in server.requests[since:] if not is_canary(b)]

    before = len(server.requests)
    again = orc.replay(run, node="judge", out=tmp_path / "r2", base_url=server.base_url)
    assert (again.manifest.parameters.structured, again.manifest.parameters.timeout) == (
        "prompt",
        77,
    )
    asked_again = node_bodies(before)
    assert len(asked_again) == len(ROWS)
    assert not any("response_format" in body for body in asked_again)
    lineage = again.manifest.parameters.replay
    assert lineage is not None and lineage.changes == {}

    before = len(server.requests)
    told = orc.replay(
        run, node="judge", out=tmp_path / "r3", base_url=server.base_url, structured="server"
    )
    assert all("response_format" in body for body in node_bodies(before))
    lineage = told.manifest.parameters.replay
    assert lineage is not None and lineage.changes == {"structured": "prompt → server"}
    # Asked another way, it is another run: pointed at the first replay's folder, refused
    # before any request rather than resumed with answers asked two ways.
    before = len(server.requests)
    with pytest.raises(RunKeyMismatch):
        orc.replay(
            run, node="judge", out=tmp_path / "r2", base_url=server.base_url, structured="server"
        )
    assert node_bodies(before) == []


def test_a_folders_unusable_mode_and_timeout_are_not_taken(
    tmp_path: Path, server: FakeServer
) -> None:
    """The manifest is someone else's file: a mode that is none of the three and a timeout
    of a billion seconds (a stalled server would hold the replay for good) are not taken;
    the defaults apply."""
    run = first_run(tmp_path, server)
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    manifest["parameters"].update(structured="bogus", timeout=1e9)
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    again = orc.replay(run, node="judge", out=tmp_path / "r2", base_url=server.base_url)
    assert (again.manifest.parameters.structured, again.manifest.parameters.timeout) == (
        "auto",
        120,
    )


def test_a_replay_of_a_replay_reads_the_replay_not_the_first_run(
    tmp_path: Path, server: FakeServer
) -> None:
    run = first_run(tmp_path, server)
    new = tmp_path / "judge.jinja"
    new.write_text("Once more, draft {{ draft.score }}: {{ text }}", encoding="utf-8")
    orc.replay(
        run, node="judge", prompt=new, out=tmp_path / "r2", base_url=server.base_url, cache=False
    )
    before = len(server.requests)
    third = orc.replay(
        tmp_path / "r2", node="side", out=tmp_path / "r3", base_url=server.base_url, cache=False
    )
    assert [p.startswith("Side look") for p in asked(server, before)] == [True] * len(ROWS)
    second, last = results(tmp_path / "r2"), results(tmp_path / "r3")
    for row in ROWS:
        # judge as the second run asked it (the new prompt), read back from its trace
        assert last[row["id"]]["judge"] == second[row["id"]]["judge"]
    lineage = third.manifest.parameters.replay
    assert lineage is not None and lineage.source == str(tmp_path / "r2")


def test_a_replay_resumes_and_is_never_mixed_with_another_replay(
    tmp_path: Path, server: FakeServer
) -> None:
    run = first_run(tmp_path, server)
    out = tmp_path / "r2"
    # The server refuses judge's call for r2: that example fails, the others finish.
    server.responder = lambda body: (
        Reply(status=400, content="no") if "text number 2" in user_text(body) else by_prompt(body)
    )
    first = orc.replay(run, node="judge", out=out, base_url=server.base_url, cache=False)
    assert first.manifest.counts.examples_failed == 1
    server.responder = by_prompt
    before = len(server.requests)
    resumed = orc.replay(run, node="judge", out=out, base_url=server.base_url, cache=False)
    assert asked(server, before) == [
        "Judge the draft {} of: text number 2".format(results(run)["r2"]["draft"])
    ]
    assert resumed.manifest.counts.examples_failed == 0
    assert len(resumed.manifest.parts) == 2
    # Same graph, params, rows and server: only the replay record tells a replay of `side`
    # from this one. Resuming this folder with it would take judge's replies for side's.
    before = len(server.requests)
    with pytest.raises(RunKeyMismatch, match="replay"):
        orc.replay(run, node="side", out=out, base_url=server.base_url, cache=False)
    assert asked(server, before) == []
    # And the replay's key is not the run's, whose folder a replay never writes.
    with pytest.raises(ConfigurationError, match="the run replayed"):
        orc.replay(run, node="side", out=run, base_url=server.base_url)


def test_the_cache_answers_only_the_same_question(tmp_path: Path, server: FakeServer) -> None:
    """Two replays with different prompts share one cache file: each gets its own prompt's
    replies; the same replay again is answered from the cache."""
    run = first_run(tmp_path, server)
    cache = tmp_path / "cache.sqlite"
    outputs = {}
    for name, text in {
        "a": "A: {{ draft.score }} {{ text }}",
        "b": "B: {{ draft.score }} {{ text }}",
    }.items():
        template = tmp_path / f"{name}.jinja"
        template.write_text(text, encoding="utf-8")
        before = len(server.requests)
        orc.replay(
            run,
            node="judge",
            prompt=template,
            out=tmp_path / name,
            base_url=server.base_url,
            cache=cache,
        )
        assert len(asked(server, before)) == len(ROWS)
        outputs[name] = {k: v["judge"] for k, v in results(tmp_path / name).items()}
    drafts = {k: v["draft"] for k, v in results(run).items()}
    for name in ("a", "b"):
        assert outputs[name] == {
            row["id"]: by_prompt_score(f"{name.upper()}: {drafts[row['id']]} {row['text']}")
            for row in ROWS
        }
    before = len(server.requests)
    orc.replay(
        run,
        node="judge",
        prompt=tmp_path / "a.jinja",
        out=tmp_path / "a2",
        base_url=server.base_url,
        cache=cache,
    )
    assert asked(server, before) == []


def test_a_replay_asks_only_the_server_named(tmp_path: Path, server: FakeServer) -> None:
    run = first_run(tmp_path, server)
    before = len(server.paths)
    with pytest.raises(ConfigurationError, match="--base-url"):
        orc.replay(run, node="judge", out=tmp_path / "r2")
    assert len(server.paths) == before and not (tmp_path / "r2").exists()
    with pytest.raises(ConfigurationError, match="not a node of graph"):
        orc.replay(run, node="nope", out=tmp_path / "r2", base_url=server.base_url)
    with pytest.raises(ConfigurationError, match="exactly one"):
        orc.replay(
            run,
            node=["draft", "side"],
            prompt=tmp_path / "x.jinja",
            out=tmp_path / "r2",
            base_url=server.base_url,
        )
    assert len(server.paths) == before


def test_out_never_replaces_what_the_replay_did_not_write(
    tmp_path: Path, server: FakeServer
) -> None:
    run = first_run(tmp_path, server)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(RunFolderError, match=r"notes\.txt"):
        orc.replay(run, node="judge", out=mine, base_url=server.base_url, cache=False)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_the_command_says_what_it_asks_before_asking(
    tmp_path: Path, server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    run = first_run(tmp_path, server)
    before = len(server.requests)
    args = ["replay", str(run), "--node", "side", "--out", str(tmp_path / "r2")]
    with caplog.at_level(logging.INFO, logger="orchestrator"):
        done = CliRunner().invoke(
            app, [*args, "--base-url", server.base_url, "--no-cache", "--param", "bonus=2"]
        )
    assert done.exit_code == 0, done.output
    told = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Replaying"))
    assert server.base_url in told and f"at most {len(ROWS)} calls" in told
    assert "draft, judge read back" in told
    assert len(asked(server, before)) == len(ROWS)
    refused = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "r3")])
    assert refused.exit_code == 1, refused.output
    assert "--base-url" in refused.output


DOC = Path(__file__).parents[2] / "docs" / "replay.md"


def test_the_worked_example_of_the_replay_page_runs_as_shown(
    tmp_path: Path,
    server: FakeServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/replay.md's files and command, as written, against the fake server."""
    example = DOC.read_text(encoding="utf-8").split("## A worked example", 1)[1]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", example, re.S | re.M)
    monkeypatch.chdir(tmp_path)
    for language, body in blocks:
        named = re.match(r"(?:\{#|#) ([\w/.]+)", body)
        if named and language in ("yaml", "jinja"):
            Path(named.group(1)).parent.mkdir(parents=True, exist_ok=True)
            Path(named.group(1)).write_text(body, encoding="utf-8")
    rows = write_rows(tmp_path / "rows.jsonl", ROWS[:3])
    orc.run("two/graph.yaml", rows, out="runs/two", base_url=server.base_url, cache=False)
    (command,) = [body.strip() for language, body in blocks if language == "bash"]
    shown = next(body for language, body in blocks if language == "text")
    url = "http://localhost:8000/v1"
    args = command.replace(url, server.base_url).split()
    assert args[0] == "orchestrator"
    before = len(server.requests)
    with caplog.at_level(logging.INFO, logger="orchestrator"):
        done = CliRunner().invoke(app, args[1:])
    assert done.exit_code == 0, done.output
    logged = [r.getMessage() for r in caplog.records]
    for line in shown.strip().splitlines():
        assert line.replace(url, server.base_url) in logged
    prompts = asked(server, before)
    assert len(prompts) == 3 and all(p.startswith("Be strict.") for p in prompts)
    first, strict = results(Path("runs/two")), results(Path("runs/two-strict"))
    assert {k: v["draft"] for k, v in first.items()} == {k: v["draft"] for k, v in strict.items()}


def test_diff_names_the_replayed_node_as_where_the_runs_part(
    tmp_path: Path, server: FakeServer
) -> None:
    run = first_run(tmp_path, server)
    new = tmp_path / "judge.jinja"
    new.write_text("Strictly, draft {{ draft.score }}: {{ text }}", encoding="utf-8")
    orc.replay(
        run, node="judge", prompt=new, out=tmp_path / "r2", base_url=server.base_url, cache=False
    )
    found = orc.diff(run, tmp_path / "r2")
    changed = {n.node: n.changed for n in found.nodes}
    assert changed["draft"] == changed["side"] == 0 and changed["judge"] > 0
    assert found.differences and {d.node for d in found.differences} == {"judge"}
    # An ordinary run folder: the judge card and the report read it, lineage shown.
    card = orc.judge_card(tmp_path / "r2")
    assert {r.node for r in card.reliability} >= {"judge"}
    from orchestrator.report import build_report

    html = build_report(tmp_path / "r2").read_text(encoding="utf-8")
    assert 'data-view="replay"' in html and "asked again" in html


def test_a_foreach_node_read_back_keeps_its_items(tmp_path: Path, server: FakeServer) -> None:
    """A node run once per list element, read back: its items are in the replay's trace as
    in the run's (the report shows them), a diff finds no change there, and the reader is
    asked on the same values."""
    llm = {"kind": "llm", "output": SCORE}
    spec = {
        "name": "per_aspect",
        "inputs": ["text"],
        "params": {"aspects": ["clarity", "depth", "tone"]},
        "defaults": {"temperature": 0.0, "max_tokens": 60},
        "nodes": {
            "aspect": {
                **llm,
                "prompt": "aspect.jinja",
                "foreach": "params.aspects",
                "as": "name",
            },
            "overall": {**llm, "prompt": "overall.jinja"},
        },
        "outputs": {"overall": "overall.score"},
    }
    templates = {
        "aspect.jinja": "Rate the {{ name }} of: {{ text }}",
        "overall.jinja": "Aspects {{ aspect | map(attribute='score') | join(',') }}: {{ text }}",
    }
    graph = write_graph(tmp_path / "g", spec, templates)
    data = write_rows(tmp_path / "rows.jsonl", ROWS)
    orc.run(graph, data, out=tmp_path / "run", base_url=server.base_url, cache=False)
    before = len(server.requests)
    new = tmp_path / "overall.jinja"
    new.write_text("Overall, {{ aspect | map(attribute='score') | join(',') }}: {{ text }}")
    orc.replay(
        tmp_path / "run",
        node="overall",
        prompt=new,
        out=tmp_path / "r2",
        base_url=server.base_url,
        cache=False,
    )
    assert [p.startswith("Overall, ") for p in asked(server, before)] == [True] * len(ROWS)
    found = orc.diff(tmp_path / "run", tmp_path / "r2")
    assert {n.node: n.changed for n in found.nodes}["aspect"] == 0

    def items(folder: Path) -> dict[tuple[str, int], Any]:
        with orc.RunReader(folder).trace() as trace:
            return {(r.example_id, r.item): r.value for r in trace.node_runs(node="aspect")}

    assert items(tmp_path / "r2") == items(tmp_path / "run")
    assert len(items(tmp_path / "run")) == len(ROWS) * 4  # three items and the whole, each
