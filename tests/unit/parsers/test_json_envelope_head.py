"""The JSON envelope's one-step head (``{"name": "NAME", "arguments": ``) gives the member-by-member path's deltas."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

import deltaflow.parsers.drivers.json_envelope as json_envelope
from deltaflow import ResponseParser

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_weather", "f", "fA", "g")
]

HERMES = [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "n": 2}}\n</tool_call>',
    'Sure.\n<tool_call>{ "name" : "f" ,\n "arguments" :{}}</tool_call> and <tool_call>{"name":"f","parameters":{"a":[1]}}</tool_call>',
    '<tool_call>\n{"name": "zzz", "arguments": {"a": 1}}\n</tool_call>',  # not offered: surfaced as text
    '<tool_call>\n{"name": "f\\u0041", "arguments": {"a": 1}}\n</tool_call>',  # an escape in the name
    '<tool_call>\n{"name": "東京", "arguments": {"a": "\\"x\\""}}\n</tool_call>',
    '<tool_call>\n{"name": "\ud800", "arguments": {"a": 1}}\n</tool_call>',  # a lone surrogate: no name
    '<tool_call>\n{"name": "", "arguments": {"a": 1}}\n</tool_call>',
    '<tool_call>\n{"arguments": {"a": 1}, "name": "f"}\n</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}\n</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": null}\n</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": {"a": }}\n</tool_call> after',
    '<tool_call>\n{"name": "f", "arguments": {"a": "cut',
    '<tool_call>\n{"name": "f", "extra": 1, "arguments": {"a": 1}}\n</tool_call>',
    '<tool_call>\n{"name": "f", "name": "g", "arguments": {}}\n</tool_call>',
]
CASES: list[tuple[str, str]] = [("hermes", t) for t in HERMES] + [
    ("internlm", '<|action_start|><|plugin|>\n{"name": "f", "parameters": {"q": "x"}}<|action_end|>'),
    ("llama3_json", '{"name": "f", "parameters": {"a": 1}}; {"name": "get_weather", "parameters": {}}'),
    ("granite", '<|tool_call|>[{"name": "f", "arguments": {"a": 1}}, {"name": "get_weather", "arguments": {}}]'),
    ("xlam", '<tool_call>[ {"name": "f", "arguments": {}} ,\n{"name":"zzz","arguments":{"b":2}}]</tool_call>'),
]


def _deltas(parser: str, pieces: list[str], tools: list[dict[str, Any]] | None) -> list[Any]:
    ids = itertools.count()
    p = ResponseParser(parser, tools=tools, id_factory=lambda: f"id{next(ids)}")
    out = [d for piece in pieces for d in p.feed(piece)]
    out += p.feed("", final=True)
    return msgspec.to_builtins(out)


def _chunkings(text: str) -> list[list[str]]:
    out = [[text], list(text)]
    out += [[text[:i], text[i:]] for i in range(1, len(text))]
    return out


@pytest.mark.parametrize(("parser", "text"), CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CASES)])
@pytest.mark.parametrize("offered", [True, False], ids=["tools", "no-tools"])
def test_head_in_one_step_gives_the_member_by_member_deltas(
    parser: str, text: str, offered: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every two-way split, with and without offered tools, the deltas are the same with and without the head step."""
    tools = TOOLS if offered else None
    chunkings = _chunkings(text)
    fast = [_deltas(parser, pieces, tools) for pieces in chunkings]
    monkeypatch.setattr(json_envelope, "_head_pattern", lambda spec: None)
    slow = [_deltas(parser, pieces, tools) for pieces in chunkings]
    for pieces, a, b in zip(chunkings, fast, slow, strict=True):
        assert a == b, pieces


def test_the_head_is_taken_in_one_step() -> None:
    """The usual head is matched (the test above would pass vacuously if it never were)."""
    spec = json_envelope.JsonEnvelopeFormat(open=("<tool_call>",), close="</tool_call>", args_fields=("arguments",))
    head = json_envelope._head_pattern(spec)
    assert head is not None
    m = head.match('{"name": "get_weather", "arguments": {"a": 1}}')
    assert m is not None and m.group(1) == "get_weather" and m.end() == 37
    assert head.match('{"name": "f\\u0041", "arguments": {}}') is None
    assert json_envelope._head_pattern(
        json_envelope.JsonEnvelopeFormat(open=("[",), close="]", name_keyed=True)
    ) is None
