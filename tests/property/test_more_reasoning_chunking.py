r"""Stream == complete for the reasoning protocols below and the gemma4 tool dialect, over outputs from their grammar.

Grammar (deltaflow/parsers/dialects/: step.py, olmo.py, nemotron.py, holo.py, hunyuan.py, granite.py, gemma.py,
ernie.py, cohere.py)::

    think output   := [<think>] REASONING </think> CONTENT | REASONING        (step3p5, olmo3, nemotron_v3, holo2, hy_v3)
    granite output := Here is my thought process: REASONING Here is my response: CONTENT | CONTENT
    gemma4 output  := (TEXT | <|tool_call>call:NAME{key:value,...}<tool_call|>)*
    gemma4 reasoning := (TEXT | <|channel>[thought[\n]] REASONING <channel|> | <channel|>)*
                      (a stray <channel|> is dropped)
    hunyuan_a13b   := [<think>\n REASONING \n</think>\n] <answer>\n CONTENT [\n</answer>] | CONTENT
    ernie45        := REASONING [</think> BLANK [<response>] CONTENT [</response> TAIL]]
    command_r7b    := [<|START_THINKING|> REASONING <|END_THINKING|>]
                      <|START_RESPONSE|> CONTENT [<|END_RESPONSE|>]
    granite_thinking_parser := [<think>] REASONING </think> \n* CONTENT
    value          := <|"|>raw text<|"|> | number | true | false | null | {key:value,...} | [value,...]

A well-formed output parses back to what was generated: reasoning and content
verbatim, each call with its arguments as the generated dict.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from deltaflow import accumulate, parse_complete
from deltaflow.parsers.dialects.granite import GRANITE_END, GRANITE_START
from deltaflow.parsers.drivers.gemma4 import GEMMA4_CLOSE, GEMMA4_OPEN, GEMMA4_QUOTE
from deltaflow.parsers.registry import get_reasoning_dialect
from deltaflow.stages.reasoning import _NEWLINE_RUN_MAX
from deltaflow.testing import feed_chunks, message_key

from .strategies import chunkings

THINK = ("step3p5", "olmo3", "nemotron_v3", "holo2", "hy_v3")
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<>|"), max_size=20)
_KEY = st.text("abcdefghij_XYZ0123456789-.", min_size=1, max_size=6)
_LEAF = st.one_of(
    _TEXT,
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
_VALUE = st.recursive(
    _LEAF, lambda ch: st.one_of(st.lists(ch, max_size=3), st.dictionaries(_KEY, ch, max_size=3)), max_leaves=8
)
_ARGS = st.dictionaries(_KEY, _VALUE, max_size=4)
_NAMES = st.sampled_from(("get_weather", "search", "f", "mod.fn-2"))


def gemma4_value(value: Any) -> str:
    """Gemma 4's serialization of ``value`` (bare keys, <|"|> strings, no spaces)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma4_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma4_value(v) for v in value) + "]"
    if isinstance(value, str):
        return GEMMA4_QUOTE + value + GEMMA4_QUOTE
    return json.dumps(value)


def check(text: str, chunks: list[str], **kwargs: Any) -> Any:
    """Assert that ``chunks`` rebuild ``parse_complete(text)``; return the complete message."""
    assert "".join(chunks) == text
    full = parse_complete(text, **{k: v for k, v in kwargs.items() if k != "chunking"})
    assert message_key(accumulate(feed_chunks(chunks, **kwargs))) == message_key(full)
    return full


@given(st.sampled_from(THINK), _TEXT, _TEXT, st.booleans(), st.booleans(), st.data())
def test_think_outputs(name: str, reasoning: str, content: str, opener: bool, closed: bool, data: st.DataObject) -> None:
    """<think> protocols: any chunking rebuilds the complete parse, which gives back reasoning and content."""
    text = ("<think>" if opener else "") + reasoning + ("</think>" + content if closed else "")
    m = check(text, data.draw(chunkings(text)), reasoning_parser=name, enable_thinking=True)
    shown = reasoning
    if closed and get_reasoning_dialect(name).reasoning_rstrip_newlines:
        # Step-3.5's template writes newlines before </think>: a run of at most 256 of them is framing.
        kept = reasoning.rstrip("\n")
        if len(reasoning) - len(kept) <= _NEWLINE_RUN_MAX:
            shown = kept
    assert (m.reasoning_content or "", m.content or "") == (shown, content if closed else "")


@given(_TEXT, _TEXT, st.booleans(), st.data())
def test_granite_outputs(reasoning: str, content: str, thinks: bool, data: st.DataObject) -> None:
    """Granite: any chunking, in both chunking modes, rebuilds the complete parse and gives back the parts."""
    text = f"{GRANITE_START}{reasoning}{GRANITE_END}{content}" if thinks else GRANITE_END[:4] + content
    mode = data.draw(st.sampled_from(("any", "tokens")))
    m = check(text, data.draw(chunkings(text)), reasoning_parser="granite", chunking=mode)
    if thinks:
        assert (m.reasoning_content or "", m.content or "") == (reasoning, content)
    else:
        assert (m.reasoning_content, m.content or "") == (None, text)


@given(st.lists(st.tuples(_TEXT, _NAMES, _ARGS), max_size=3), _TEXT, st.data())
def test_gemma4_outputs(calls: list[tuple[str, str, dict[str, Any]]], tail: str, data: st.DataObject) -> None:
    """gemma4: any chunking rebuilds the complete parse; calls come back with their arguments as generated."""
    text = "".join(lead + f"{GEMMA4_OPEN}call:{name}{gemma4_value(args)}{GEMMA4_CLOSE}" for lead, name, args in calls)
    text += tail
    m = check(text, data.draw(chunkings(text)), tool_parser="gemma4")
    got = [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls]
    assert all(isinstance(a, dict) for _, a in got)
    assert got == [(name, args) for _, name, args in calls]
    # Whitespace between two blocks is swallowed by the feeder (it becomes raw text of the next call).
    leads = [lead for i, (lead, _, _) in enumerate(calls) if i == 0 or lead.strip(" \t\n\r")]  # JSON whitespace
    assert (m.content or "") == "".join(leads) + tail


_MODES = st.sampled_from(("any", "tokens"))
_SEGMENT = st.one_of(
    st.tuples(st.just("text"), _TEXT),
    st.tuples(st.just("block"), _TEXT),
    st.tuples(st.just("stray"), st.just("")),
)


@given(st.lists(st.tuples(_SEGMENT, st.sampled_from(("", "thought", "thought\n"))), max_size=5), _MODES, st.data())
def test_gemma4_reasoning_outputs(
    segments: list[tuple[tuple[str, str], str]], mode: str, data: st.DataObject
) -> None:
    """gemma4 reasoning: channel blocks anywhere, labels and stray end markers dropped, on any chunking."""
    text, reasoning, content = "", "", ""
    for (kind, part), label in segments:
        if kind == "text":
            text += part
            content += part
        elif kind == "stray":
            text += "<channel|>"
        else:
            # A block's text must not extend its label into a longer one (the longest label is dropped).
            assume(label or not part.startswith("thought"))
            assume(label != "thought" or not part.startswith("\n"))
            text += f"<|channel>{label}{part}<channel|>"
            reasoning += part
    m = check(text, data.draw(chunkings(text)), reasoning_parser="gemma4", chunking=mode)
    assert (m.reasoning_content or "", m.content or "") == (reasoning, content)


@given(_TEXT, _TEXT, st.booleans(), st.booleans(), _MODES, st.data())
def test_hunyuan_a13b_outputs(
    reasoning: str, content: str, thinks: bool, closed: bool, mode: str, data: st.DataObject
) -> None:
    """hunyuan_a13b: any chunking gives back the reasoning and the answer without its wrapper."""
    text = (f"<think>\n{reasoning}\n</think>\n" if thinks else "") + f"<answer>\n{content}"
    text += "\n</answer>" if closed else ""
    m = check(text, data.draw(chunkings(text)), reasoning_parser="hunyuan_a13b", chunking=mode)
    assert (m.reasoning_content or "", m.content or "") == (reasoning if thinks else "", content)


@given(_TEXT, _TEXT, _TEXT, st.sampled_from(("", "\n", "\n\n", " \n")), st.booleans(), _MODES, st.data())
def test_ernie45_outputs(
    reasoning: str, content: str, tail: str, blank: str, wrapped: bool, mode: str, data: st.DataObject
) -> None:
    """ernie45: any chunking gives back the reasoning and the content without its <response> wrapper."""
    body = f"<response>{content}</response>{tail}" if wrapped else content
    text = f"{reasoning}</think>{blank}{body}"
    m = check(text, data.draw(chunkings(text)), reasoning_parser="ernie45", chunking=mode)
    want = content + tail if wrapped else blank + content
    assert (m.reasoning_content or "", m.content or "") == (reasoning, want)


@given(_TEXT, _TEXT, st.booleans(), st.booleans(), _MODES, st.data())
def test_command_r7b_outputs(
    reasoning: str, content: str, thinks: bool, closed: bool, mode: str, data: st.DataObject
) -> None:
    """command_r7b: any chunking gives back the thinking and the response without its markers."""
    text = (f"<|START_THINKING|>{reasoning}<|END_THINKING|>" if thinks else "") + f"<|START_RESPONSE|>{content}"
    text += "<|END_RESPONSE|>" if closed else ""
    m = check(text, data.draw(chunkings(text)), reasoning_parser="command_r7b", chunking=mode)
    assert (m.reasoning_content or "", m.content or "") == (reasoning if thinks else "", content)


@given(_TEXT, _TEXT, st.integers(0, 3), st.booleans(), _MODES, st.data())
def test_granite_thinking_outputs(
    reasoning: str, content: str, newlines: int, opener: bool, mode: str, data: st.DataObject
) -> None:
    """granite_thinking_parser: newlines after </think> are dropped, everything else kept, on any chunking."""
    text = ("<think>" if opener else "") + f"{reasoning}</think>" + "\n" * newlines + content
    m = check(text, data.draw(chunkings(text)), reasoning_parser="granite_thinking_parser", chunking=mode)
    assert (m.reasoning_content or "", m.content or "") == (reasoning, content.lstrip("\n"))
