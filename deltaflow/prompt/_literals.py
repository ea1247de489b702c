"""A regular expression that finds any of a set of literal strings, leftmost-longest.

Python's ``re`` tries the branches of an alternation in order and takes the
first that matches, so a flat ``a|ab`` finds ``a`` in ``ab``. The pattern
built here is a prefix tree (``<\\|(?:im_(?:start|end)\\|>|...)``): at each
node the longer continuations are tried before stopping there, which gives
the longest match at the leftmost position (the ``LeftmostLongest`` rule of
HF ``tokenizers``' added-token matcher), and the engine does not retry a
thousand branches at every ``<`` of the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ("literal_alternation",)

_END = ""  # key of the "a word ends here" mark in a trie node


def literal_alternation(words: Iterable[str]) -> str:
    """The regular-expression source matching any of ``words``, longest first at a position.

    Args:
        words: the literals; empty strings are ignored.

    Returns:
        A pattern (no flags needed) for ``re.compile``; ``(?!)`` (never
        matches) when there are no words.
    """
    root: dict[str, object] = {}
    for word in set(words):
        if not word:
            continue
        node = root
        for ch in word:
            node = node.setdefault(ch, {})  # type: ignore[assignment]
        node[_END] = True
    if not root:
        return "(?!)"
    return _node(root)


def _node(node: dict[str, object]) -> str:
    """Pattern for the words below ``node`` (the node's own end mark makes the tail optional)."""
    branches: list[str] = []
    for ch in sorted(k for k in node if k != _END):
        child = node[ch]
        assert isinstance(child, dict)
        # A chain of single-child, non-final nodes is written as one literal.
        lit = ch
        while len(child) == 1 and _END not in child:
            (nxt,) = child
            lit += nxt
            child = child[nxt]
            assert isinstance(child, dict)
        rest = _node(child) if any(k != _END for k in child) else ""
        if rest and _END in child:
            rest = f"(?:{rest})?"
        branches.append(re.escape(lit) + rest)
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
