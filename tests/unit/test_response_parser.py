"""ResponseParser / parse_complete: the top-level machine (plain, reasoning, tool) on any chunking."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from deltaflow import DeltaMessage, ResponseParser, StateError, accumulate, parse_complete
from deltaflow.stages.tool_feeder import THOUGHT_GROUP_MAX
from deltaflow.testing import check_chunkings, feed_chunks, load_tokenizer, message_key, random_chunks

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def call(name: str, args: str = "{}", field_name: str = "arguments") -> str:
    """A hermes tool block."""
    return f'<tool_call>\n{{"name": "{name}", "{field_name}": {args}}}\n</tool_call>'


def kinds(deltas: list[DeltaMessage]) -> list[str]:
    """The kinds of the deltas ("content", "reasoning", "tool"), runs of one kind collapsed."""
    out: list[str] = []
    for d in deltas:
        for kind, present in (("reasoning", d.reasoning_content), ("tool", d.tool_calls), ("content", d.content)):
            if present and (not out or out[-1] != kind):
                out.append(kind)
    return out


@dataclass(frozen=True)
class Scenario:
    """An output, parser options, and the complete message it must give."""

    label: str
    text: str
    content: str | None
    reasoning: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=lambda: {"tool_parser": "hermes", "reasoning_parser": "qwen3"})


HQ_NO_THINK: dict[str, Any] = {"tool_parser": "hermes"}
HQ_TOOLS: dict[str, Any] = {"tool_parser": "hermes", "reasoning_parser": "qwen3", "tools": TOOLS}

SCENARIOS = [
    Scenario("plain text", "Hello, world!", "Hello, world!", options=HQ_NO_THINK),
    Scenario("reasoning then content", "<think>why</think>answer", "answer", "why"),
    Scenario("one call", call("f", '{"a": 1}'), None, calls=[("f", '{"a": 1}')], options=HQ_NO_THINK),
    Scenario(
        "reasoning, content and a call in one response",
        "<think>hmm</think>\n\nLet me check." + call("get_weather", '{"city": "Paris"}'),
        "\n\nLet me check.",
        "hmm",
        [("get_weather", '{"city": "Paris"}')],
    ),
    Scenario("no-argument call", '<tool_call>{"name": "now"}</tool_call>', None, calls=[("now", "{}")],
             options=HQ_NO_THINK),
    Scenario(
        "several sequential calls",
        call("a", '{"n": 1}') + "\n" + call("b") + "\n\n" + call("c", '{"n": [3]}'),
        None,
        calls=[("a", '{"n": 1}'), ("b", "{}"), ("c", '{"n": [3]}')],
        options=HQ_NO_THINK,
    ),
    Scenario("content after a call keeps its newline", "x" + call("f") + "\nafter", "x\nafter", calls=[("f", "{}")],
             options=HQ_NO_THINK),
    Scenario("trailing newlines after the last call stay", call("f") + "\n\n", "\n\n", calls=[("f", "{}")],
             options=HQ_NO_THINK),
    Scenario("unknown name with tools is content", "hi " + call("other"), "hi " + call("other"),
             options=HQ_TOOLS | {"reasoning_parser": None}),
    Scenario(
        "block inside reasoning followed by more reasoning is reasoning text",
        "<think>r1" + call("get_weather") + "r2</think>done",
        "done",
        "r1" + call("get_weather") + "r2",
    ),
    Scenario(
        "block inside reasoning followed by </think> is reasoning text",
        "r1" + call("get_weather") + "\n</think>\n\nanswer",
        "\n\nanswer",
        "r1" + call("get_weather") + "\n",
    ),
    Scenario(
        "block right before </think> at the end is reasoning text",
        "r1" + call("get_weather") + "</think>",
        None,
        "r1" + call("get_weather"),
    ),
    Scenario(
        "two blocks inside reasoning followed by reasoning are reasoning text",
        "r1" + call("get_weather", '{"n": 1}') + "\n" + call("get_weather", '{"n": 2}') + "\nr2</think>c",
        "c",
        "r1" + call("get_weather", '{"n": 1}') + "\n" + call("get_weather", '{"n": 2}') + "\nr2",
    ),
    Scenario(
        "calls ending unclosed reasoning are calls",
        "r1" + call("get_weather", '{"n": 1}') + "\n" + call("get_weather", '{"n": 2}') + "\n",
        None,
        "r1\n",
        [("get_weather", '{"n": 1}'), ("get_weather", '{"n": 2}')],
    ),
    Scenario(
        "a thought block does not take a call number",
        "r1" + call("get_weather", '{"n": 1}') + " r2</think>" + call("get_weather", '{"n": 2}'),
        None,
        "r1" + call("get_weather", '{"n": 1}') + " r2",
        [("get_weather", '{"n": 2}')],
    ),
    Scenario(
        "filtered call inside reasoning stays reasoning",
        "r1" + call("nope") + "r2</think>c",
        "c",
        "r1" + call("nope") + "r2",
        options=HQ_TOOLS,
    ),
    Scenario(
        "allowed and filtered calls ending unclosed reasoning",
        "r1" + call("get_weather") + "\n" + call("nope") + "\n" + call("get_weather", '{"k": 1}'),
        None,
        "r1\n" + call("nope"),
        [("get_weather", "{}"), ("get_weather", '{"k": 1}')],
        options=HQ_TOOLS,
    ),
    Scenario(
        "block inside reasoning that never closes, more reasoning after it",
        "thinking " + call("get_weather", '{"x": "y"}') + " still thinking",
        None,
        "thinking " + call("get_weather", '{"x": "y"}') + " still thinking",
    ),
    Scenario(
        "call cut short inside never-closed reasoning",
        "thinking " + '<tool_call>{"name": "get_weather", "arguments": {"x": "y',
        None,
        "thinking ",
        [("get_weather", '{"x": "y"}')],
    ),
    Scenario(
        "call right after </think>",
        "r</think>" + call("f"),
        None,
        "r",
        [("f", "{}")],
    ),
    Scenario("held partial opener is released at the end", "a <tool_ca", "a <tool_ca", options=HQ_NO_THINK),
    Scenario("held partial end marker is released at the end", "abc</thi", None, "abc</thi"),
    Scenario("lone < at the end", "x <", "x <", options=HQ_NO_THINK),
    Scenario("enable_thinking=False: tags are content", "<think>r</think>" + call("f"), "<think>r</think>",
             calls=[("f", "{}")],
             options={"tool_parser": "hermes", "reasoning_parser": "qwen3", "enable_thinking": False}),
    Scenario("empty output", "", None),
]


@pytest.mark.parametrize("case", SCENARIOS, ids=[s.label for s in SCENARIOS])
def test_scenario(case: Scenario) -> None:
    """The complete message is right, and whole, per-character and random chunkings all rebuild it."""
    m = check_chunkings(case.text, **case.options)
    assert m.content == case.content
    assert m.reasoning_content == case.reasoning
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls
    assert all(c.type == "function" and c.id.startswith("call_") for c in m.tool_calls)


@pytest.mark.parametrize("chunks", ["whole", "chars"])
def test_tool_inside_reasoning_keeps_real_channel_order(chunks: str) -> None:
    """Streamed deltas keep the model's order: a thought block stays in place in the reasoning; calls that end
    unclosed reasoning come after the reasoning before them."""
    thought = "<think>first" + call("f", '{"a": 1}') + "second</think>answer"
    pieces = [thought] if chunks == "whole" else list(thought)
    deltas = feed_chunks(pieces, tool_parser="hermes", reasoning_parser="qwen3")
    assert kinds(deltas) == ["reasoning", "content"]
    assert accumulate(deltas).reasoning_content == "first" + call("f", '{"a": 1}') + "second"
    real = "first" + call("f", '{"a": 1}') + "\n" + call("g")
    pieces = [real] if chunks == "whole" else list(real)
    deltas = feed_chunks(pieces, tool_parser="hermes", reasoning_parser="qwen3")
    assert kinds(deltas) == ["reasoning", "tool"]
    m = accumulate(deltas)
    assert (m.reasoning_content, [c.function.name for c in m.tool_calls]) == ("first", ["f", "g"])


@pytest.mark.parametrize("chunks", ["whole", "chars", "random"])
def test_tool_markers_and_payload_only_in_tool_deltas(chunks: str) -> None:
    """The markers and payload of a tool block appear only in tool-call deltas, never in text."""
    for text, want in (
        ("<think>r</think>c " + call("f", '{"q": "v"}') + " c " + call("g", '{"w": 2}') + " c", ("r", "c  c  c")),
        ("<think>r " + call("f", '{"q": "v"}') + call("g", '{"w": 2}'), ("r ", None)),
    ):
        pieces = {"whole": [text], "chars": list(text), "random": random_chunks(text, 3)}[chunks]
        deltas = feed_chunks(pieces, tool_parser="hermes", reasoning_parser="qwen3")
        visible = "".join((d.content or "") + (d.reasoning_content or "") for d in deltas)
        for fragment in ("<tool_call>", "</tool_call>", '"name"', '"q"', '"w"', "{", "}"):
            assert fragment not in visible
        m = accumulate(deltas)
        assert (m.reasoning_content, m.content) == want
        assert [c.function.name for c in m.tool_calls] == ["f", "g"]


@pytest.mark.parametrize("chunks", ["whole", "chars", "random"])
def test_first_delta_of_each_call_has_id_type_and_name(chunks: str) -> None:
    """The first delta of each call carries id, type and name; later ones only the index and arguments."""
    text = (call("a", '{"x": [1, 2, 3], "y": "long text"}') + call("b")
            + '<tool_call>{"arguments": {"z": 1}, "name": "c"}</tool_call>')
    pieces = {"whole": [text], "chars": list(text), "random": random_chunks(text, 7)}[chunks]
    deltas = feed_chunks(pieces, tool_parser="hermes")
    seen: set[int] = set()
    for tc in (tc for d in deltas for tc in d.tool_calls):
        if tc.index not in seen:
            seen.add(tc.index)
            assert tc.id and tc.type == "function" and tc.function.name, tc
        else:
            assert tc.id is None and tc.type is None and tc.function.name is None, tc
    assert seen == {0, 1, 2}
    m = accumulate(deltas)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [
        ("a", '{"x": [1, 2, 3], "y": "long text"}'), ("b", "{}"), ("c", '{"z": 1}')
    ]
    assert len({c.id for c in m.tool_calls}) == 3


def test_whole_response_in_one_chunk_with_final() -> None:
    """A whole response given as one final chunk gives every part, in order."""
    text = "<think>r</think>c" + call("f", '{"a": 1}')
    deltas = ResponseParser("hermes", "qwen3").feed(text, final=True)
    assert kinds(deltas) == ["reasoning", "content", "tool"]
    complete = parse_complete(text, tool_parser="hermes", reasoning_parser="qwen3")
    assert message_key(accumulate(deltas)) == message_key(complete)


def test_text_is_released_as_soon_as_it_is_stable() -> None:
    """Plain text, reasoning and call names are emitted in the feed that makes them stable."""
    p = ResponseParser("hermes", "qwen3")
    assert [d.reasoning_content for d in p.feed("<think>abc")] == ["abc"]
    assert [d.content for d in p.feed("</think>hello")] == ["hello"]
    named = p.feed('<tool_call>{"name": "f", "arguments": {"city": "Pa')
    assert [tc.function.name for d in named for tc in d.tool_calls] == ["f"]
    assert "".join(tc.function.arguments or "" for d in named for tc in d.tool_calls) == '{"city": "Pa'


@dataclass(frozen=True)
class Finish:
    """A final feed's finish_reason and what the last delta must carry."""

    label: str
    text: str
    given: str
    expected: str
    tools: list[dict[str, Any]] | None = None


FINISHES = [
    Finish("stop without calls", "hello", "stop", "stop"),
    Finish("stop with a call", call("get_weather"), "stop", "tool_calls"),
    Finish("stop with a filtered call", call("nope"), "stop", "stop", TOOLS),
    Finish("length is kept", call("get_weather"), "length", "length"),
    Finish("empty output", "", "stop", "stop"),
]


@pytest.mark.parametrize("case", FINISHES, ids=[f.label for f in FINISHES])
def test_finish_reason_on_the_last_delta(case: Finish) -> None:
    """feed("", final=True, finish_reason=...) puts the reason on the last delta ("tool_calls" after a call)."""
    p = ResponseParser("hermes", tools=case.tools)
    deltas = p.feed(case.text)
    last = p.feed("", final=True, finish_reason=case.given)
    assert last and last[-1].finish_reason == case.expected
    assert all(d.finish_reason is None for d in deltas + last[:-1])


def test_tool_calls_emitted_counts_accepted_calls() -> None:
    """``tool_calls_emitted`` counts only calls that were emitted."""
    p = ResponseParser("hermes", tools=TOOLS)
    p.feed(call("get_weather") + call("nope") + call("get_weather"), final=True)
    assert p.tool_calls_emitted == 2


def test_id_factory_makes_the_ids() -> None:
    """Call ids come from ``id_factory``."""
    counter = itertools.count()
    m = parse_complete(call("a") + call("b"), tool_parser="hermes", id_factory=lambda: f"id-{next(counter)}")
    assert [c.id for c in m.tool_calls] == ["id-0", "id-1"]


def test_feed_after_final_raises() -> None:
    """Feeding after final=True is a StateError."""
    p = ResponseParser("hermes")
    p.feed("", final=True)
    with pytest.raises(StateError):
        p.feed("x")


def test_bad_arguments() -> None:
    """Bad constructor or feed arguments are rejected with messages naming what is accepted."""
    with pytest.raises(ValueError, match="'any' or 'tokens'"):
        ResponseParser("hermes", chunking="bytes")
    with pytest.raises(TypeError, match="enable_thinking must be a bool or None"):
        ResponseParser("hermes", enable_thinking="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a str"):
        ResponseParser("hermes").feed(b"bytes")  # type: ignore[arg-type]


# -- chunking="tokens" ----------------------------------------------------------------------


@pytest.mark.parametrize("chunking", ["any", "tokens"])
def test_partial_marker_hold_back_by_mode(chunking: str) -> None:
    """"tokens" releases "a <" at once for hermes+qwen3 ("<tool_call>" is one token); "any" holds the "<"."""
    p = ResponseParser("hermes", "qwen3", chunking=chunking)
    p.feed("r</think>")
    first = "".join(d.content or "" for d in p.feed("a <"))
    second = "".join(d.content or "" for d in p.feed("b"))
    if chunking == "tokens":
        assert (first, second) == ("a <", "b")
    else:
        assert (first, second) == ("a ", "<b")


TOKEN_ALIGNED = [
    "<think>", "\n", "The", " user", " wants", " Paris", ".\n", "</think>", "\n\n", "Sure", " <", "3",
    "\n", "<tool_call>", "\n", '{"', "name", '":', ' "', "get", "_weather", '",', ' "', "arguments", '":',
    ' {"', "city", '":', ' "', "Paris", '"}}', "\n", "</tool_call>", "\n", "<tool_call>", "\n", '{"', "name",
    '":', ' "', "other", '"}', "\n", "</tool_call>",
]


def test_tokens_and_any_agree_on_token_aligned_input() -> None:
    """On token-aligned chunks, chunking="tokens" and "any" give the same message."""
    opts: dict[str, Any] = {"tool_parser": "hermes", "reasoning_parser": "qwen3", "tools": TOOLS}
    a = accumulate(feed_chunks(TOKEN_ALIGNED, chunking="any", **opts))
    t = accumulate(feed_chunks(TOKEN_ALIGNED, chunking="tokens", **opts))
    assert message_key(a) == message_key(t) == message_key(parse_complete("".join(TOKEN_ALIGNED), **opts))
    assert [c.function.name for c in a.tool_calls] == ["get_weather"]
    assert a.content is not None and a.content.startswith("\n\nSure <3\n") and '"other"' in a.content


@pytest.mark.shared
def test_tokens_mode_on_real_qwen3_tokens(shared: object) -> None:
    """On the real Qwen3 tokenization of an output, "tokens" and "any" agree."""
    tok = load_tokenizer("qwen3")
    if tok is None:
        pytest.skip("shared/tokenizers/qwen3 is absent")
    text = (
        "<think>\nCompare a <b and x</th in text.\n</think>\n\nOK <\n"
        + call("get_weather", '{"city": "東京", "n": 1.5e3}')
        + "\n"
        + call("get_weather", '{"city": "Paris"}')
    )
    offsets = tok.encode(text, add_special_tokens=False).offsets
    chunks = [text[a:b] for a, b in offsets]
    assert "".join(chunks) == text
    opts: dict[str, Any] = {"tool_parser": "hermes", "reasoning_parser": "qwen3"}
    a = accumulate(feed_chunks(chunks, chunking="any", **opts))
    t = accumulate(feed_chunks(chunks, chunking="tokens", **opts))
    assert message_key(a) == message_key(t) == message_key(parse_complete(text, **opts))
    assert len(a.tool_calls) == 2


@pytest.mark.parametrize("blank", ["", " "], ids=["tight", "spaced"])
def test_blank_content_between_a_reasoning_block_and_a_content_block(blank: str) -> None:
    """Content newlines after </think> stay content before a content block, whether or not reasoning ended with a blank
    (the block inside the reasoning was only thought: it stays reasoning text)."""
    text = "r" + call("f") + blank + "</think>\n\n" + call("g")
    m = check_chunkings(text, tool_parser="hermes", reasoning_parser="qwen3")
    assert m.content == "\n\n"
    assert m.reasoning_content == "r" + call("f") + blank
    assert [c.function.name for c in m.tool_calls] == ["g"]


def _block_of_length(n: int) -> str:
    """A hermes block of exactly ``n`` characters (one string argument padded to fit)."""
    bare = call("get_weather", '{"q": ""}')
    block = call("get_weather", '{"q": "' + "x" * (n - len(bare)) + '"}')
    assert len(block) == n
    return block


@pytest.mark.parametrize(("extra", "is_call"), [(0, False), (1, True)], ids=["at the limit", "over the limit"])
def test_a_long_block_inside_reasoning_is_a_call(extra: int, is_call: bool) -> None:
    """Tentative blocks inside reasoning are held up to THOUGHT_GROUP_MAX characters; a longer group is a call
    even when the model goes on thinking, so memory stays bounded and a long call streams."""
    block = _block_of_length(THOUGHT_GROUP_MAX + extra)
    text = "r " + block + " more</think>done"
    m = check_chunkings(text, tool_parser="hermes", reasoning_parser="qwen3", seeds=range(2))
    assert m.content == "done"
    if is_call:
        assert (m.reasoning_content, [c.function.name for c in m.tool_calls]) == ("r  more", ["get_weather"])
    else:
        assert (m.reasoning_content, m.tool_calls) == ("r " + block + " more", [])


def test_a_long_call_inside_reasoning_streams_after_the_limit() -> None:
    """Past the limit the call's name and arguments are emitted before its block ends."""
    block = _block_of_length(3 * THOUGHT_GROUP_MAX)
    p = ResponseParser("hermes", "qwen3")
    deltas = p.feed("r " + block[: 2 * THOUGHT_GROUP_MAX])
    names = [tc.function.name for d in deltas for tc in d.tool_calls if tc.function.name]
    assert names == ["get_weather"]
    assert sum(len(tc.function.arguments or "") for d in deltas for tc in d.tool_calls) > THOUGHT_GROUP_MAX
