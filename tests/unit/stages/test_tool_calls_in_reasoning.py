"""The ``tool_calls_in_reasoning`` policy: what a tool block inside reasoning is."""

from __future__ import annotations

import anyio
import pytest

import deltaflow
from deltaflow import ResponseParser, parse_complete
from deltaflow.testing import check_chunkings

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
MID = f"<think>Let me check. {CALL} Then answer.</think>Done."
TRAILING = f"<think>Let me check. {CALL}\n"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
KW = {"tool_parser": "hermes", "reasoning_parser": "qwen3"}


def calls(m: deltaflow.ChatMessage) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in m.tool_calls]


@pytest.mark.parametrize(
    ("policy", "text", "want_calls", "reasoning"),
    [
        ("trailing", MID, [], f"Let me check. {CALL} Then answer."),
        ("trailing", TRAILING, [("get_weather", '{"city": "Paris"}')], "Let me check. \n"),
        ("always", MID, [("get_weather", '{"city": "Paris"}')], "Let me check.  Then answer."),
        ("always", TRAILING, [("get_weather", '{"city": "Paris"}')], "Let me check. \n"),
        ("never", MID, [], f"Let me check. {CALL} Then answer."),
        ("never", TRAILING, [], f"Let me check. {CALL}\n"),
    ],
)
def test_policies(policy: str, text: str, want_calls: list[tuple[str, str]], reasoning: str) -> None:
    """Each policy on every chunking: its calls and its reasoning text (content is unaffected)."""
    m = check_chunkings(text, tools=TOOLS, tool_calls_in_reasoning=policy, **KW)
    assert calls(m) == want_calls
    assert m.reasoning_content == reasoning
    assert m.content == ("Done." if text is MID else None)


# </think> comes inside an open block, in the middle of a string value (before the fix, "Done." went into
# that value: {"city": "ParDone."}).
OPEN_AT_END = '<think>Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Par</think>Done.'


@pytest.mark.parametrize(
    ("policy", "want_calls", "reasoning"),
    [
        ("trailing", [], OPEN_AT_END[7 : OPEN_AT_END.index("</think>")]),
        ("always", [("get_weather", '{"city": "Par"}')], "Let me check. "),
        ("never", [], OPEN_AT_END[7 : OPEN_AT_END.index("</think>")]),
    ],
)
def test_the_end_of_reasoning_ends_an_open_block(policy: str, want_calls: list[tuple[str, str]], reasoning: str) -> None:
    """</think> inside an open block ends the block there, as the end of the output would; the rest is content."""
    m = check_chunkings(OPEN_AT_END, tools=TOOLS, tool_calls_in_reasoning=policy, **KW)
    assert calls(m) == want_calls
    assert m.reasoning_content == reasoning
    assert m.content == "Done."


def test_always_streams_in_the_models_order() -> None:
    """With "always" the call streams before the reasoning that follows it, as soon as it is stable."""
    p = ResponseParser(tools=TOOLS, tool_calls_in_reasoning="always", **KW)
    kinds = []
    end = MID.index("</tool_call>") + len("</tool_call>")
    for i, chunk in enumerate((MID[:30], MID[30:60], MID[60:end], MID[end:])):
        for d in p.feed(chunk):
            kinds += ["reasoning"] * bool(d.reasoning_content) + ["call"] * bool(d.tool_calls)
            kinds += ["content"] * bool(d.content)
        if i == 2:
            assert "call" in kinds  # streamed at the block's end, before what follows it is known
    kinds += ["content"] * any(d.content for d in p.feed("", final=True))
    collapsed = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert collapsed == ["reasoning", "call", "reasoning", "content"]


def test_always_surfaces_a_call_not_offered_as_reasoning() -> None:
    """A block inside reasoning naming a tool that was not offered is reasoning text, never a call."""
    other = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    m = check_chunkings(MID, tools=other, tool_calls_in_reasoning="always", **KW)
    assert m.tool_calls == []
    assert m.reasoning_content == f"Let me check. {CALL} Then answer."


def test_an_unknown_policy_is_a_clear_error() -> None:
    """The error names the option and what it accepts."""
    with pytest.raises(ValueError, match="tool_calls_in_reasoning must be one of 'trailing', 'always', 'never'"):
        parse_complete("x", tool_calls_in_reasoning="sometimes", **KW)


def test_stream_and_pipeline_take_the_policy() -> None:
    """The async pipeline honours the option like the sync parser."""

    async def main() -> list[str]:
        async def source():  # type: ignore[no-untyped-def]
            for i in range(0, len(MID), 7):
                yield MID[i : i + 7]

        names = []
        async with deltaflow.stream(source(), tools=TOOLS, tool_calls_in_reasoning="always", **KW) as deltas:
            async for d in deltas:
                names += [tc.function.name for tc in d.tool_calls if tc.function.name]
        pipe = deltaflow.Pipeline.for_model(tools=TOOLS, tool_calls_in_reasoning="never", **KW)
        async with deltaflow.stream(source(), pipeline=pipe) as deltas:
            async for d in deltas:
                names += [tc.function.name or "" for tc in d.tool_calls]
        return names

    assert anyio.run(main) == ["get_weather"]
