"""A graph run through batch files (`vllm run-batch`, or any OpenAI batch endpoint) instead
of a live server: `export_round` writes the requests the examples wait for (the next
frontier), `import_output` loads a batch runner's replies; repeat until nothing waits.
See docs/batch.md."""

from __future__ import annotations

from .folder import BatchFolder, BatchJob
from .importer import BatchImportError, ImportOutcome, import_output
from .rounds import ExportOutcome, RoundOutcome, export_round, run_round

__all__ = [
    "BatchFolder",
    "BatchImportError",
    "BatchJob",
    "ExportOutcome",
    "ImportOutcome",
    "RoundOutcome",
    "export_round",
    "import_output",
    "run_round",
]
