"""Where the batch transport lived before `orchestrator.providers.batch`: its names, kept
for code that imports them from here."""

from __future__ import annotations

from ..errors import BatchUnsupported
from ..providers.batch import (
    BATCH_BASE_URL,
    BatchConnection,
    BatchTransport,
    Deferred,
    deferrals_unreported,
)

__all__ = [
    "BATCH_BASE_URL",
    "BatchConnection",
    "BatchTransport",
    "BatchUnsupported",
    "Deferred",
    "deferrals_unreported",
]
