"""An OpenAI chat-completion reply body read into a `ChatResponse` (its samples, token
counts and the server's fingerprint), and the size a reply may have for its max_tokens.

Reading the body ourselves (orjson, then these few fields) instead of letting the SDK build
its `ChatCompletion` model takes about 0.15 ms off every request: against an instant server
a bare SDK loop went from 1,693 to 2,251 requests/s (bench/engine_overhead.py, its
`bare_bytes` row against `bare_post`).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import MalformedReply, ReplyTooLarge
from .base import ChatResponse, Choice

# A reply's content may hold at most this many bytes per requested token, plus CONTENT_SLACK.
# Generous on purpose: a token is 1-4 bytes in most scripts, but one token of a byte-level
# vocabulary can stand for a long run of spaces or a whole word of a script that takes 3-4
# bytes a character, and a reply must never fail for being dense. Past this the server is
# not keeping to max_tokens: a 10 MB content for max_tokens 300 was accepted, and kept
# three times in the trace.
BYTES_PER_TOKEN = 16
CONTENT_SLACK = 1024
# Per token with logprobs: the token and its logprob, and each of its top alternatives, as
# JSON (about 60 bytes each with the keys; a token's text may be long, hence the margin).
LOGPROB_BYTES = 256
BODY_SLACK = 64 * 1024  # the envelope: ids, usage, finish reasons, a fingerprint


def content_cap(max_tokens: int) -> int:
    """The most bytes one sample's content may have for `max_tokens`."""
    return BYTES_PER_TOKEN * max_tokens + CONTENT_SLACK


def body_cap(body: dict[str, Any]) -> int | None:
    """The most bytes a reply to this chat-completion body may have, before it is parsed;
    None when the body sets no max_tokens (nothing to hold the server to)."""
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int):
        return None
    per_token = BYTES_PER_TOKEN
    if body.get("logprobs"):
        per_token += LOGPROB_BYTES * (1 + int(body.get("top_logprobs") or 0))
    # A JSON string escapes some characters (a control character becomes six bytes).
    per_sample = 6 * (per_token * max_tokens + CONTENT_SLACK)
    return int(body.get("n") or 1) * per_sample + BODY_SLACK


def too_large(what: str, size: int, cap: int, max_tokens: int) -> ReplyTooLarge:
    return ReplyTooLarge(
        f"{what} is {size:,} bytes, over the {cap:,} that max_tokens {max_tokens} allows:"
        " the server does not keep to max_tokens (whatever its usage says), so the reply"
        " is not used"
    )


def check_reply_size(reply: ChatResponse, max_tokens: int | None) -> None:
    """ReplyTooLarge when a sample's content is larger than `max_tokens` allows."""
    if max_tokens is None:
        return
    cap = content_cap(max_tokens)
    for index, choice in enumerate(reply.choices):
        text = choice.content
        # Characters are 1-4 bytes in UTF-8: only a content near the cap is encoded.
        if 4 * len(text) > cap and (size := len(text.encode())) > cap:
            raise too_large(f"the reply's content (sample {index})", size, cap, max_tokens)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedReply(f"{where} is {type(value).__name__}, not an object")
    return value


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, dict) else None
    if not content:
        return None
    try:
        return [
            {
                "token": t["token"],
                "logprob": t["logprob"],
                "top": {c["token"]: c["logprob"] for c in (t.get("top_logprobs") or [])},
            }
            for t in content
        ]
    except (KeyError, TypeError) as exc:
        raise MalformedReply(f"the reply's logprobs are not in the OpenAI shape ({exc!r})") from exc


def _choice(raw: Any, position: int) -> tuple[int, Choice]:
    choice = _object(raw, f"choice {position}")
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if content is not None and not isinstance(content, str):
        raise MalformedReply(f"choice {position}'s content is {type(content).__name__}")
    index = choice.get("index", position)
    if not isinstance(index, int):
        raise MalformedReply(f"choice {position}'s index is {index!r}, not an integer")
    finish = choice.get("finish_reason")
    finish_reason = finish if isinstance(finish, str) else None
    return index, Choice(content or "", finish_reason, _logprobs(choice))


def parse_reply(body: bytes | str | dict[str, Any]) -> ChatResponse:
    """The ChatResponse in a chat-completion response body; MalformedReply (retried like a 5xx) for
    a body that is not JSON or not shaped like a completion."""
    if isinstance(body, dict):
        data = body
    else:
        try:
            data = _object(orjson.loads(body), "the reply")
        except orjson.JSONDecodeError as exc:
            raise MalformedReply(f"the reply is not JSON ({exc})") from exc
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise MalformedReply("the reply has no list of choices")
    indexed = sorted((_choice(c, i) for i, c in enumerate(choices)), key=lambda pair: pair[0])
    usage = data.get("usage")
    prompt = completion = 0
    if isinstance(usage, dict):
        prompt = usage.get("prompt_tokens") or 0
        completion = usage.get("completion_tokens") or 0
    fingerprint = data.get("system_fingerprint")
    return ChatResponse(
        [choice for _, choice in indexed],
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
        fingerprint if isinstance(fingerprint, str) else None,
    )
