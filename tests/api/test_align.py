"""`orc.align` end to end against the fake transport: a planted effect is found and
called better, no effect is called the same, no test example reaches the search (the
leak test), a repeated alignment costs no request, and the aligned folder runs."""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Any

import pytest
from helpers import judge_graph, write_graph, write_rows

import orchestrator as orc
from orchestrator.analysis import split
from orchestrator.errors import ConfigurationError, GraphError, LabelError
from orchestrator.providers.fake import FakeRequest

N = 40
TRUTH = {f"e{i:02d}": (2 if i % 2 else 9) for i in range(N)}
MARK = re.compile(r"MARK-(e\d\d)")


def _noise(text: str) -> int:
    return 1 + zlib.crc32(text.encode()) % 10


def _said(request: FakeRequest) -> str:
    return str(request.messages[-1]["content"])


def _with_shots(request: FakeRequest) -> str:
    """A judge that is right only when shown example turns, and noise without them."""
    found = MARK.search(_said(request))
    assert found is not None
    right = len(request.messages) > 1
    return json.dumps({"score": TRUTH[found.group(1)] if right else _noise(_said(request))})


def _same_either_way(request: FakeRequest) -> str:
    found = MARK.search(_said(request))
    assert found is not None
    good = zlib.crc32(found.group(1).encode()) % 3 != 0
    return json.dumps({"score": TRUTH[found.group(1)] if good else _noise(found.group(1))})


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    graph = write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": k, "text": f"text MARK-{k}"} for k in TRUTH]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    labels = write_rows(
        tmp_path / "labels.jsonl", [{"id": k, "score": v} for k, v in TRUTH.items()]
    )
    return graph, data, labels


def _align(
    setup: tuple[Path, Path, Path], out: Path, respond: Any, **kw: Any
) -> tuple[orc.Alignment, orc.FakeTransport]:
    graph, data, labels = setup
    transport = orc.FakeTransport(respond)
    kw.setdefault("shots", (0, 2))
    kw.setdefault("folds", 3)
    kw.setdefault("metric", "accuracy")
    found = orc.align(
        graph,
        data,
        labels,
        node="judge",
        out=out,
        resamples=300,
        transport=transport,
        structured="server",
        cache=out.parent / "cache.sqlite",
        **kw,
    )
    return found, transport


def test_a_judge_right_only_with_shots_is_aligned_better_and_nothing_leaks(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    found, transport = _align(setup, tmp_path / "out", _with_shots)
    assert found.chosen.shots == 2 and found.verdict == "better"
    assert found.aligned.test.value == 1.0
    test, search = set(found.test_ids), set(found.search_ids)
    assert len(test) == 12 and not test & search and test | search == set(TRUTH)
    assert set(found.shots) <= search and len(found.shots) == 2
    # The leak test: the test phase is the last 2 × |test| requests; before it, no request
    # names a test example anywhere, and no shot turn ever does.
    sent = transport.node_requests
    marks = [set(MARK.findall(json.dumps(r.messages))) for r in sent]
    first = next(i for i, m in enumerate(marks) if m & test)
    assert first == len(sent) - 2 * len(test)
    assert all(not m & test for m in marks[:first])
    shown = [set(MARK.findall(json.dumps(r.messages[:-1]))) for r in sent]
    assert all(not s & test for s in shown)
    folds = list((tmp_path / "out/runs/search").rglob("inputs.jsonl"))
    assert len(folds) == 2 * 3
    for inputs in folds:
        scored = set(MARK.findall(inputs.read_text()))
        assert scored and not scored & test
        shots_file = inputs.parent / "snapshot/prompts/shots.json"
        if shots_file.is_file():  # a fold's shots come from the other folds only
            shown_ids = {s["id"] for s in json.loads(shots_file.read_text())}
            assert len(shown_ids) == 2 and shown_ids <= search and not shown_ids & scored
    # Every configuration's fold scores are in the trace.
    assert {t.configuration.label for t in found.trace} == {"shots=0 baseline", "shots=2 baseline"}
    assert all(len(t.folds) == 3 for t in found.trace)


def test_a_judge_the_same_either_way_is_called_the_same(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    found, _ = _align(setup, tmp_path / "out", _same_either_way)
    assert found.verdict == "same"
    assert found.difference.ci is not None and found.difference.ci[0] <= 0 <= found.difference.ci[1]


def test_a_repeated_alignment_sends_no_request(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    first, _ = _align(setup, tmp_path / "one", _with_shots)
    again, transport = _align(setup, tmp_path / "two", _with_shots)
    assert transport.requests == []
    assert again.model_dump(exclude={"graph", "folder"}) == first.model_dump(
        exclude={"graph", "folder"}
    )


def test_another_split_into_the_same_folder_runs_beside_the_first(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    first, _ = _align(setup, tmp_path / "out", _with_shots, shots=(0,))
    again, _ = _align(setup, tmp_path / "out", _with_shots, shots=(0,), seed=1)
    assert again.test_ids != first.test_ids


def test_the_aligned_folder_is_a_new_protocol_that_runs(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    found, _ = _align(setup, tmp_path / "out", _with_shots)
    out = tmp_path / "out"
    record = json.loads((out / "alignment.json").read_text())
    assert record["metric"] == "accuracy" and record["graph"] == str(out / "graph.yaml")
    for key in ("baseline", "aligned"):
        assert set(record[key]["test"]) >= {"value", "ci"}
    assert record["shots"] == found.shots and record["test_ids"] == found.test_ids
    page = (out / "alignment.html").read_text()
    assert "orchestrator align" in page and "<strong>better than</strong>" in page
    assert page.count("(chosen)") == 1 and "shots=0 baseline" in page
    shots = json.loads((out / "prompts/shots.json").read_text())
    assert [s["id"] for s in shots] == found.shots
    assert shots[0]["output"] == {"score": TRUTH[shots[0]["id"]]}
    aligned = orc.load_graph(out / "graph.yaml")
    original = orc.load_graph(setup[0])
    assert aligned.name == "judge-aligned" and aligned.content_hash != original.content_hash
    said = aligned.spec.description or ""
    assert original.content_hash in said and "better" in said and "alignment.json" in said
    rows = [{"id": "new", "text": "text MARK-e01"}]
    ran = orc.run(aligned, rows, transport=orc.FakeTransport(_with_shots), structured="server")
    assert ran.ok[0].outputs["score"] == TRUTH["e01"]
    assert (
        ran.manifest.run_key
        != orc.run(
            original, rows, transport=orc.FakeTransport(_with_shots), structured="server"
        ).manifest.run_key
    )


def _shifted(request: FakeRequest) -> str:
    """In order with the people but on its own scale: 5 where they say 2, 7 where 9."""
    found = MARK.search(_said(request))
    assert found is not None
    return json.dumps({"score": 5 if TRUTH[found.group(1)] == 2 else 7})


def test_variants_and_isotonic_enter_the_search_and_the_graph_applies_the_map(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    graph, _, _ = setup
    (graph.parent / "prompts/other.jinja").write_text("Judge: {{ text }}")
    found, _ = _align(
        setup,
        tmp_path / "out",
        _shifted,
        shots=(0,),
        variants=["prompt=other.jinja"],
        isotonic=True,
    )
    labels = {t.configuration.label for t in found.trace}
    assert labels == {
        "shots=0 baseline",
        "shots=0 baseline isotonic",
        "shots=0 prompt=other.jinja",
        "shots=0 prompt=other.jinja isotonic",
    }
    assert found.chosen.label == "shots=0 baseline isotonic" and found.verdict == "better"
    assert (found.baseline.test.value, found.aligned.test.value) == (0.0, 1.0)
    assert found.isotonic is not None and found.isotonic_applied
    aligned = orc.load_graph(tmp_path / "out/graph.yaml")
    rows = [{"id": "x", "text": "text MARK-e00"}, {"id": "y", "text": "text MARK-e01"}]
    ran = orc.run(aligned, rows, transport=orc.FakeTransport(_shifted), structured="server")
    assert [line.outputs["score_isotonic"] for line in ran.ok] == [9.0, 2.0]


def test_bad_settings_are_refused(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    graph, data, labels = setup
    with pytest.raises(ConfigurationError, match="not an LLM node"):
        orc.align(graph, data, labels, node="nope", out=tmp_path / "o")
    with pytest.raises(ConfigurationError, match="no output field"):
        orc.align(graph, data, labels, node="judge", field="colour", out=tmp_path / "o")
    with pytest.raises(ConfigurationError, match="metric"):
        orc.align(graph, data, labels, node="judge", metric="f1", out=tmp_path / "o")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no template"):
        orc.align(graph, data, labels, node="judge", variants=["prompt=x.jinja"], out=tmp_path)
    with pytest.raises(ConfigurationError, match="params"):
        orc.align(graph, data, labels, node="judge", out=tmp_path / "o", params={"a": 1})
    choices = write_rows(tmp_path / "c.jsonl", [{"id": "e00", "choice": "a"}])
    with pytest.raises(ConfigurationError, match="isotonic"):
        orc.align(graph, data, choices, node="judge", isotonic=True, out=tmp_path / "o")
    pairs = write_rows(tmp_path / "p.jsonl", [{"id": "e00", "pair": "a|b", "winner": "a"}])
    with pytest.raises(LabelError, match="one label per example"):
        orc.align(graph, data, pairs, node="judge", out=tmp_path / "o")


def test_what_align_cannot_use_is_refused_before_any_request(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Issue 35 item 10: a label the field can never take (a verdict with no warning), an
    undeclared param variant (tried as if it were a configuration), and a shot count
    larger than a fold can draw (recorded as `shots: 1000` with 21 shown)."""
    graph, data, labels = setup
    transport = orc.FakeTransport(_with_shots)

    def align(labels: Path, out: str, **kw: Any) -> orc.Alignment:
        kw.setdefault("folds", 3)
        kw.setdefault("cache", False)
        return orc.align(
            graph, data, labels, node="judge", out=tmp_path / out, transport=transport, **kw
        )

    high = write_rows(
        tmp_path / "high.jsonl",
        [{"id": k, "score": 11 if k == "e03" else v} for k, v in TRUTH.items()],
    )
    with pytest.raises(LabelError, match=r"high\.jsonl: example 'e03' is labelled 11.*1 to 10"):
        align(high, "o1")
    with pytest.raises(ConfigurationError, match="declares no param 'nosuch'"):
        align(labels, "o2", variants=["params.nosuch=1"])
    # 40 labels: 28 search examples in 3 folds, so a fold draws from 18 or 19 others.
    with pytest.raises(ConfigurationError, match=r"1000 shots.* at most 18"):
        align(labels, "o3", shots=(0, 1000))
    align(labels, "o4", shots=(0, 18))  # the most a fold can show is allowed
    sent = len(transport.requests)
    assert sent > 0
    with pytest.raises(ConfigurationError, match=r"19 shots.* at most 18"):
        align(labels, "o5", shots=(0, 19))
    assert len(transport.requests) == sent  # refused before any request
    assert not any((tmp_path / name).exists() for name in ("o1", "o2", "o3", "o5"))


def test_a_choice_label_outside_the_fields_enum_is_refused(tmp_path: Path) -> None:
    graph_dict = judge_graph()
    graph_dict["nodes"]["judge"]["output"] = {
        "verdict": {"type": "string", "enum": ["good", "bad"]}
    }
    graph_dict["outputs"] = {"verdict": "judge.verdict"}
    graph = write_graph(tmp_path / "g", graph_dict, {"judge.jinja": "Rate: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": k, "text": k} for k in TRUTH])
    said = {k: ("Good" if v == 9 else "bad") for k, v in TRUTH.items()}  # case is no matter
    said["e05"] = "great"
    labels = write_rows(tmp_path / "l.jsonl", [{"id": k, "choice": v} for k, v in said.items()])
    transport = orc.FakeTransport(lambda _: json.dumps({"verdict": "good"}))
    with pytest.raises(LabelError, match=r"example 'e05' is labelled 'great'.*good, bad"):
        orc.align(graph, data, labels, node="judge", out=tmp_path / "o", transport=transport)
    assert transport.requests == []


def test_the_worked_example_in_the_docs_prints_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs/align.md").read_text(encoding="utf-8")
    section = text.split("## align\n", 1)[1].split("## calibrate\n", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    code = code.replace('structured="server",', 'structured="server", cache="cache.sqlite",')
    exec(compile(code, "docs/align.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["better shots=2 baseline ['e17', 'e40']", "-0.181 1.0"]
    assert "prints `better shots=2 baseline ['e17', 'e40']` and `-0.181 1.0`" in " ".join(
        section.split()
    )
    # ... and the `validate` line it shows is the written graph's own.
    written = orc.load_graph(tmp_path / "aligned" / "graph.yaml")
    assert f"order: judge; hash {written.content_hash}" in section


def test_cluster_resamples_whole_users_in_the_test_bootstrap(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": k, "text": f"text MARK-{k}", "user": f"u{i % 10}"} for i, k in enumerate(TRUTH)]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    labels = write_rows(tmp_path / "l.jsonl", [{"id": k, "score": v} for k, v in TRUTH.items()])
    found, _ = _align((graph, data, labels), tmp_path / "out", _with_shots, cluster="user")
    assert found.cluster == "user"
    # The test side holds whole users (3 of the 10, 4 rows each): they are what it resamples.
    users = {row["user"] for row in rows if row["id"] in found.test_ids}
    assert found.bootstrap["unit"] == "cluster" and found.bootstrap["clusters"] == len(users) == 3
    with pytest.raises(ConfigurationError, match="no field 'team'"):
        _align((graph, data, labels), tmp_path / "out", _with_shots, cluster="team")


def test_cluster_keeps_each_user_on_one_side_of_the_split(tmp_path: Path) -> None:
    """Split by example, every test user had rows in the search (issue 37, finding 2)."""
    graph = write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    rows = [{"id": k, "text": f"text MARK-{k}", "user": f"u{i % 8}"} for i, k in enumerate(TRUTH)]
    user = {row["id"]: row["user"] for row in rows}
    data = write_rows(tmp_path / "rows.jsonl", rows)
    labels = write_rows(tmp_path / "l.jsonl", [{"id": k, "score": v} for k, v in TRUTH.items()])
    found, _ = _align((graph, data, labels), tmp_path / "out", _with_shots, cluster="user")
    tested = {user[k] for k in found.test_ids}
    searched = {user[k] for k in found.search_ids}
    assert tested and searched and not tested & searched
    assert abs(len(found.test_ids) - 0.3 * N) <= N / 8  # whole users of 5 rows each
    again, _ = _align((graph, data, labels), tmp_path / "again", _with_shots, cluster="user")
    assert again.test_ids == found.test_ids  # the seed decides it


def test_a_cluster_split_needs_two_clusters_and_keeps_rows_without_one_apart() -> None:
    ids = [f"e{i}" for i in range(10)]
    groups = dict.fromkeys(ids, "x")
    with pytest.raises(ConfigurationError, match="at least 2"):
        split(ids, groups, 0.3, 0, dict.fromkeys(ids, "u"))
    keys = {k: "u" for k in ids[:6]}  # four rows have no user: each its own cluster
    search, test = split(ids, groups, 0.3, 0, keys)
    assert sorted(search + test) == ids
    assert set(ids[:6]) <= set(search) or set(ids[:6]) <= set(test)


def test_a_template_that_reads_shots_gets_them_as_a_variable(tmp_path: Path) -> None:
    prompt = "{% for s in shots %}[{{ s.inputs.text }} => {{ s.output.score }}]{% endfor %}"
    prompt += "Rate: {{ text }}"
    graph = write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": prompt})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": k, "text": f"text MARK-{k}"} for k in TRUTH])
    labels = write_rows(tmp_path / "l.jsonl", [{"id": k, "score": v} for k, v in TRUTH.items()])

    def respond(request: FakeRequest) -> str:
        found = MARK.findall(_said(request))
        assert len(request.messages) == 1  # no example turns: the template laid them out
        right = " => " in _said(request)
        return json.dumps({"score": TRUTH[found[-1]] if right else _noise(found[-1])})

    found, _ = _align((graph, data, labels), tmp_path / "out", respond)
    assert found.chosen.shots == 2 and found.verdict == "better"


def test_choice_labels_with_reasons_align_by_kappa(tmp_path: Path) -> None:
    graph_dict = judge_graph()
    graph_dict["nodes"]["judge"]["output"] = {"label": {"type": "string", "enum": ["good", "bad"]}}
    graph_dict["outputs"] = {"label": "judge.label"}
    graph = write_graph(tmp_path / "g", graph_dict, {"judge.jinja": "Rate: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": k, "text": f"text MARK-{k}"} for k in TRUTH])
    said = {k: "good" if v == 9 else "bad" for k, v in TRUTH.items()}
    labels = write_rows(
        tmp_path / "l.jsonl", [{"id": k, "choice": v, "reason": f"r-{k}"} for k, v in said.items()]
    )

    def respond(request: FakeRequest) -> str:
        key = MARK.findall(_said(request))[-1]
        shown = len(request.messages) > 1
        return json.dumps({"label": said[key] if shown else ("good", "bad")[_noise(key) % 2]})

    found, _ = _align((graph, data, labels), tmp_path / "out", respond, metric="kappa")
    assert found.kind == "choices" and found.chosen.shots == 2 and found.verdict == "better"
    assert found.aligned.test.value == 1.0
    shots = json.loads((tmp_path / "out/prompts/shots.json").read_text())
    assert shots[0]["output"] == {"label": said[shots[0]["id"]], "reason": f"r-{shots[0]['id']}"}


def _strict_case(
    tmp_path: Path, graph_dict: dict[str, Any], prompts: dict[str, str]
) -> tuple[Path, Path, Path]:
    """A graph folder, its rows and labels, for a judge right only when its prompt says
    "(strict)" (`_right_when_strict`)."""
    graph = write_graph(tmp_path / "g", graph_dict, prompts)
    data = write_rows(tmp_path / "rows.jsonl", [{"id": k, "text": f"text MARK-{k}"} for k in TRUTH])
    labels = write_rows(tmp_path / "l.jsonl", [{"id": k, "score": v} for k, v in TRUTH.items()])
    return graph, data, labels


def _right_when_strict(request: FakeRequest) -> str:
    key = MARK.findall(_said(request))[-1]
    strict = "(strict)" in _said(request)
    return json.dumps({"score": TRUTH[key] if strict else _noise(key)})


def test_a_judge_right_only_under_a_param_variant_gets_that_variant(tmp_path: Path) -> None:
    graph_dict = {**judge_graph(), "params": {"style": "plain"}}
    prompts = {"judge.jinja": "Rate ({{ params.style }}): {{ text }}"}
    found, _ = _align(
        _strict_case(tmp_path, graph_dict, prompts),
        tmp_path / "out",
        _right_when_strict,
        shots=(0,),
        variants=["params.style=strict"],
    )
    assert found.chosen.label == "shots=0 params.style=strict" and found.verdict == "better"
    assert orc.load_graph(tmp_path / "out/graph.yaml").spec.params == {"style": "strict"}


def test_a_node_with_n_samples_answers_with_their_mean(tmp_path: Path) -> None:
    from orchestrator.analysis.align.answers import node_answers

    graph_dict = judge_graph(n=3, temperature=0.7)
    graph_dict["outputs"] = {"score": "judge[0].score"}
    graph = orc.Graph.from_dict(graph_dict, {"judge.jinja": "Rate: {{ text }}"})
    scores = [json.dumps({"score": s}) for s in (9, 9, 3)]
    transport = orc.FakeTransport(lambda request: orc.FakeAnswer(scores))
    orc.run(graph, [{"id": "a", "text": "x"}], out=tmp_path / "run", transport=transport)
    assert node_answers(tmp_path / "run", "judge", "score") == {"a": 7.0}


def test_the_variants_a_graph_lists_are_searched_and_checked(tmp_path: Path) -> None:
    graph_dict = {**judge_graph(), "variants": ["prompt=strict.jinja"]}
    prompts = {"judge.jinja": "Rate: {{ text }}", "strict.jinja": "Rate (strict): {{ text }}"}
    case = _strict_case(tmp_path, graph_dict, prompts)
    # No variant given here: the graph's own list is what the search tries.
    found, _ = _align(case, tmp_path / "out", _right_when_strict, shots=(0,))
    assert found.chosen.label == "shots=0 prompt=strict.jinja" and found.verdict == "better"
    # The template travels with the graph: it is part of its identity.
    assert "strict.jinja" in orc.load_graph(case[0]).templates
    before = orc.load_graph(case[0]).content_hash
    (case[0].parent / "prompts" / "strict.jinja").write_text("Rate (stricter): {{ text }}")
    assert orc.load_graph(case[0]).content_hash != before  # a new graph, a new run key
    for variants, expected in (
        (["prompt=missing.jinja"], "no template 'missing.jinja'"),
        (["params.nope=1"], "declares no param 'nope'"),
        (["temperature=1"], "write prompt=TEMPLATE"),
    ):
        bad = write_graph(tmp_path / "bad", {**judge_graph(), "variants": variants}, prompts)
        with pytest.raises(GraphError, match="variants") as caught:
            orc.load_graph(bad)
        assert expected in str(caught.value)


def test_shots_carry_the_values_of_the_nodes_the_judge_reads(tmp_path: Path) -> None:
    # As PERSE's judge reads the profile a compute node picked: each example turn must
    # render with its own example's value of that node, never the row being judged.
    graph_dict = judge_graph()
    graph_dict["nodes"] = {
        "shown": {"kind": "compute", "function": "identity", "args": {"value": "text"}},
        "judge": {**graph_dict["nodes"]["judge"], "after": ["shown"]},
    }
    prompt = "Rate: {{ shown }}"
    graph = write_graph(tmp_path / "g", graph_dict, {"judge.jinja": prompt})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": k, "text": f"text MARK-{k}"} for k in TRUTH])
    labels = write_rows(tmp_path / "l.jsonl", [{"id": k, "score": v} for k, v in TRUTH.items()])
    found, transport = _align((graph, data, labels), tmp_path / "out", _with_shots)
    assert found.verdict == "better" and found.chosen.shots == 2
    shots = json.loads((tmp_path / "out/prompts/shots.json").read_text())
    assert [s["inputs"]["shown"] for s in shots] == [f"text MARK-{s['id']}" for s in shots]
    for request in transport.node_requests:
        turns = [m["content"] for m in request.messages if m["role"] == "user"]
        # Every turn shows a different example: no example turn repeats the judged row.
        assert len(set(turns)) == len(turns)
    # Shots come from the search set only, and so does the run that gave their values.
    assert not set(found.shots) & set(found.test_ids)
    upstream = next((tmp_path / "out/runs/search").glob("upstream-*"))
    ran = {line.id for line in orc.RunReader(upstream).latest_results()}
    assert ran == set(found.search_ids)


def test_a_variant_template_is_read_only_from_inside_the_prompts_folder(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    graph = setup[0]
    (graph.parent / "secret.txt").write_text("API_KEY=do-not-read")
    (graph.parent / "prompts" / "linked.jinja").symlink_to(graph.parent / "secret.txt")
    for name in ("../secret.txt", "linked.jinja", "/etc/passwd"):
        with pytest.raises(ConfigurationError, match="no template"):
            _align(setup, tmp_path / "out", _with_shots, variants=[f"prompt={name}"])
