"""The lines of an OpenAI batch file, as `vllm run-batch` and OpenAI's Batch API read and
write them, and the custom_id a request is known by: a digest of its exact body, so the
same question always has the same id and a reply can never answer another question."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

CHAT_URL = "/v1/chat/completions"


def custom_id(body: dict[str, Any]) -> str:
    """The id of a chat request: sha256 over its body (keys sorted), model included."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


class BatchRequestLine(BaseModel):
    """One line of a batch input file: a chat request exactly as a live run would POST it."""

    custom_id: str
    method: str = "POST"
    url: str = CHAT_URL
    body: dict[str, Any]

    @classmethod
    def of(cls, body: dict[str, Any]) -> BatchRequestLine:
        return cls(custom_id=custom_id(body), body=body)

    @property
    def model(self) -> str:
        return str(self.body.get("model"))

    @property
    def n(self) -> int:
        return int(self.body.get("n") or 1)


class BatchResponse(BaseModel):
    """The `response` of an output line: the HTTP status and, on success, the reply body."""

    model_config = ConfigDict(extra="allow")

    status_code: int = 200
    request_id: str | None = None
    body: dict[str, Any] | None = None


class BatchOutputLine(BaseModel):
    """One line of a batch output (or error) file."""

    model_config = ConfigDict(extra="allow")

    id: str | None = None
    custom_id: str
    response: BatchResponse | None = None
    error: Any = None

    def failure(self) -> str | None:
        """Why this line carries no usable reply (an error line), or None when it does."""
        status = self.response.status_code if self.response is not None else None
        if self.error is not None:
            return (
                f"HTTP {status}: {_error_text(self.error)}" if status else _error_text(self.error)
            )
        if self.response is None or self.response.body is None:
            return f"HTTP {status}: no response body" if status else "no response"
        if status != 200:
            return f"HTTP {status}"
        return None


def _error_text(error: Any) -> str:
    """The message inside an error object ({"error": {"message": …}} or {"message": …})."""
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])
    return str(error)


class ChatReply(BaseModel):
    """The model a reply body names (import compares it with the request's)."""

    model_config = ConfigDict(extra="allow")

    model: str
