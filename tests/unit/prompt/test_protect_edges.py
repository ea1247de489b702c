"""The edge guard of :class:`deltaflow.prompt.protect.Protector` against the definition it implements.

A protected value's longest end that is a proper prefix of a marker, and its
longest start (before that end) that is a proper suffix of one, become
placeholders. The guard finds them from candidate positions only (a marker's
first or last character); the reference here tries every length.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow.prompt.protect import Protector

MARKERS = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<｜end▁of▁sentence｜>", "[INST]", "ab", "x")


def reference_edges(s: str, markers: tuple[str, ...]) -> tuple[int, int]:
    """(head, tail) lengths by trying every length, longest first."""
    prefixes = {m[:k] for m in markers for k in range(1, len(m))}
    suffixes = {m[k:] for m in markers for k in range(1, len(m))}
    edge = max((len(m) - 1 for m in markers), default=0)
    n = len(s)
    tail = next((k for k in range(min(edge, n), 0, -1) if s[n - k :] in prefixes), 0)
    head = next((k for k in range(min(edge, n - tail), 0, -1) if s[:k] in suffixes), 0)
    return head, tail


fragments = st.sampled_from(
    [m[:k] for m in MARKERS for k in range(len(m) + 1)]
    + [m[k:] for m in MARKERS for k in range(len(m) + 1)]
    + ["a", " ", "\n", "|", ">", "<", "]", "é", "end", "_"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(fragments, max_size=6).map("".join))
def test_guarded_edges_are_the_longest_prefix_and_suffix(s: str) -> None:
    protector = Protector(MARKERS)
    got = protector._guard_edges(s)
    head, tail = reference_edges(s, MARKERS)
    n = len(s)
    # the same protector hands out the same placeholder for the same text
    first = protector._issue(s[:head]) if head else ""
    last = protector._issue(s[n - tail :]) if tail else ""
    assert got == first + s[head : n - tail] + last


def test_no_markers_leaves_values_alone() -> None:
    assert Protector(()).protect(["<|im_", "end|>"]) == ["<|im_", "end|>"]
