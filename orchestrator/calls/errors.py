"""What an LLM call can fail with, under the names the calls package has always used.

The classes are defined in orchestrator/errors.py, whose docstring draws the whole tree.
"""

from __future__ import annotations

from ..errors import (
    DeadlineExceeded,
    LLMCallError,
    MalformedReply,
    ReplyTooLarge,
    RequestFailed,
    RetryAfterTooLong,
    ServerError,
)

__all__ = [
    "DeadlineExceeded",
    "LLMCallError",
    "MalformedReply",
    "ReplyTooLarge",
    "RequestFailed",
    "RetryAfterTooLong",
    "ServerError",
]
