"""Small text helpers shared by the scanners."""

from __future__ import annotations

import re

__all__ = ("skip_json_ws", "skip_space")

_JSON_WS = re.compile(r"[ \t\n\r]*")
_SPACE = re.compile(r"\s*")


def skip_json_ws(text: str, pos: int) -> int:
    """Return the first position at or after ``pos`` that is not JSON whitespace."""
    m = _JSON_WS.match(text, pos)
    return m.end() if m is not None else pos


def skip_space(text: str, pos: int = 0) -> int:
    """Return the first position at or after ``pos`` that is not Unicode whitespace."""
    m = _SPACE.match(text, pos)
    return m.end() if m is not None else pos
