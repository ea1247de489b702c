"""Marker hold-back: which chunk tails may begin a marker, in "any" and "tokens" modes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from deltaflow._core.holdback import MarkerHoldback
from deltaflow.parsers import registry

MARKERS = ("<tool_call>", "</tool_call>")


@dataclass(frozen=True)
class Held:
    """A text and how many trailing characters must be held."""

    label: str
    text: str
    held: int


HELD = [
    Held("no marker prefix", "hello", 0),
    Held("empty", "", 0),
    Held("lone <", "a <", 1),
    Held("partial opener", "text <tool_ca", len("<tool_ca")),
    Held("partial closer", "x</tool_cal", len("</tool_cal")),
    Held("longest prefix wins", "<</tool_call", len("</tool_call")),
    Held("whole marker is not held", "a<tool_call>", 0),
    Held("prefix not at the end", "<tool_ca x", 0),
    Held("marker prefix is the whole text", "</", 2),
]


@pytest.mark.parametrize("case", HELD, ids=[c.label for c in HELD])
def test_held_is_longest_suffix_that_is_a_proper_marker_prefix(case: Held) -> None:
    """``held`` returns the length of the longest suffix that is a proper prefix of a marker."""
    assert MarkerHoldback(MARKERS).held(case.text) == case.held


def test_every_proper_prefix_of_every_registered_marker_is_held() -> None:
    """In "any" mode, every proper prefix of every registered dialect marker is held after any text."""
    markers: set[str] = set()
    for name in registry.tool_dialect_names():
        markers.update(registry.get_tool_dialect(name).openers)
    for name in registry.reasoning_dialect_names():
        spec = registry.get_reasoning_dialect(name)
        markers.update((spec.start, spec.end))
    hb = MarkerHoldback(markers)
    for m in markers:
        for k in range(1, len(m)):
            assert hb.held("plain text " + m[:k]) == k, m[:k]
            assert hb.holds(m[:k])
        assert not hb.holds(m)


def test_held_respects_start() -> None:
    """``held`` never looks before ``start`` (consumed text is not searched again)."""
    hb = MarkerHoldback(MARKERS)
    assert hb.held("<tool_ca", 0) == 8
    assert hb.held("<tool_ca", 3) == 0  # "ol_ca" is not a marker prefix
    assert hb.held("xx<tool", 2) == 5
    assert hb.held("<tool", 5) == 0


def test_tokens_mode_uses_only_declared_prefixes() -> None:
    """In "tokens" mode only the declared prefixes are held."""
    hb = MarkerHoldback(("</think>",), ("</", "</think"), chunking="tokens")
    assert hb.held("a</") == 2
    assert hb.held("a</think") == len("</think")
    assert hb.held("a</th") == 0  # a real tokenizer never stops there
    assert hb.held("a<") == 0
    assert hb.holds("</") and not hb.holds("</th")


def test_tokens_mode_ignores_prefixes_of_other_markers() -> None:
    """A declared prefix that is not a proper prefix of a watched marker is ignored."""
    hb = MarkerHoldback(("</think>",), ("<th", "<think", "</think>", "</"), chunking="tokens")
    assert hb.held("x<th") == 0
    assert hb.held("x</think>") == 0
    assert hb.held("x</") == 2


def test_tokens_mode_without_prefixes_holds_nothing() -> None:
    """A marker that is one special token (no declared prefixes) is never held in "tokens" mode."""
    hb = MarkerHoldback(MARKERS, (), chunking="tokens")
    for k in range(1, len(MARKERS[0])):
        assert hb.held("a " + MARKERS[0][:k]) == 0


def test_invalid_mode_names_the_accepted_values() -> None:
    """An unknown mode is a ValueError naming the accepted values."""
    with pytest.raises(ValueError, match="'any' or 'tokens'.*'chars'"):
        MarkerHoldback(MARKERS, chunking="chars")
