"""Small text helpers shared by the scanners."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

__all__ = ("decode_json_string", "has_surrogate", "json_string", "skip_json_ws", "skip_space", "trailing_run")

_encode = msgspec.json.encode
_decode = msgspec.json.decode

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


def trailing_run(
    text: str, pos: int, end: int, chars: str, limit: int, continues_long: bool
) -> tuple[int, bool | None]:
    """Where the run of ``chars`` that ends ``text[pos:end]`` begins, if it is short enough to be framing.

    A run longer than ``limit`` is text, and so is one that continues such a run released earlier
    (``continues_long``, when the segment is all ``chars``): the answer then depends on the run's length
    alone, not on where chunks ended. At most ``limit + 1`` characters are looked at.

    Returns:
        ``(start, long)``: ``start`` is where the run begins, or ``end`` when there is none or it is text;
        ``long`` is True when the segment ends in (or continues) a run that is too long, False when it
        ends a run begun in it (or has none), None when it is all ``chars`` and tells nothing new.
    """
    if end <= pos:
        return end, None
    if text[end - 1] not in chars:
        return end, False  # the common case: no slice
    start = max(pos, end - limit - 1)
    seg = text[start:end]
    core = seg.rstrip(chars)
    run = len(seg) - len(core)
    if run > limit or (not core and continues_long):
        return end, True
    return end - run, False if core else None


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """True if ``text`` holds a lone surrogate code point (not encodable as UTF-8)."""
    return _SURROGATE.search(text) is not None


def decode_json_string(source: str) -> Any:
    """Decode a small JSON value (a key, a name) from its source text.

    A string literal is decoded by msgspec (fifteen times faster); the stdlib
    decoder is the fallback because it accepts lone surrogates, raw or escaped
    (``"\\ud800"``), which models do write and msgspec rejects, and it gives
    the errors. Wherever msgspec decodes a string, both give the same text.
    """
    if source[:1] == '"':
        try:
            return _decode(source)
        except (msgspec.DecodeError, UnicodeEncodeError):
            pass
    return json.loads(source)


def json_string(text: str) -> str:
    """``text`` as a JSON string literal; lone surrogates are written as ``\\uXXXX`` escapes.

    Only the surrogates are escaped, everything else is written as without
    them, so that the JSON text of a value never depends on how it was split.
    """
    try:
        return _encode(text).decode()
    except UnicodeEncodeError:
        return _SURROGATE.sub(_escape_surrogate, json.dumps(text, ensure_ascii=False))


def _escape_surrogate(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"
