"""Small text helpers: decoding a JSON string literal."""

from __future__ import annotations

import json

import pytest

from deltaflow._core.text import decode_json_string

SOURCES = [
    '"name"',
    '"write_file"',
    '"caf\\u00e9 \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t"',
    '"東京 😀"',
    '"\\ud83d\\ude00"',
    '"\\ud800"',  # an escaped lone surrogate: msgspec refuses it, the stdlib decodes it
    '"\\udc00x"',
    '"\\ud800\\ud800"',
    '"\ud800"',  # a raw lone surrogate
    '"a\\u0000b"',
    '""',
    "12",
    "true",
]


@pytest.mark.parametrize("source", SOURCES, ids=repr)
def test_decode_json_string_is_the_stdlib_decoders_answer(source: str) -> None:
    """Decoded by msgspec or by the fallback, the value is what json.loads gives."""
    assert decode_json_string(source) == json.loads(source)


@pytest.mark.parametrize("source", ['"a\nb"', '"\\x"', '"a" x', '"abc'], ids=repr)
def test_decode_json_string_raises_the_stdlib_error(source: str) -> None:
    """Text that is not one JSON value raises json's error, as before."""
    with pytest.raises(json.JSONDecodeError):
        decode_json_string(source)
