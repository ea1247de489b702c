"""The gateway's SSE reader (``_SSEData``) gives what ``httpx_sse.EventSource.aiter_sse`` gives, on every split.

``_SSEData`` runs httpx-sse's own decoders over the response's bytes without the five generators of
``aiter_sse`` (see its docstring), here over a body read as httpx's own transport gives it (empty pieces
included); the h1 transport's read is covered by the gateway's tests against real sockets. Whatever the body and however its bytes arrive, the data it returns
must be exactly the non-empty ``data`` of the events ``aiter_sse`` yields for the same response: the SSE
line endings (``\\n``, ``\\r``, ``\\r\\n``, a ``\\r\\n`` split between reads), multi-line data,
comments and other fields, events without a final blank line, invalid and cut UTF-8.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import httpx_sse
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow.gateway.upstreams._http import _body_read, _SSEData

pytestmark = pytest.mark.anyio


class _Pieces(httpx.AsyncByteStream):
    """The body's pieces as httpx's own transport gives them (an async iterator: an empty piece is not the end)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


def _response(pieces: list[bytes]) -> httpx.Response:
    return httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        stream=_Pieces(pieces),
        request=httpx.Request("POST", "http://upstream.invalid/completion"),
    )


async def _library(pieces: list[bytes]) -> list[str]:
    return [e.data async for e in httpx_sse.EventSource(_response(pieces)).aiter_sse() if e.data]


async def _ours(pieces: list[bytes], buffered: bool = False) -> list[str]:
    # buffered: take what is already read first, as the gateway's loop does (a read only when none is left)
    reader = _SSEData(_body_read(_response(pieces)))
    out: list[str] = []
    while True:
        data = reader.buffered() if buffered else None
        if data is None and (data := await reader.next()) is None:
            break
        out.append(data)
    assert reader.buffered() is None
    assert reader.finished
    assert await reader.next() is None  # and stays at the end
    return out


def _split(body: bytes, cuts: list[int]) -> list[bytes]:
    """``body`` cut at ``cuts`` (taken modulo its length; a cut at either end leaves an empty piece)."""
    points = [0, *sorted({c % (len(body) + 1) for c in cuts}), len(body)]
    return [body[a:b] for a, b in zip(points, points[1:], strict=False)]


LINES = st.sampled_from([
    "data: {\"content\":\"Hi\",\"stop\":false}",
    "data: é漢字 🙂",
    "data:no space",
    "data:  two spaces",
    "data",
    "data:",
    ": a comment",
    "event: message",
    "id: 7",
    "retry: 15",
    "retry: x",
    "unknown: field",
    "",
])
ENDS = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.tuples(LINES, ENDS), max_size=12))
    text = "".join(line + end for line, end in parts)
    if draw(st.booleans()):
        text += draw(LINES)  # no final line end
    raw = text.encode()
    if draw(st.booleans()):  # invalid UTF-8 somewhere, or a character cut at the end
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xe6\xbc", b"\xf0\x9f"])) + raw[at:]
    return raw


@settings(max_examples=300, deadline=None)
@given(body=bodies(), cuts=st.lists(st.integers(0, 10_000), max_size=8), buffered=st.booleans())
def test_same_data_as_aiter_sse_on_every_split(body: bytes, cuts: list[int], buffered: bool) -> None:
    pieces = _split(body, cuts)
    assert anyio.run(_ours, pieces, buffered) == anyio.run(_library, pieces)


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        # a CRLF split between two reads is one line end, not two (the second would end the event early)
        ([b"data: a\r", b"\ndata: b\r\n\r\n"], ["a\nb"]),
        # several events in one read come back one per call
        ([b"data: 1\n\ndata: 2\n\n: ping\n\ndata: 3\n\n"], ["1", "2", "3"]),
        # a multi-byte character cut between reads
        ([b"data: \xe6", b"\xbc\xa2\n\n"], ["漢"]),
        # the last event's blank line is a lone CR at the very end
        ([b"data: last\n\r"], ["last"]),
        # an event without its blank line at the end of the body is not dispatched (the SSE standard)
        ([b"data: 1\n\ndata: unfinished\n"], ["1"]),
        ([], []),
    ],
)
async def test_known_cases(pieces: list[bytes], expected: list[str]) -> None:
    assert await _ours(pieces) == expected
    assert await _ours(pieces, buffered=True) == expected
    assert await _library(pieces) == expected
