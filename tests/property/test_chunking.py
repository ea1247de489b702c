"""Stream == complete for any chunking: the shared corpus, and outputs generated from each dialect's grammar."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaflow import ChatMessage, DeltaMessage, accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.testing import check_chunkings, feed_chunks, message_key

from .corpus import VECTORS, vector_kwargs
from .strategies import (
    CONTENT,
    ENVELOPES,
    REASONING,
    UNICODE_BLANKS,
    Generated,
    check_delta_invariants,
    chunkings,
    generated_outputs,
    think_parsers,
)

# -- the shared corpus -------------------------------------------------------------------------------


def group_key(vector: dict[str, Any]) -> str:
    """``tool_parser+reasoning_parser`` (``-`` for null), the corpus tests' parameter."""
    return f"{vector.get('tool_parser') or '-'}+{vector.get('reasoning_parser') or '-'}"


GROUPS: dict[str, list[dict[str, Any]]] = defaultdict(list)
for _v in VECTORS:
    GROUPS[group_key(_v)].append(_v)
GROUP_PARAMS: list[Any] = sorted(GROUPS) or [
    pytest.param("none", marks=pytest.mark.skip(reason="../shared/corpus is not beside this checkout"))
]


@pytest.mark.shared
@pytest.mark.parametrize("group", GROUP_PARAMS)
def test_corpus_fixed_chunkings(shared: Path, group: str) -> None:
    """Every in-scope corpus text rebuilds parse_complete whole, char by char and in five seeded random chunkings."""
    for vector in GROUPS[group]:
        try:
            check_chunkings(vector["text"], **vector_kwargs(vector))
        except AssertionError as exc:
            raise AssertionError(f"{vector['id']}: {exc}") from None


@pytest.mark.shared
@pytest.mark.parametrize("group", GROUP_PARAMS)
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corpus_any_chunking_rebuilds_complete(shared: Path, group: str, data: st.DataObject) -> None:
    """For an in-scope corpus text and any chunking, the streamed rebuild equals parse_complete."""
    vector = data.draw(st.sampled_from(GROUPS[group]), label="vector")
    kwargs = vector_kwargs(vector)
    text = vector["text"]
    chunks = data.draw(chunkings(text), label="chunks")
    want = message_key(parse_complete(text, **kwargs))
    assert message_key(accumulate(feed_chunks(chunks, **kwargs))) == want, vector["id"]


@pytest.mark.shared
def test_corpus_covers_the_generated_dialects(shared: Path) -> None:
    """The corpus has in-scope vectors for every dialect the generator covers, so its properties are not vacuous."""
    seen = {v["tool_parser"] for v in VECTORS} | {v["reasoning_parser"] for v in VECTORS}
    assert {"hermes", "internlm", "llama3_json", "qwen3", "deepseek_r1"} <= seen


# -- generated outputs -------------------------------------------------------------------------------


def test_grammar_matches_registry() -> None:
    """The generator's envelope grammars are registered tool dialects with the same markers."""
    assert set(ENVELOPES) <= set(registry.tool_dialect_names())
    for name, env in ENVELOPES.items():
        dialect = registry.get_tool_dialect(name)
        assert dialect.openers == env.openers[:1]
        assert dialect.start_openers == (("{",) if env.bare_object else ())
        if getattr(dialect, "markers", ()):
            assert dialect.markers == env.openers + ((env.close,) if env.close else ())
    assert {"qwen3", "deepseek_r1"} <= set(think_parsers())


def stream_and_complete(gen: Generated, chunks: list[str]) -> tuple[list[DeltaMessage], ChatMessage]:
    """Stream ``chunks`` (asserting the delta contract) and parse the whole text; return (deltas, complete)."""
    kwargs = gen.config.kwargs()
    deltas = feed_chunks(chunks, **kwargs)
    check_delta_invariants(deltas, gen.config.tools)
    return deltas, parse_complete(gen.text, **kwargs)


@settings(max_examples=300)
@given(gen=generated_outputs(), data=st.data())
def test_generated_any_chunking(gen: Generated, data: st.DataObject) -> None:
    """Generated (possibly mutated) outputs on any chunking: no exception, the delta contract, stream == complete."""
    chunks = data.draw(chunkings(gen.text), label="chunks")
    deltas, complete = stream_and_complete(gen, chunks)
    assert message_key(accumulate(deltas)) == message_key(complete)


@settings(max_examples=250)
@given(gen=generated_outputs(mutations=False), data=st.data())
def test_generated_well_formed_parses_as_generated(gen: Generated, data: st.DataObject) -> None:
    """A well-formed generated output parses to the generated calls, content and reasoning, on any chunking."""
    chunks = data.draw(chunkings(gen.text), label="chunks")
    deltas, complete = stream_and_complete(gen, chunks)
    want = gen.expected()
    got = message_key(complete)
    assert got[0] == want.content, "content"
    assert got[1] == want.reasoning, "reasoning_content"
    assert [(name, json.loads(args)) for _, name, args in got[2]] == [
        (name, json.loads(args)) for name, args in want.calls
    ], "tool calls"
    assert message_key(accumulate(deltas)) == got


@pytest.mark.parametrize("policy", ["always", "never", "trailing"])
@settings(max_examples=120)
@given(data=st.data())
def test_tool_calls_in_reasoning_policies(policy: str, data: st.DataObject) -> None:
    """Each ``tool_calls_in_reasoning`` policy, on any chunking: stream == complete, and the policy's calls and text.

    ``always``: a block inside reasoning is a call (reasoning -> call -> reasoning); ``never``: it is reasoning
    text; ``trailing``: a call only when nothing but blanks and blocks follow it (the default, generated above).
    """
    gen = data.draw(generated_outputs(mutations=False, in_reasoning=policy), label="output")
    chunks = data.draw(chunkings(gen.text), label="chunks")
    deltas, complete = stream_and_complete(gen, chunks)
    want = gen.expected()
    got = message_key(complete)
    assert got[0] == want.content, "content"
    assert got[1] == want.reasoning, "reasoning_content"
    assert [(name, json.loads(args)) for _, name, args in got[2]] == [
        (name, json.loads(args)) for name, args in want.calls
    ], "tool calls"
    assert message_key(accumulate(deltas)) == got


@settings(max_examples=150)
@given(gen=generated_outputs(mutations=False, offered_only=True))
def test_generated_accounting(gen: Generated) -> None:
    """Unmutated, all names offered: content + reasoning + markers + tool blocks account for the whole input."""
    # The generator partitions the input, in order, into visible text pieces, reasoning markers and
    # tool blocks. The visible pieces of each channel concatenate to exactly that channel's output,
    # the lengths add up to the input's, and an arguments object is emitted as its own source text
    # (a slice of its block), never re-serialized.
    complete = parse_complete(gen.text, **gen.config.kwargs())
    assert "".join(p.text for p in gen.pieces) == gen.text
    content = complete.content or ""
    reasoning = complete.reasoning_content or ""
    assert content == "".join(p.text for p in gen.pieces if p.kind == "text" and p.channel == CONTENT)
    assert reasoning == "".join(p.text for p in gen.pieces if p.kind == "text" and p.channel == REASONING)
    markers = sum(len(p.text) for p in gen.pieces if p.kind == "marker")
    blocks = [p for p in gen.pieces if p.kind == "block"]
    assert len(gen.text) == len(content) + len(reasoning) + markers + sum(len(b.text) for b in blocks)
    calls = [(c, b) for b in blocks for c in b.calls]
    assert len(complete.tool_calls) == len(calls)
    for got, (call, block) in zip(complete.tool_calls, calls, strict=True):
        assert got.function.name == call.name
        assert got.function.arguments == call.args
        if call.verbatim:
            assert got.function.arguments in call.raw and call.raw in block.text


BLOCKS = {
    "hermes": '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
    "internlm": '<|action_start|><|plugin|>{"name": "f", "parameters": {}}<|action_end|>',
    "llama3_json": '<|python_tag|>{"name": "f", "parameters": {}}',
}


@pytest.mark.parametrize("reasoning_parser", ["qwen3", "deepseek_r1"])
@pytest.mark.parametrize("tool_parser", sorted(BLOCKS))
@pytest.mark.parametrize("blank", ["", " ", "\n"])
def test_blank_after_think_end_between_blocks(tool_parser: str, reasoning_parser: str, blank: str) -> None:
    """``</think>`` separates two blocks: blank text on either side of it stays in its own channel (the block
    inside the reasoning, which the model closed after it, is reasoning text)."""
    block = BLOCKS[tool_parser]
    text = "r" + block + blank + "</think>\n\n" + block
    m = parse_complete(text, tool_parser=tool_parser, reasoning_parser=reasoning_parser)
    assert (m.reasoning_content, m.content, len(m.tool_calls)) == ("r" + block + blank, "\n\n", 1)
    cut = text.index("</think>") + len("</think>")
    for chunks in (list(text), [text[:cut], text[cut:]]):
        streamed = accumulate(feed_chunks(chunks, tool_parser=tool_parser, reasoning_parser=reasoning_parser))
        assert message_key(streamed) == message_key(m)


_F = ("function", "f", "{}")
_G = ("function", "g", "{}")


@pytest.mark.parametrize(
    ("chunks", "kwargs", "want"),
    [
        # A call named, then malformed before its arguments began (found by test_generated_any_chunking):
        # it is no call, and the whole block is content.
        (
            ['<tool_call>{"name": "f", ', '"arguments": [1]}</tool_call>'],
            {"tool_parser": "hermes"},
            ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', None, ()),
        ),
        (
            ['<tool_call>{"name": "f"', ', "arguments": ', "[1]}</tool_call>"],
            {"tool_parser": "hermes"},
            ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', None, ()),
        ),
        # A chunk ending in a partial <|python_tag|> at the channel start (same).
        (["<", '|python_tag|>{"name": "f"} {"name": "g"}'], {"tool_parser": "llama3_json"}, (None, None, (_F, _G))),
        # A llama3 block in reasoning, a blank, </think> (test_generated_well_formed_parses_as_generated):
        # the model closed its reasoning after the block, so the block is reasoning text.
        (
            ['<think>{"name": "f"}\n', "</think>hi"],
            {"tool_parser": "llama3_json", "reasoning_parser": "qwen3"},
            ("hi", '{"name": "f"}\n', ()),
        ),
        (
            ['<think>{"name": "f"}\n', "\n"],
            {"tool_parser": "llama3_json", "reasoning_parser": "qwen3"},
            (None, "\n\n", (_F,)),
        ),
    ],
)
def test_found_examples(chunks: list[str], kwargs: dict[str, Any], want: tuple[Any, ...]) -> None:
    """Outputs the properties once falsified parse as expected, whole, as chunked then, and char by char."""
    text = "".join(chunks)
    assert message_key(parse_complete(text, **kwargs)) == want
    assert message_key(accumulate(feed_chunks(chunks, **kwargs))) == want
    assert message_key(accumulate(feed_chunks(list(text), **kwargs))) == want


@settings(max_examples=200)
@given(
    reasoning_parser=st.sampled_from((None, "qwen3")),
    lead=st.sampled_from(("", "<think>", "</think>", "<think>r</think>", '<|python_tag|>{"name": "g"}', "hi")),
    blank=st.lists(st.sampled_from((" ", "\t", "\r", "\n", *UNICODE_BLANKS)), max_size=3).map("".join),
    data=st.data(),
)
def test_bare_object_start_rule_any_chunking(
    reasoning_parser: str | None, lead: str, blank: str, data: st.DataObject
) -> None:
    """Whether a bare ``{`` after blank text opens a llama3_json call does not depend on where the chunks end."""
    text = lead + blank + '{"name": "f", "parameters": {"a": 1}}'
    kwargs: dict[str, Any] = {"tool_parser": "llama3_json", "reasoning_parser": reasoning_parser}
    chunks = data.draw(chunkings(text), label="chunks")
    assert message_key(accumulate(feed_chunks(chunks, **kwargs))) == message_key(parse_complete(text, **kwargs))
