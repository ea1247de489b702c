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


# Strings the quick screens must judge right: marker pieces, their first and last characters, non-ASCII
# text, plane-15/16 characters (escaped) and planes 12-14 ones (whose UTF-8 also begins with F3: a false alarm).
screened_fragments = st.sampled_from(
    [m[:k] for m in MARKERS for k in range(1, len(m) + 1)]
    + [m[k:] for m in MARKERS for k in range(len(m))]
    + ["a", " ", "<", ">", "]", "[", "|", "é", "—", "\U0001f600", "\U000c0001", "\U000f0000", "\U0010fffd", "plain text"]
)
screened_values = st.recursive(
    st.lists(screened_fragments, max_size=8).map("".join) | st.integers() | st.none(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.lists(screened_fragments, max_size=3).map("".join), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(screened_values, st.booleans())
def test_quick_screens_change_nothing(value: object, untrusted: bool) -> None:
    """protect and escape with the str.find / UTF-8 screens equal the regular expressions on every value."""
    import deltaflow.prompt.protect as protect_module

    fast = Protector(MARKERS)
    got = fast.protect(value) if untrusted else fast.escape(value)
    slow = Protector(MARKERS)
    slow._untouched = lambda s: False  # type: ignore[method-assign]
    screen = protect_module._unreserved
    protect_module._unreserved = lambda s: False
    try:
        want = slow.protect(value) if untrusted else slow.escape(value)
    finally:
        protect_module._unreserved = screen
    assert got == want
    assert fast._texts == slow._texts
    assert fast.restore(str(got)) == slow.restore(str(want))


def test_unreserved_screen() -> None:
    from deltaflow.prompt.protect import _unreserved

    assert _unreserved("plain") and _unreserved("é—\U0001f600")
    assert not _unreserved("x\U000f0000") and not _unreserved("\U0010fffd")
