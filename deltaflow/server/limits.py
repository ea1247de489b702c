"""Server limits and access: API key, request body size, concurrent streams, engine idle timeout.

These are the guards :func:`deltaflow.server.create_app` puts in front of
the engine (see its docstring for the options):

* :func:`key_matches` compares a request's ``Authorization: Bearer`` /
  ``x-api-key`` header with the configured key in constant time
  (:func:`hmac.compare_digest`).
* :func:`read_body` reads a request body incrementally and stops as soon as
  it passes the limit (or at once when ``Content-Length`` announces more).
* :class:`StreamSlots` counts the engine streams in flight; a request beyond
  the limit is refused (429) instead of queued.
* :func:`idle_guard` wraps an engine's iterator: when the engine produces
  nothing for ``timeout`` seconds it closes the iterator and raises
  :class:`EngineIdleError`, which the pipeline turns into the protocol's
  error event.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

import anyio
from starlette.requests import Request

from ..errors import DeltaflowError

__all__ = ("BodyTooLarge", "EngineIdleError", "StreamSlots", "idle_guard", "key_matches", "read_body")


class EngineIdleError(DeltaflowError, TimeoutError):
    """The engine produced nothing for longer than the idle timeout."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(f"engine idle for {timeout:g} s")


class BodyTooLarge(Exception):
    """A request body over the limit (HTTP 413)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"the request body is larger than the limit of {limit} bytes")


def key_matches(headers: Mapping[str, str], key: str, *, anthropic: bool) -> bool:
    """Whether the request carries ``key``.

    OpenAI routes accept ``Authorization: Bearer KEY``; the Anthropic route
    accepts ``x-api-key: KEY`` or the Bearer form. Every candidate is compared
    with :func:`hmac.compare_digest` (constant time for equal lengths).
    """
    want = key.encode()
    ok = False
    auth = headers.get("authorization")
    if auth is not None:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer":
            ok |= hmac.compare_digest(token.strip().encode(), want)
    if anthropic:
        given = headers.get("x-api-key")
        if given is not None:
            ok |= hmac.compare_digest(given.strip().encode(), want)
    return ok


async def read_body(request: Request, limit: int | None) -> bytes:
    """The request body, read chunk by chunk and abandoned as soon as it passes ``limit`` bytes.

    Raises:
        BodyTooLarge: ``Content-Length`` announces more than ``limit``, or the
            body read so far is longer.
        starlette.requests.ClientDisconnect: the client left while sending.
    """
    if limit is None:
        return await request.body()
    announced = request.headers.get("content-length")
    if announced is not None:
        try:
            if int(announced) > limit:
                raise BodyTooLarge(limit)
        except ValueError:
            pass  # the server rejects a malformed Content-Length before us
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise BodyTooLarge(limit)
    return bytes(buf)


class StreamSlots:
    """A count of the engine streams in flight, refused beyond ``limit`` (None: no limit).

    All use is on one event loop, so plain counters suffice.
    """

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError("max_streams must be >= 1 or None")
        self.limit = limit
        self.active = 0

    def try_acquire(self) -> bool:
        """Take a slot; False when all are taken."""
        if self.limit is not None and self.active >= self.limit:
            return False
        self.active += 1
        return True

    def release(self) -> None:
        """Give a slot back."""
        self.active -= 1


async def _aclose(it: Any) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


async def idle_guard(source: AsyncIterable[Any], timeout: float) -> AsyncIterator[Any]:
    """Yield ``source``'s items; if one takes longer than ``timeout`` seconds, close ``source`` and raise.

    Only the time spent waiting on the engine counts (a slow client that
    holds the pipeline back does not). The engine's iterator is closed in
    every case: end, failure, timeout, or the consumer closing this one.

    Raises:
        EngineIdleError: the engine produced nothing for ``timeout`` seconds.
    """
    it = source.__aiter__()
    try:
        while True:
            item: Any = None
            with anyio.move_on_after(timeout) as scope:
                try:
                    item = await it.__anext__()
                except StopAsyncIteration:
                    return
            if scope.cancelled_caught:
                raise EngineIdleError(timeout)
            yield item
    finally:
        await _aclose(it)
