"""Fuzz every registered tool dialect: grammar-generated outputs, mutated, on random chunkings.

For every (dialect, mutation, chunking):

* no exception escapes ``ResponseParser.feed`` or ``parse_complete``;
* the streamed deltas rebuild ``parse_complete``;
* every emitted call's arguments ``json.loads`` to a dict after the final chunk
  (in the stream and in the complete message);
* no emitted call names a tool outside the offered ones.

Unmutated (with ``tools``), nothing is lost. Formulation (whitespace-insensitive,
since dialects consume framing whitespace and Harmony joins content messages
with ``\\n``): let ``V`` be the visible text (content and reasoning deltas, in
stream order), ``nows(s)`` ``s`` without whitespace. Then

1. ``nows(V)`` is a subsequence of ``nows(input)`` (nothing invented, order kept);
2. ``nows(M)`` is a subsequence of ``nows(V)``, where ``M`` is the input
   with the raw text of accepted calls, reasoning markers, Harmony headers
   and optional framing (section wrappers, separators) removed: every
   character of free text and of rejected calls is surfaced, in order;
3. the emitted calls are exactly the generated calls to offered names, in order.

Examples per dialect: ``DELTAFLOW_FUZZ_EXAMPLES`` (default 25), e.g.
``DELTAFLOW_FUZZ_EXAMPLES=20000 python -m pytest tests/fuzz``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaflow import DeltaMessage, ResponseParser, accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.testing import message_key

from .grammar import BLOCKS, REASONING_FOR, TOOL_MARKERS, Rendered, chunkings, fuzz_cases

EXAMPLES = int(os.environ.get("DELTAFLOW_FUZZ_EXAMPLES", "25"))
DIALECTS = registry.tool_dialect_names()

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    derandomize=False,
)


def stream(r: Rendered, chunks: list[str]) -> list[DeltaMessage]:
    parser = ResponseParser(**r.kwargs())
    out: list[DeltaMessage] = []
    for c in chunks:
        out.extend(parser.feed(c))
    out.extend(parser.feed("", final=True))
    return out


def call_contract(deltas: list[DeltaMessage], tools: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Names offered, arguments one JSON object per call; returns (name, decoded args) in order."""
    names: dict[int, str] = {}
    args: dict[int, list[str]] = {}
    for d in deltas:
        for tc in d.tool_calls:
            if tc.function.name is not None:
                assert tc.index not in names, f"call {tc.index} named twice"
                names[tc.index] = tc.function.name
            assert tc.index in names, f"arguments of call {tc.index} before its name"
            args.setdefault(tc.index, []).append(tc.function.arguments or "")
    assert sorted(names) == list(range(len(names))), f"indexes not dense: {sorted(names)}"
    out = []
    for i in range(len(names)):
        name = names[i]
        assert name in tools, f"call to {name[:80]!r}, not among the offered tools"
        joined = "".join(args.get(i, []))
        try:
            value = json.loads(joined)
        except ValueError as exc:
            raise AssertionError(f"arguments of {name[:80]!r} are not JSON: {joined!r} ({exc})") from None
        assert isinstance(value, dict), f"arguments of {name[:80]!r} are not an object: {joined!r}"
        out.append((name, value))
    return out


def check_common(r: Rendered, chunks: list[str]) -> tuple[list[DeltaMessage], Any]:
    assert "".join(chunks) == r.text
    deltas = stream(r, chunks)
    complete = parse_complete(r.text, **r.kwargs())
    calls = call_contract(deltas, r.tools)
    assert message_key(accumulate(deltas)) == message_key(complete), "stream rebuild != parse_complete"
    for tc in complete.tool_calls:
        assert tc.function.name in r.tools
        assert isinstance(json.loads(tc.function.arguments), dict)
    return deltas, calls


def _nows(s: str) -> str:
    return "".join(s.split())


def _is_subsequence(small: str, big: str) -> bool:
    it = iter(big)
    return all(c in it for c in small)


def check_nothing_lost(r: Rendered, deltas: list[DeltaMessage], calls: list[tuple[str, Any]]) -> None:
    visible = "".join((d.reasoning_content or "") + (d.content or "") for d in deltas)
    assert _is_subsequence(_nows(visible), _nows(r.text)), f"visible text is not a subsequence of the input: {visible!r}"
    accepted = [n in r.tools for n in r.names]
    must = "".join(
        s.text for s in r.segs if s.role == "must" or (s.role == "call" and not accepted[s.call])
    )
    assert _is_subsequence(_nows(must), _nows(visible)), (
        f"text outside accepted calls was lost: must={must!r} visible={visible!r}"
    )
    assert [n for n, _ in calls] == [n for n in r.names if n in r.tools], "accepted calls"


def test_every_registered_dialect_is_fuzzed() -> None:
    assert set(DIALECTS) == set(BLOCKS) | {"openai"} == set(TOOL_MARKERS) == set(REASONING_FOR)


@pytest.mark.parametrize("tool_parser", DIALECTS)
@FUZZ
@given(data=st.data())
def test_mutated_outputs_keep_the_contract(tool_parser: str, data: st.DataObject) -> None:
    """Mutated or not, on any chunking: no exception, stream == complete, JSON-object arguments, offered names."""
    r = data.draw(fuzz_cases(tool_parser), label="case")
    chunks = data.draw(chunkings(r.text), label="chunks")
    deltas, calls = check_common(r, chunks)
    if r.mutation is None:
        check_nothing_lost(r, deltas, calls)


@pytest.mark.parametrize("tool_parser", DIALECTS)
@FUZZ
@given(data=st.data())
def test_well_formed_outputs_lose_nothing(tool_parser: str, data: st.DataObject) -> None:
    """Unmutated, with tools: every character outside accepted calls is surfaced, nothing invented."""
    r = data.draw(fuzz_cases(tool_parser, mutate=False), label="case")
    chunks = data.draw(chunkings(r.text), label="chunks")
    deltas, calls = check_common(r, chunks)
    check_nothing_lost(r, deltas, calls)
