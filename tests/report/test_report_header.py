"""The report's header (issue 26 items 9 and 10): shares in flight counted apart from cache
hits, and a quick run's wall time as a real small duration."""

from __future__ import annotations

import re

from orchestrator.report.render import facts
from orchestrator.store.records import Counts, Manifest


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
