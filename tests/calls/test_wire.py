"""What the default transport puts on the wire: the chat body the calls layer built, encoded
by us (orjson) or by the SDK on releases that cannot take an encoded body, sent as JSON and
read back unchanged by a real HTTP server. In make test-floors too, where the SDK encodes
it (openai 1.89 cannot take an encoded body)."""

from __future__ import annotations

from pathlib import Path

from fakeserver import FakeServer, schema_responder
from helpers import is_canary, judge_graph, results, run_graph, user_text, write_graph, write_rows

# Text a JSON encoder may escape (\u00e9) or pass through as UTF-8: either must arrive intact.
TEXT = 'café — 東京 "quoted" \\ tab\there 🙂'


def test_chat_bodies_arrive_as_json_with_the_rows_text_intact(tmp_path: Path) -> None:
    graph = write_graph(tmp_path / "g", judge_graph(), {"judge.jinja": "Rate: {{ text }}"})
    data = write_rows(tmp_path / "rows.jsonl", [{"id": "e1", "text": TEXT}])
    with FakeServer(schema_responder) as server:
        outcome = run_graph(graph, data, tmp_path / "run", server.base_url)
        bodies = [b for b in server.requests if not is_canary(b)]
        types = set(server.content_types)
    assert outcome.manifest["counts"]["examples_ok"] == 1
    assert [user_text(b) for b in bodies] == [f"Rate: {TEXT}"]
    assert types == {"application/json"}
    assert set(results(tmp_path / "run")) == {"e1"}
