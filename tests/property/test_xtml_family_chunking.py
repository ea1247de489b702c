"""Stream == complete for Kimi K3 XTML (kimi_k3), over outputs built from its grammar.

Grammar (deltaflow/parsers/drivers/xtml.py)::

    output := reasoning <|close|>think<|sep|> [<|open|>response<|sep|> text <|close|>response<|sep|>]
              [<|open|>tools<|sep|> call* <|close|>tools<|sep|>] [<|close|>message<|sep|>]
    call   := <|open|>call tool="NAME" index="N"<|sep|> (arg* | json) <|close|>call<|sep|>
    arg    := <|open|>argument key="K" type="T"<|sep|> VALUE <|close|>argument<|sep|>

A well-formed output parses back to its reasoning, its response text and
its calls with the generated arguments, on every chunking.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow import accumulate, parse_complete
from deltaflow.testing import feed_chunks, message_key, random_chunks

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<|"), max_size=12)
_NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
_KEY = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_JSON = st.recursive(
    st.one_of(st.integers(-1000, 1000), st.booleans(), st.none(), _TEXT),
    lambda ch: st.one_of(st.lists(ch, max_size=3), st.dictionaries(_KEY, ch, max_size=3)),
    max_leaves=5,
)


def _typ(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "object" if isinstance(v, dict) else "array"


@st.composite
def k3_call(draw: st.DrawFn, index: int) -> tuple[str, str, dict[str, Any]]:
    """One call: its text, its name and its arguments."""
    name = draw(_NAME)
    args = draw(st.dictionaries(_KEY, _JSON, max_size=3))
    if args and draw(st.booleans()):
        body = '<|open|>json type="object"<|sep|>' + json.dumps(args) + "<|close|>json<|sep|>"
    else:
        body = "".join(
            f'<|open|>argument key="{k}" type="{_typ(v)}"<|sep|>'
            + (v if isinstance(v, str) else json.dumps(v)) + "<|close|>argument<|sep|>"
            for k, v in args.items()
        )
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{body}<|close|>call<|sep|>', name, args


@st.composite
def k3_output(draw: st.DrawFn) -> tuple[str, str, str, list[tuple[str, dict[str, Any]]]]:
    """A K3 output with its expected reasoning, content and calls."""
    reasoning = draw(_TEXT.filter(lambda t: t.strip() != ""))
    content = draw(_TEXT)
    text = reasoning + "<|close|>think<|sep|>"
    if content or draw(st.booleans()):
        text += "<|open|>response<|sep|>" + content + "<|close|>response<|sep|>"
    n = draw(st.integers(0, 3))
    found = [draw(k3_call(i + 1)) for i in range(n)]
    if found:
        text += "<|open|>tools<|sep|>" + "".join(c[0] for c in found) + "<|close|>tools<|sep|>"
    if draw(st.booleans()):
        text += "<|close|>message<|sep|>"
    return text, reasoning, content, [(c[1], c[2]) for c in found]


@settings(max_examples=150, deadline=None)
@given(k3_output(), st.integers(0, 2**16))
def test_kimi_k3_stream_equals_complete_and_round_trips(out: tuple[str, str, str, list[Any]], seed: int) -> None:
    """Random chunkings rebuild parse_complete, and a well-formed output parses back to what was generated."""
    text, reasoning, content, want = out
    kwargs: dict[str, Any] = {"tool_parser": "kimi_k3", "reasoning_parser": "kimi_k3"}
    full = parse_complete(text, **kwargs)
    for chunks in (random_chunks(text, seed), list(text)):
        assert message_key(accumulate(feed_chunks(chunks, **kwargs))) == message_key(full)
    assert (full.reasoning_content or "") == reasoning
    assert (full.content or "") == content
    got = [(c.function.name, json.loads(c.function.arguments)) for c in full.tool_calls]
    assert all(isinstance(a, dict) for _, a in got)
    assert got == want
