"""The report's header (issue 26 items 9 and 10): shares in flight counted apart from cache
hits, and a quick run's wall time as a real small duration."""

from __future__ import annotations

import re

from orchestrator.report.render import facts
from orchestrator.store.records import Counts, Manifest, RunPart


def _row(html: str, name: str) -> str:
    found = re.search(rf"<tr><th>{re.escape(name)}</th><td>(.*?)</td></tr>", html)
    assert found, html
    return found.group(1)


def test_the_header_shows_shares_and_a_small_wall_time() -> None:
    manifest = Manifest(
        graph={"name": "judge"}, counts=Counts(cache_hits=2, shared=3), wall_seconds=0.04
    )
    html = facts(manifest, [], 4)
    assert _row(html, "cache hits") == "2"
    assert _row(html, "shared in flight") == "3"
    assert _row(html, "wall time") == "0.04 s"


def test_a_manifest_without_counts_shows_dashes() -> None:
    html = facts(Manifest(graph={"name": "judge"}), [], 0)
    assert _row(html, "shared in flight") == "—"


def test_a_resumed_run_shows_the_total_with_each_part() -> None:
    parts = [
        RunPart(counts=Counts(requests=5, prompt_tokens=10)),
        RunPart(counts=Counts(requests=3, prompt_tokens=4)),
    ]
    manifest = Manifest(
        graph={"name": "judge"}, counts=Counts(requests=8, prompt_tokens=14), parts=parts
    )
    html = facts(manifest, [], 4)
    assert _row(html, "LLM requests") == "8 (5 + 3)"
    assert _row(html, "parts (first run + resumes)") == "2"
    assert _row(html, "tokens") == "14 (10 + 4) · 14 prompt + 0 completion"
