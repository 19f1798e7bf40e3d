"""Reading a chat-completion body into a Reply: the fields the calls layer keeps, in index
order, and MalformedReply for bodies that are not completions."""

from __future__ import annotations

import orjson
import pytest

from orchestrator.errors import MalformedReply
from orchestrator.providers.reply import parse_reply


def body(**fields: object) -> bytes:
    return orjson.dumps({"id": "x", "object": "chat.completion", **fields})


def test_samples_come_back_in_index_order_with_usage_and_fingerprint() -> None:
    raw = body(
        choices=[
            {"index": 1, "message": {"content": "b"}, "finish_reason": "length"},
            {"index": 0, "message": {"content": "a"}, "finish_reason": "stop"},
        ],
        usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        system_fingerprint="fp-1",
    )
    reply = parse_reply(raw)
    assert [c.content for c in reply.choices] == ["a", "b"]
    assert [c.finish_reason for c in reply.choices] == ["stop", "length"]
    assert (reply.prompt_tokens, reply.completion_tokens) == (12, 3)
    assert reply.fingerprint == "fp-1"


def test_token_logprobs_keep_each_tokens_alternatives() -> None:
    logprobs = {
        "content": [
            {
                "token": "7",
                "logprob": -0.1,
                "top_logprobs": [{"token": "7", "logprob": -0.1}, {"token": "8", "logprob": -2.4}],
            }
        ]
    }
    raw = body(choices=[{"index": 0, "message": {"content": "7"}, "logprobs": logprobs}])
    (choice,) = parse_reply(raw).choices
    assert choice.logprobs == [{"token": "7", "logprob": -0.1, "top": {"7": -0.1, "8": -2.4}}]


def test_missing_usage_and_null_content_read_as_zero_and_empty() -> None:
    reply = parse_reply(body(choices=[{"message": {"content": None}}]))
    assert reply.choices[0].content == ""
    assert reply.choices[0].logprobs is None
    assert (reply.prompt_tokens, reply.completion_tokens, reply.fingerprint) == (0, 0, None)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"<html>bad gateway</html>", "not JSON"),
        (b"[1, 2]", "not an object"),
        (body(), "no list of choices"),
        (body(choices=["text"]), "choice 0 is str"),
        (body(choices=[{"message": {"content": 5}}]), "content is int"),
        (body(choices=[{"index": "0", "message": {"content": "a"}}]), "not an integer"),
        (
            body(choices=[{"message": {"content": "a"}, "logprobs": {"content": [{"t": 1}]}}]),
            "logprobs are not in the OpenAI shape",
        ),
    ],
)
def test_bodies_that_are_not_completions_are_malformed(raw: bytes, words: str) -> None:
    with pytest.raises(MalformedReply, match=words):
        parse_reply(raw)
