"""Live counters of a run, shown in the progress bar and written to the manifest."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class RunStats:
    examples_ok: int = 0
    examples_failed: int = 0
    examples_resumed: int = 0
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started: float = field(default_factory=time.time)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def tokens_per_second(self) -> float:
        elapsed = max(time.time() - self.started, 1e-6)
        return self.completion_tokens / elapsed

    def as_dict(self) -> dict[str, int | float]:
        data = asdict(self)
        data.pop("started")
        data["tokens"] = self.tokens
        return data
