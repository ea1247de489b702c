"""Exhaustive hold-back, chunking="any": a marker prefix ending a chunk never leaks; the end releases it unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from deltaflow import DeltaMessage, ResponseParser, accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.testing import message_key

from .strategies import ENVELOPES, think_parsers

REASONING, CONTENT = "reasoning", "content"


@dataclass(frozen=True)
class Case:
    """Feed ``context + prefix`` in one chunk, then end the input."""

    marker: str
    prefix: str
    context: str
    channel: str  # where the released prefix belongs


def proper_prefixes(marker: str) -> list[str]:
    """``marker[:1]`` .. ``marker[:-1]``."""
    return [marker[:k] for k in range(1, len(marker))]


def opened(reasoning_parser: str) -> str:
    """What puts the output inside reasoning: nothing when it starts open, else the start marker."""
    spec = registry.get_reasoning_dialect(reasoning_parser)
    return "" if spec.starts_open else spec.start


def reasoning_cases(reasoning_parser: str) -> list[Case]:
    """The start marker at the very start of the output; the end markers (explicit and implicit) inside reasoning."""
    spec = registry.get_reasoning_dialect(reasoning_parser)
    first = REASONING if spec.starts_open else CONTENT
    cases = [Case(spec.start, p, ctx, first) for p in proper_prefixes(spec.start) for ctx in ("", "\n", " \n ")]
    for marker in dict.fromkeys((spec.end, *spec.implicit_end)):
        for ctx in ("abc", "Step 1.\n", "x "):
            cases += [Case(marker, p, opened(reasoning_parser) + ctx, REASONING) for p in proper_prefixes(marker)]
    return cases


def tool_cases(tool_parser: str, reasoning_parser: str | None) -> list[Case]:
    """Tool openers in content (at the start, after text); with a reasoning parser, inside reasoning and after it."""
    dialect = registry.get_tool_dialect(tool_parser)
    if reasoning_parser is None:
        contexts = [("", CONTENT), ("Hi ", CONTENT), ("Sure.\n", CONTENT), ("a\n\n", CONTENT)]
    else:
        spec = registry.get_reasoning_dialect(reasoning_parser)
        start = opened(reasoning_parser)
        contexts = [(start + "r ", REASONING), (start + "r" + spec.end + "ok ", CONTENT)]
    return [
        Case(marker, p, ctx, channel)
        for marker in dict.fromkeys((*dialect.openers, *dialect.start_openers))
        for p in proper_prefixes(marker)
        for ctx, channel in contexts
    ]


def _pairs() -> list[tuple[str | None, str | None]]:
    """Every parser alone, the generated grammars' pairs, and every pair a model preset uses."""
    pairs: list[tuple[str | None, str | None]] = [(t, None) for t in registry.tool_dialect_names()]
    # An inline reasoning parser (minimax_m2_append_think) splits nothing, so it holds no marker.
    pairs += [(None, r) for r in registry.reasoning_dialect_names() if not registry.get_reasoning_dialect(r).inline]
    pairs += [(t, r) for t in ENVELOPES for r in think_parsers()]
    presets: tuple[Any, ...] = ()
    try:
        from deltaflow.presets import list_presets
    except ImportError:  # pragma: no cover - before presets existed
        pass
    else:
        presets = tuple(list_presets())
    pairs += [(p.tool_parser, p.reasoning_parser) for p in presets if p.tool_parser and p.reasoning_parser]
    known_t, known_r = set(registry.tool_dialect_names()), set(registry.reasoning_dialect_names())
    return [pair for pair in dict.fromkeys(pairs) if pair[0] in known_t | {None} and pair[1] in known_r | {None}]


PAIRS = _pairs()


def visible(deltas: list[DeltaMessage]) -> dict[str, str]:
    """The content and reasoning text of ``deltas``, per channel."""
    return {
        CONTENT: "".join(d.content or "" for d in deltas),
        REASONING: "".join(d.reasoning_content or "" for d in deltas),
    }


def check(case: Case, kwargs: dict[str, Any]) -> str | None:
    """Run one case; return what went wrong, or None.

    The first feed may emit the context's text (a dialect may hold some of
    it too, e.g. blanks before a header), never any of the prefix; the
    final feed releases the rest, ending with the prefix, unchanged and in
    its channel; and the stream rebuilds parse_complete.
    """
    parser = ResponseParser(**kwargs)
    first = parser.feed(case.context + case.prefix)
    last = parser.feed("", final=True)
    before, released = visible(first), visible(last)
    context_only = parse_complete(case.context, **kwargs)
    context = {CONTENT: context_only.content or "", REASONING: context_only.reasoning_content or ""}
    if any(not context[ch].startswith(before[ch]) for ch in context) or any(d.tool_calls for d in first):
        calls = [d.tool_calls for d in first if d.tool_calls]
        return f"first feed gave {before} (calls: {calls}), context is {context}"
    want = {ch: context[ch][len(before[ch]) :] for ch in context}
    want[case.channel] += case.prefix
    if released != want or any(d.tool_calls for d in last):
        return f"final feed gave {released} (calls: {[d.tool_calls for d in last if d.tool_calls]}), want {want}"
    whole = message_key(parse_complete(case.context + case.prefix, **kwargs))
    if message_key(accumulate(first + last)) != whole:
        return f"stream {message_key(accumulate(first + last))} != complete {whole}"
    return None


@pytest.mark.parametrize(("tool_parser", "reasoning_parser"), PAIRS, ids=lambda p: p or "-")
def test_marker_prefixes_are_held_and_released(tool_parser: str | None, reasoning_parser: str | None) -> None:
    """Each proper prefix of each marker at a chunk end is held, then released unchanged by feed("", final=True)."""
    kwargs: dict[str, Any] = {"tool_parser": tool_parser, "reasoning_parser": reasoning_parser}
    cases: list[Case] = []
    if reasoning_parser is not None:
        kwargs["enable_thinking"] = True
        if tool_parser is None:
            cases += reasoning_cases(reasoning_parser)
    if tool_parser is not None:
        cases += tool_cases(tool_parser, reasoning_parser)
    failures = []
    for case in cases:
        problem = check(case, kwargs)
        if problem is not None:
            failures.append(f"{case.prefix!r} (of {case.marker!r}) after {case.context!r}: {problem}")
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures)


def test_every_parser_is_covered() -> None:
    """Every registered tool and reasoning parser is exercised by some pair (an inline one by the test below)."""
    assert {t for t, _ in PAIRS} >= set(registry.tool_dialect_names())
    inline = {r for r in registry.reasoning_dialect_names() if registry.get_reasoning_dialect(r).inline}
    assert {r for _, r in PAIRS} | inline >= set(registry.reasoning_dialect_names())


@pytest.mark.parametrize("name", [r for r in registry.reasoning_dialect_names() if registry.get_reasoning_dialect(r).inline])
def test_an_inline_reasoning_parser_holds_no_marker_prefix(name: str) -> None:
    """An inline parser splits nothing: a prefix of its markers is content at once, after the opener it puts back."""
    spec = registry.get_reasoning_dialect(name)
    for marker in (spec.start, spec.end):
        for prefix in proper_prefixes(marker):
            parser = ResponseParser(reasoning_parser=name)
            first = visible(parser.feed("abc" + prefix))
            assert first == {CONTENT: spec.start + "abc" + prefix, REASONING: ""}
            assert visible(parser.feed("", final=True)) == {CONTENT: "", REASONING: ""}
