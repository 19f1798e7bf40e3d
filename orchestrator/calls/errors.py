"""What an LLM call can fail with; each names its fault in one line for the trace."""

from __future__ import annotations

from ..errors import ServerUnavailable
from ..store.trace import Attempt


class LLMCallError(Exception):
    """A call that exhausted its budget; carries every attempt for the trace."""

    def __init__(self, message: str, attempts: list[Attempt]) -> None:
        self.attempts = attempts
        super().__init__(message)


class ServerError(ServerUnavailable):
    """The server cannot be used at all (unreachable, refuses the model…)."""


class MalformedReply(Exception):
    """HTTP 200 whose body is not a usable completion (e.g. no choices); retried like a 5xx."""


class ReplyTooLarge(Exception):
    """A reply larger than the request's max_tokens allows: the server does not keep to it
    (its `usage` may say anything). Not retried: the same server would answer the same."""


class DeadlineExceeded(Exception):
    """No complete reply within the request's deadline (`--timeout`): connect, wait and the
    whole body together, so a server that drips its reply cannot hold a call forever."""


class RetryAfterTooLong(Exception):
    """The server asked to be retried later than the run is willing to wait."""
