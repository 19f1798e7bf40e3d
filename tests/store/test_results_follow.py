"""Following a run's results file as it is written (`result_ids_since`, read by the live
OTLP exporter): whole lines only, a torn line taken once it is finished, a damaged line
naming no example, and never a line twice."""

from __future__ import annotations

from pathlib import Path

from orchestrator.store import RESULTS, result_ids_since, results_end


def test_whole_lines_once_each_and_a_torn_line_when_it_is_finished(tmp_path: Path) -> None:
    assert results_end(tmp_path) == 0
    assert result_ids_since(tmp_path, 0) == ([], 0)  # no results file yet
    path = tmp_path / RESULTS
    path.write_bytes(b'{"id": "a", "score": 1}\n{"id": 7}\n{"id": "c", "sco')
    found, at = result_ids_since(tmp_path, 0)
    assert found == ["a", "7"]
    assert at == len(b'{"id": "a", "score": 1}\n{"id": 7}\n')
    assert result_ids_since(tmp_path, at) == ([], at)  # the torn line waits
    with open(path, "ab") as handle:
        handle.write(b're": 2}\nnot json\n["a list"]\n{"no id": 1}\n{"id": "e"}\n')
    found, end = result_ids_since(tmp_path, at)
    assert found == ["c", "e"]  # the damaged lines name no example
    assert end == results_end(tmp_path) == path.stat().st_size
    assert result_ids_since(tmp_path, end) == ([], end)


def test_a_follower_started_at_the_end_sees_only_later_lines(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    path.write_bytes(b'{"id": "earlier part"}\n')
    start = results_end(tmp_path)
    with open(path, "ab") as handle:
        handle.write(b'{"id": "this part"}\n')
    assert result_ids_since(tmp_path, start)[0] == ["this part"]
