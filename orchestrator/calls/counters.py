"""Live counters of a run, shown in the progress bar and written to the manifest.

They are the store's `Counts` record itself (one type from the first request to
manifest.json); `RunStats` stays the name the calls layer and scale/ use for it.
"""

from __future__ import annotations

from ..store.records import Counts

RunStats = Counts

__all__ = ["Counts", "RunStats"]
