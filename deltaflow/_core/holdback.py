"""Hold-back of marker prefixes at a chunk end.

Rule: text is released as soon as it can no longer become part of a marker.
At the end of a chunk, the longest suffix that is a *proper* prefix of a
marker is held back; finding it looks at no more than the last
``longest marker - 1`` characters, never at consumed text.

Two modes (see DESIGN.md, "Model protocols"):

* ``"any"``: every proper prefix of every marker is held (text may have been
  re-chunked anywhere by a proxy or gateway);
* ``"tokens"``: only the prefixes the dialect declares that its real tokenizer
  can leave at a token boundary (none for a marker that is one special token).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

__all__ = ("MarkerHoldback",)


@lru_cache(maxsize=1024)
def _table(
    markers: tuple[str, ...], token_prefixes: tuple[str, ...], chunking: str
) -> tuple[frozenset[str], frozenset[str], int]:
    """The held prefixes, their first characters and the longest one's length."""
    if chunking == "any":
        prefixes = {m[:k] for m in markers for k in range(1, len(m))}
    elif chunking == "tokens":
        prefixes = set()
        for p in token_prefixes:
            if not any(m.startswith(p) and len(p) < len(m) for m in markers):
                continue  # a prefix of a marker this holdback does not watch
            prefixes.add(p)
    else:
        raise ValueError(f"chunking must be 'any' or 'tokens', got {chunking!r}")
    return frozenset(prefixes), frozenset(p[0] for p in prefixes), max((len(p) for p in prefixes), default=0)


class MarkerHoldback:
    """Finds how many trailing characters of a text could begin a marker.

    Args:
        markers: the markers to watch for.
        token_prefixes: for ``chunking="tokens"``, the prefixes a real tokenizer
            can leave at a token boundary.
        chunking: ``"any"`` or ``"tokens"``.
    """

    __slots__ = ("_prefixes", "_firsts", "_maxlen", "_first")

    def __init__(
        self,
        markers: Iterable[str],
        token_prefixes: Iterable[str] = (),
        chunking: str = "any",
    ) -> None:
        # One table per distinct declaration, shared by every response that uses it.
        self._prefixes, self._firsts, self._maxlen = _table(tuple(markers), tuple(token_prefixes), chunking)
        # With one first character (the common case: markers that all start with "<" or "["), candidates
        # are found with str.find instead of a Python loop over the window.
        self._first = next(iter(self._firsts)) if len(self._firsts) == 1 else None

    @property
    def longest(self) -> int:
        """The length of the longest prefix that can be held."""
        return self._maxlen

    def holds(self, fragment: str) -> bool:
        """True if ``fragment`` (a whole chunk tail) must be held as a possible marker start."""
        return fragment in self._prefixes

    def held(self, text: str, start: int = 0) -> int:
        """Return the length of the longest suffix of ``text[start:]`` that may begin a marker."""
        n = len(text)
        k = n - start
        if k > self._maxlen:
            k = self._maxlen
        prefixes = self._prefixes
        first = self._first
        if first is not None:
            # The leftmost candidate in the window is the longest suffix; the first one that is a held
            # prefix wins.
            i = text.find(first, n - k) if k > 0 else -1
            while i >= 0:
                if text[i:] in prefixes:
                    return n - i
                i = text.find(first, i + 1)
            return 0
        firsts = self._firsts
        while k > 0:
            if text[n - k] in firsts and text[n - k :] in prefixes:
                return k
            k -= 1
        return 0
