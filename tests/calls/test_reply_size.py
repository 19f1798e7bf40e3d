"""A reply's size: content far past what `max_tokens` allows is a failed try, never parsed
or stored whole (the server's `usage` may say anything), and a reply that is kept is
written to the trace once, not three times (issue 24, item 13)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from fakeserver import FakeServer, Reply, schema_responder
from helpers import is_canary, judge_graph, results, run_graph, write_graph, write_rows

from orchestrator.errors import ReplyTooLarge
from orchestrator.providers.base import ChatResponse as ParsedReply
from orchestrator.providers.base import Choice
from orchestrator.providers.reply import check_reply_size, content_cap
from orchestrator.store.folder import TRACES
from orchestrator.store.reader import RunReader

TEN_MB = 10 * (1 << 20)


def _graph(tmp_path: Path) -> Path:
    return write_graph(tmp_path / "g", judge_graph(max_tokens=300), {"judge.jinja": "{{ text }}"})


def _trace_bytes(out: Path) -> int:
    return sum(p.stat().st_size for p in out.glob(f"{TRACES}*"))


@pytest.mark.reliability
def test_ten_mb_of_content_for_max_tokens_300_fails_the_call_and_is_not_stored(
    tmp_path: Path,
) -> None:
    huge = '{"score": 5, "pad": "' + "x" * TEN_MB + '"}'

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        # usage claims 300 tokens: only the bytes tell the truth
        return Reply(content=huge, usage=(10, 300))

    rows = write_rows(tmp_path / "rows.jsonl", [{"id": f"e{i}", "text": "t"} for i in range(5)])
    with FakeServer(respond) as fake:
        run_graph(_graph(tmp_path), rows, tmp_path / "run", fake.base_url)
    lines = results(tmp_path / "run")
    assert {line["status"] for line in lines.values()} == {"failed"}
    assert "max_tokens 300" in lines["e0"]["error"]
    assert _trace_bytes(tmp_path / "run") < 1 << 20  # five 10 MB replies: 144 MB before
    (judge,) = RunReader(tmp_path / "run").node_runs("e0", "judge")
    assert judge.status == "failed" and judge.raw is None
    (attempt,) = judge.attempts  # not retried: a server that ignores max_tokens goes on
    assert attempt.kind == "transport" and attempt.raw is None
    assert attempt.error is not None
    assert re.search(r"[\d,]+ bytes, over the [\d,]+ that max_tokens 300 allows", attempt.error)


def test_a_reply_within_the_cap_passes_and_the_cap_counts_bytes() -> None:
    cap = content_cap(300)
    assert cap >= 16 * 300
    check_reply_size(ParsedReply([Choice("a" * cap, "stop", None)]), 300)
    # Four bytes a character in UTF-8: a quarter of the cap in characters is the whole cap.
    check_reply_size(ParsedReply([Choice("😀" * (cap // 4), "stop", None)]), 300)
    with pytest.raises(ReplyTooLarge, match=r"sample 1\) is [\d,]+ bytes, .*max_tokens 300"):
        check_reply_size(
            ParsedReply([Choice("ok", "stop", None), Choice("😀" * (cap // 4 + 1), None, None)]),
            300,
        )
    check_reply_size(ParsedReply([Choice("a" * TEN_MB, "stop", None)]), None)  # no max_tokens


def test_a_kept_reply_is_written_to_the_trace_once(tmp_path: Path) -> None:
    marker = "MARKER-5f1c0e9a"

    def respond(body: dict) -> Reply:
        if is_canary(body):
            return schema_responder(body)
        # Prompt-only mode reads the JSON out of prose: the marker is in the reply only,
        # not in the value parsed from it.
        return Reply(content=f'{marker} {{"score": 7}}')

    rows = write_rows(tmp_path / "rows.jsonl", [{"id": "e0", "text": "t"}])
    out = tmp_path / "run"
    with FakeServer(respond) as fake:
        run_graph(_graph(tmp_path), rows, out, fake.base_url, structured="prompt")
    with sqlite3.connect(out / TRACES) as db:  # everything in the main file, none in the WAL
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stored = b"".join(p.read_bytes() for p in out.glob(f"{TRACES}*"))
    assert stored.count(marker.encode()) == 1
    # ... and read back as before: the node run's raw replies and the accepted attempt's.
    (judge,) = RunReader(out).node_runs("e0", "judge")
    assert judge.value == {"score": 7}
    assert judge.raw == [f'{marker} {{"score": 7}}']
    assert [(a.kind, a.raw) for a in judge.attempts] == [("ok", f'{marker} {{"score": 7}}')]
