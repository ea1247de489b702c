"""Stream == complete for the JSON-array family, over outputs generated from each dialect's grammar.

The grammars (the JSON-envelope dialects in deltaflow/parsers/dialects/ (granite, hunyuan, xlam, ...); shared/dialects.md
section 14): a JSON array of ``{"name", "arguments"}`` objects after an opener
and before an optional closer (granite, hunyuan_a13b, jamba, apriel, nemotron,
xlam, phi4_mini_json, firefunction_v2; apertus with ``{"NAME": {...}}``
objects), or one object per call between per-call markers (granite4, ernie45,
longcat, granite-20b-fc, gigachat3). Blanks may appear wherever JSON allows
them and between a dialect's opener markers.

A well-formed output comes with what a correct parser returns: the text
before and after the block verbatim (ERNIE's blanks right after a closer are
framing), calls to offered names with their arguments as their exact JSON
source text, calls to other names surfaced as text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.parsers.base import BLANK_RUN_MAX
from deltaflow.testing import message_key

from .strategies import args_object_src, check_delta_invariants, chunkings, json_string_src, tool_defs

ARRAY_FORMS: dict[str, tuple[tuple[str, str], ...]] = {
    "granite": (("<|tool_call|>", ""), ("<tool_call>", ""), ("", "")),
    "hunyuan_a13b": (("<tool_calls>", "</tool_calls>"),),
    "jamba": (("<tool_calls>", "</tool_calls>"),),
    "apriel": (("<tool_calls>", "</tool_calls>"),),
    "nemotron": (("<TOOLCALL>", "</TOOLCALL>"),),
    "xlam": (("<tool_call>", "</tool_call>"), ("[TOOL_CALLS]", ""), ("```json\n", "\n```"), ("```", "```"), ("", "")),
    "phi4_mini_json": (("functools", ""),),
    "firefunction_v2": (("functools", ""),),
    "apertus": (("<|tools_prefix|>", "<|tools_suffix|>"),),
}
CALL_FORMS: dict[str, tuple[tuple[str, str], ...]] = {
    "granite4": (("<tool_call>", "</tool_call>"),),
    "ernie45": (("<tool_call>\n", "\n</tool_call>\n"), ("<tool_call>", "</tool_call>")),
    "longcat": (("<longcat_tool_call>", "</longcat_tool_call>"),),
    "granite-20b-fc": (("<function_call> ", ""), ("<function_call>", "")),
    "gigachat3": (
        ("<|message_sep|>\n\nfunction call<|role_sep|>\n", ""),
        ("<|message_sep|>function call <|role_sep|>", "</s>"),
        ("<|function_call|>", ""),
        ("<|function_call|>", "</s>"),
    ),
}
DIALECTS = tuple(ARRAY_FORMS) + tuple(CALL_FORMS)
OFFERED = ("get_weather", "search", "f", "calc.v2")
OTHER = ("rm_rf", "delete_all")
_WS = st.sampled_from(("", "", " ", "\n", "  ", "\t", "\r\n"))
# Prose without anything that could open a block of these dialects.
_PROSE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,!?-_'()/=+*é天\n", max_size=20).filter(
    lambda t: "function" not in t
)


@dataclass
class Output:
    """A generated output and what parsing it must give."""

    dialect: str
    text: str
    tools: tuple[str, ...] | None
    content: str
    calls: list[tuple[str, str]]

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``ResponseParser`` / ``parse_complete``."""
        return {"tool_parser": self.dialect, "tools": tool_defs(self.tools)}


def _element(draw: st.DrawFn, dialect: str, name: str, args: str) -> str:
    """One call object, keys in either order, blanks anywhere JSON allows."""
    ws = [draw(_WS) for _ in range(8)]
    name_src = draw(json_string_src(name))
    if dialect == "apertus":
        return "{" + ws[0] + name_src + ws[1] + ":" + ws[2] + args + ws[3] + "}"
    field = draw(st.sampled_from(("arguments", "parameters"))) if dialect != "gigachat3" else "arguments"
    members = [f'"name"{ws[0]}:{ws[1]}{name_src}', f'"{field}"{ws[2]}:{ws[3]}{args}']
    if draw(st.booleans()):
        members.reverse()
    return "{" + ws[4] + members[0] + ws[5] + "," + ws[6] + members[1] + ws[7] + "}"


@st.composite
def outputs(draw: st.DrawFn) -> Output:
    """A well-formed output of one dialect of the family, with its expected parse."""
    dialect = draw(st.sampled_from(DIALECTS))
    tools = draw(st.sampled_from((None, OFFERED)))
    pool = OFFERED + (OTHER if tools is not None else ())
    n = 1 if dialect == "gigachat3" else draw(st.integers(1, 3))
    items = [(draw(st.sampled_from(pool)), draw(args_object_src)) for _ in range(n)]
    accepted = [tools is None or name in tools for name, _ in items]
    elements = [_element(draw, dialect, name, args) for name, args in items]
    before = draw(_PROSE)
    after = draw(_PROSE)
    content_parts: list[str] = []
    lead_blanks = registry.get_tool_dialect(dialect).lead_blanks

    def split_lead(text: str) -> tuple[str, str]:
        """(content, blanks that are raw text of the first call) of the text before the block."""
        core = text.rstrip(" \t\r\n")
        return (core, text[len(core):]) if lead_blanks and len(text) - len(core) <= BLANK_RUN_MAX else (text, "")

    if dialect in ARRAY_FORMS:
        head, tail = draw(st.sampled_from(ARRAY_FORMS[dialect]))
        if not head:
            before = draw(_WS)  # a bare array opens a block only where blanks at most came before it
        shown, lead_ws = split_lead(before)
        seps = [draw(_WS) + "," + draw(_WS) for _ in elements]
        pre, post = draw(_WS), draw(_WS)
        lead = head + (draw(_WS) if head else "") + "[" + pre
        body = lead
        surfaced: list[str] = []
        for i, (el, ok) in enumerate(zip(elements, accepted, strict=True)):
            # Raw text of element i: the separator before it (or the opener for the first) and the object.
            raw = (lead_ws + lead if i == 0 else seps[i]) + el
            body += (seps[i] if i else "") + el
            if not ok:
                surfaced.append(raw)
        end = post + "]" + (draw(_WS) + tail if tail else "")
        body += end
        if not accepted[-1]:
            surfaced.append(end)
        text = before + body + after
        content_parts = [shown, *surfaced, after]
    else:
        shown, lead_ws = split_lead(before)
        forms = CALL_FORMS[dialect]
        blocks: list[str] = []
        surfaced = []
        gaps = [""] + [draw(_WS) for _ in elements[1:]] + [""]
        for i, (el, ok) in enumerate(zip(elements, accepted, strict=True)):
            head, tail = draw(st.sampled_from(forms))
            blk = head + el + tail
            blocks.append(gaps[i] + blk)
            if not ok:
                # Blanks between two blocks are raw text of the next call; ERNIE's of the previous one.
                lead_raw = lead_ws if i == 0 else ""
                surfaced.append(lead_raw + (blk + gaps[i + 1] if dialect == "ernie45" else gaps[i] + blk))
        if dialect == "ernie45":
            after = after.lstrip(" \t\r\n")  # blanks right after </tool_call> are framing
        if dialect == "granite-20b-fc" or (dialect == "gigachat3" and not blocks[-1].endswith("</s>")):
            after = ""  # no closer: trailing prose is not generated right against the object
        text = before + "".join(blocks) + after
        content_parts = [shown, *surfaced, after]
    calls = [(name, args) for (name, args), ok in zip(items, accepted, strict=True) if ok]
    return Output(dialect, text, tools, "".join(content_parts), calls)


@given(outputs(), st.data())
def test_stream_equals_complete_and_parses_back(out: Output, data: st.DataObject) -> None:
    """Any chunking of a well-formed output streams what parse_complete returns: the generated calls and text."""
    full = parse_complete(out.text, **out.kwargs())
    chunks = data.draw(chunkings(out.text))
    parser = ResponseParser(**out.kwargs())
    deltas = [d for c in chunks for d in parser.feed(c)] + parser.feed("", final=True)
    got = check_delta_invariants(deltas, out.tools)
    assert message_key(accumulate(deltas)) == message_key(full)
    assert got == out.calls, out.text
    assert (full.content or "") == out.content, out.text
    for _, args in got:
        assert isinstance(json.loads(args), dict)


@given(outputs(), st.data())
def test_truncated_outputs_stream_equals_complete(out: Output, data: st.DataObject) -> None:
    """An output cut anywhere still streams what parse_complete returns, with every call's arguments an object."""
    cut = out.text[: data.draw(st.integers(0, len(out.text)))]
    full = parse_complete(cut, **out.kwargs())
    chunks = data.draw(chunkings(cut))
    parser = ResponseParser(**out.kwargs())
    deltas = [d for c in chunks for d in parser.feed(c)] + parser.feed("", final=True)
    check_delta_invariants(deltas, out.tools)
    assert message_key(accumulate(deltas)) == message_key(full)
    for c in full.tool_calls:
        assert isinstance(json.loads(c.function.arguments), dict)
