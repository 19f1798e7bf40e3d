"""A render cannot build a huge value in one step, nor a great many large ones (issue 35,
item 8): every operation that could measures what it would build before building it
(orchestrator/graph/budget.py, growth.py). The issue's own reproducers are in the hostile
graph corpus (test_hostile_graphs.py::RENDER_CASES); these are the other ways in, and the
same operations used as prompts use them, which must render exactly as before."""

from __future__ import annotations

import json
import random
import time
import tracemalloc
from typing import Any

import pytest

import orchestrator as orc
from orchestrator.graph.budget import MAX_RENDER_CHARS, text_size
from orchestrator.graph.templates import Prompt, make_environment

pytestmark = pytest.mark.reliability

JUDGE: dict[str, Any] = {"kind": "llm", "prompt": "judge.jinja", "output": {"score": "integer"}}
COUNT = 3_000_000_000


def judge_spec(**top: Any) -> dict[str, Any]:
    return {
        "name": "budget",
        "inputs": ["text"],
        "params": {"count": COUNT, "width": 1_000_000},
        "nodes": {"judge": JUDGE},
        "outputs": {"score": "judge.score"},
        **top,
    }


S = "{% set s = 'x' * 1000000 %}"  # one long string, within every bound
T = S + "{% set t = s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s %}"  # the largest value allowed

# Each would build gigabytes (or work for hours) in one operation, or hold far more than
# any prompt needs across a few; each is refused before that, naming the node.
HUGE = {
    "replace with an empty pattern": S + "{{ s | replace('', 'y' * 1000) }}",
    "str.replace": S + "{{ s.replace('x', 'y' * 1000) }}",
    "str.translate": S + "{{ s.translate({120: 'y' * 1000}) }}",
    "indent by a width from params": "{{ ('a\n' * 1000) | indent(params.width) }}",
    "wordwrap with a long wrapstring": (
        "{{ ('a ' * 100000) | wordwrap(1, wrapstring='x' * 10000) }}"
    ),
    "batch filled to a count from params": "{{ [1] | batch(params.count, 0) | list }}",
    "slice into a count from params": "{{ [1] | slice(params.count) | list }}",
    "lipsum of a million paragraphs": "{{ lipsum(1000000) }}",
    "ljust to a width from params": "{{ text.ljust(params.count) }}",
    "zfill to a width from params": "{{ '1'.zfill(params.count) }}",
    "expandtabs": "{{ ('\t' * 1000).expandtabs(1000000) }}",
    "int.to_bytes": "{{ (1).to_bytes(params.count, 'big') | length }}",
    "% printing one value many times": S + "{{ ('%(a)s' * 1000) % {'a': s} }}",
    "the format filter": S + "{{ ('%s' * 1000) | format(*([s] * 1000)) }}",
    "str.format repeating a field": S + "{{ ('{0}' * 1000).format(s) }}",
    "str.format_map with !r": S + "{{ '{a!r}'.format_map({'a': [s] * 1000}) }}",
    "~ with a list holding a long string": S + "{{ text ~ ([s] * 1000) }}",
    "bytes % printing one value many times": (
        S + "{{ ((('%b' * 1000).encode()) % ((s.encode(),) * 1000)) | length }}"
    ),
    "% with a list holding a long string": S + "{{ '%s' % ([s] * 1000,) }}",
    "tojson with a huge indent": "{{ [[1]] | tojson(indent=params.count) }}",
    "tojson of a list holding a long string": S + "{{ ([s] * 1000) | tojson }}",
    "pprint of a list holding a long string": S + "{{ ([s] * 100) | pprint }}",
    "string of a list holding a long string": S + "{{ ([s] * 1000) | string }}",
    "str.join over a list": S + "{{ ''.join([s] * 1000) }}",
    "str.join over a generator": S + "{{ ''.join(([s] * 1000) | map('string')) }}",
    "urlize with a long target": S + "{{ ('http://a.bc ' * 10000) | urlize(target=s) }}",
    "a set block printing a long string 1000 times": (
        S + "{% set b %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endset %}{{ b | length }}"
    ),
    "sum of 100,000 one-item lists": "{{ (('x' * 100000) | batch(1) | list) | sum(start=[]) }}",
    "printing lists nested by sharing": (
        S + "{% set a = [s, s] %}" + "".join("{% set a = [a, a] %}" for _ in range(10)) + "{{ a }}"
    ),
    "slices of a 10M string kept under ten names": (
        T + "".join(f"{{% set a{i} = t[1:] %}}" for i in range(10)) + "{{ a9 | length }}"
    ),
    "copies of a 10M string kept under ten names": (
        T + "".join(f"{{% set u{i} = t.upper() %}}" for i in range(10)) + "{{ u9 | length }}"
    ),
}


@pytest.mark.parametrize("template", list(HUGE.values()), ids=list(HUGE))
def test_a_render_that_would_build_too_much_is_refused_first(template: str) -> None:
    graph = orc.graph_from_dict(judge_spec(), {"judge.jinja": template})
    transport = orc.FakeTransport()
    started = time.monotonic()
    tracemalloc.start()
    try:
        result = orc.run(graph, [{"id": "a", "text": "x"}], transport=transport)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.monotonic() - started
    (line,) = result.results
    assert line.status == "failed" and line.error is not None
    assert line.error.startswith("node 'judge': rendering the prompt failed: "), line.error
    # Refused for what it *would* build, not measured after building it (before the fix,
    # `a value of over 10,000,000 …` came after a gigabyte, or never).
    assert " would " in line.error and "limit" in line.error, line.error
    assert peak < 150_000_000, f"{peak:,} bytes"  # the values allowed, no more
    assert took < 10, took  # generous: the refusal comes before the value is built
    assert transport.node_requests == []


# The same operations as a prompt uses them: exactly what Jinja renders.
NORMAL = {
    "{{ '%s and %s' % (a, b) }}|{{ '%(a)s-%(a)s' % {'a': a} }}|{{ '%5d|%-4s' % (3, 'x') }}": (
        "hello and world|hello-hello|    3|x   "
    ),
    "{{ '{} {}'.format(a, b) }}|{{ '{:>5}|{:.2f}|{:05d}|{!r}'.format(3, 1.5, 7, l) }}": (
        "hello world|    3|1.50|00007|['x', 'y', 'z']"
    ),
    "{{ '{a}-{b[0]}'.format_map({'a': 1, 'b': l}) }}|{{ ('<{}>' | safe).format('&') }}": (
        "1-x|<&amp;>"
    ),
    "{{ a | center(11) }}|{{ l | join(', ') }}|{{ dl | join('+', attribute='t') }}": (
        "   hello   |x, y, z|p+q"
    ),
    "{{ s | replace('a', 'bb') }}|{{ s | replace('', '-') }}|{{ s | replace('a', '', 1) }}": (
        "bbbbb|-a-b-a-|ba"
    ),
    "{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent('> ', true) }}": "a\n  b|> a\n> b",
    "{{ 'the quick brown fox' | wordwrap(9, wrapstring='/') }}": "the quick/brown fox",
    "{{ [1, 2] | sum }}{{ [[1], [2]] | sum(start=[]) }}{{ dl | sum(attribute='n') }}": "3[1, 2]3",
    "{{ l | batch(2, 0) | list }}{{ l | slice(2) | list }}": (
        "[['x', 'y'], ['z', 0]][['x', 'y'], ['z']]"
    ),
    "{{ d | tojson }}|{{ d | tojson(1) }}|{{ d | string }}|{{ d | pprint }}": (
        '{"k": "v", "n": [1]}|{\n "k": "v",\n "n": [\n  1\n ]\n}|'
        "{'k': 'v', 'n': [1]}|{'k': 'v', 'n': [1]}"
    ),
    "{{ s[1:] }}{{ l[::-1] }}{{ ','.join(l) }}{{ ','.join(l | map('upper')) }}": (
        "ba['z', 'y', 'x']x,y,zX,Y,Z"
    ),
    "{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(1) }}{% set b %}B{{ a }}{% endset %}{{ b }}": (
        "<1>Bhello"
    ),
    "{{ 'a'.ljust(3) }}|{{ '7'.zfill(3) }}|{{ 'a\tb'.expandtabs(2) }}|"
    "{{ s.translate({97: 'A'}) }}": ("a  |007|a b|AbA"),
    "{{ a ~ 1 ~ l }}{{ l }}{{ 3 }}{{ none }}{{ l + l }}{{ 'ab' * 2 }}{{ 7 * 6 }}{{ 2 ** 10 }}": (
        "hello1['x', 'y', 'z']['x', 'y', 'z']3None['x', 'y', 'z', 'x', 'y', 'z']abab421024"
    ),
    "{{ 'see http://x.org' | urlize }}{{ (1).to_bytes(2, 'big') | length }}": (
        'see <a href="http://x.org" rel="noopener">http://x.org</a>2'
    ),
}
CONTEXT = {
    "a": "hello",
    "b": "world",
    "s": "aba",
    "l": ["x", "y", "z"],
    "dl": [{"t": "p", "n": 1}, {"t": "q", "n": 2}],
    "d": {"k": "v", "n": [1]},
}


@pytest.mark.parametrize("template", list(NORMAL), ids=range(len(NORMAL)))
def test_bounded_operations_render_as_jinja_does(template: str) -> None:
    env = make_environment(None, {})
    assert Prompt(env.from_string(template), set(CONTEXT)).render(CONTEXT) == NORMAL[template]


def test_a_long_prompt_with_a_few_filters_stays_within_the_budget() -> None:
    """A 4 MB text through a few filters, printed twice: within every bound, so it
    renders."""
    env = make_environment(None, {})
    source = "{{ text | trim | replace('\r', '') | truncate(4000000, end='') }}\n{{ text }}"
    text = "word " * 800_000
    out = Prompt(env.from_string(source), {"text"}).render({"text": text})
    assert len(out) == 2 * len(text.strip()) + 1 + 1


def test_an_expression_is_held_to_the_one_value_bound_for_widths() -> None:
    """A graph's `when` is no render, but a width from params is refused there too."""
    spec = judge_spec(
        nodes={"judge": {**JUDGE, "when": "(text | center(params.count)) != ''"}},
        outputs={"score": "judge.score if judge is not none else none"},
    )
    graph = orc.graph_from_dict(spec, {"judge.jinja": "{{ text }}"})
    transport = orc.FakeTransport()
    result = orc.run(graph, [{"id": "a", "text": "x"}], transport=transport)
    (line,) = result.results
    assert line.status == "failed" and "center filter would build" in (line.error or "")
    assert transport.node_requests == []


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return "".join(rng.choice("ab'\"\\\n\té€") for _ in range(rng.randrange(12)))
    if kind == 1:
        return rng.randrange(-(10**12), 10**12)
    if kind == 2:
        return rng.choice([None, True, False, 1.5, -0.25, 1e300])
    if kind == 3:
        return rng.random()
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    if kind == 5:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(4)))
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


def test_text_size_is_a_lower_bound_of_the_printed_text() -> None:
    """What makes a refusal honest: the estimate never exceeds what str() or tojson would
    really make, so nothing within the bounds is refused (2,000 seeded random values)."""
    rng = random.Random(8)
    for _ in range(2000):
        value = _random_value(rng)
        assert text_size(value) <= len(str(value)), value
        for indent in (None, 0, 2):
            dumped = json.dumps(value, ensure_ascii=False, indent=indent)
            assert text_size(value, indent or 0) <= len(dumped), (value, indent)


def test_text_size_of_a_shared_list_stops_just_past_the_bound() -> None:
    s = "x" * 1_000_000
    nested: Any = [s]
    for _ in range(60):  # 2**60 copies of s when printed
        nested = [nested, nested]
    started = time.monotonic()
    assert text_size(nested) > MAX_RENDER_CHARS
    assert time.monotonic() - started < 1
