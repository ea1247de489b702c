"""SSEResponse at the ASGI interface: message order, heartbeats between events, nothing after the last body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import deltaflow
from deltaflow.sinks import ChatCompletionsFramer, SSEResponse

pytestmark = pytest.mark.anyio


async def _slow_source(chunks: list[str], pause: float) -> AsyncIterator[str]:
    for c in chunks:
        await anyio.sleep(pause)
        yield c


async def _run(response: SSEResponse, *, disconnect_after: float | None = None) -> list[dict[str, Any]]:
    """Drive ``response`` as an ASGI server would; return every message it sent."""
    sent: list[dict[str, Any]] = []
    gone = anyio.Event()
    leaves_at = None if disconnect_after is None else anyio.current_time() + disconnect_after

    async def receive() -> dict[str, Any]:  # a wait cut short by the heartbeat does not move the disconnect
        if leaves_at is None:
            await gone.wait()
        else:
            await anyio.sleep_until(leaves_at)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await response({"type": "http", "method": "POST"}, receive, send)
    return sent


def _bodies(sent: list[dict[str, Any]]) -> list[bytes]:
    return [m["body"] for m in sent if m["type"] == "http.response.body"]


@pytest.fixture(params=["native", "anyio-scope"])
def heartbeat_wait(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the heartbeat waits on asyncio: with ``asyncio.timeout`` (3.11+), or in an anyio scope (3.10, and trio)."""
    if request.param == "anyio-scope":
        import deltaflow.sinks.sse as sse

        monkeypatch.setattr(sse, "_asyncio_timeout", None)
    return str(request.param)


async def test_pings_come_between_events_and_nothing_follows_the_last_body(heartbeat_wait: str) -> None:
    """With a slow engine the heartbeat writes pings between data events; the final message ends the body."""
    chunks = ["Hello", " there", ", friend."]

    def opener() -> Any:
        return deltaflow.stream(_slow_source(chunks, 0.12), prefetch=0)

    sent = await _run(SSEResponse(opener, ChatCompletionsFramer("m"), done_marker=True, heartbeat=0.05))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = _bodies(sent)
    assert sent[-1]["more_body"] is False and bodies[-1] == b"data: [DONE]\n\n"
    assert all(m["more_body"] is True for m in sent[1:-1])
    assert b": ping\n\n" in bodies
    text = ""
    for body in bodies:
        for line in body.split(b"\n"):
            if line.startswith(b"data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
    assert text == "".join(chunks)


async def test_no_ping_while_events_flow() -> None:
    """A stream that writes more often than the heartbeat interval gets no ping."""

    def opener() -> Any:
        return deltaflow.stream(_slow_source([f"w{i} " for i in range(20)], 0.005), prefetch=0)

    sent = await _run(SSEResponse(opener, ChatCompletionsFramer("m"), heartbeat=1.0))
    assert b": ping\n\n" not in _bodies(sent)
    assert sent[-1]["more_body"] is False


@pytest.mark.parametrize("heartbeat", [None, 0.03])
async def test_a_disconnect_closes_the_engine_and_ends_the_response(heartbeat_wait: str, heartbeat: float | None) -> None:
    """http.disconnect cancels the response while the engine is silent; the engine's iterator is closed."""
    closed = anyio.Event()

    async def engine() -> AsyncIterator[str]:
        try:
            yield "first"
            await anyio.sleep(60)
            yield "never"
        finally:
            closed.set()

    def opener() -> Any:
        return deltaflow.stream(engine(), prefetch=0)

    with anyio.fail_after(5):
        sent = await _run(SSEResponse(opener, ChatCompletionsFramer("m"), heartbeat=heartbeat), disconnect_after=0.1)
    assert closed.is_set()
    assert not any(m.get("more_body") is False for m in sent)  # the body never got its end: the client left


async def test_an_open_stream_does_not_keep_its_opener_alive() -> None:
    """What the opener closes over (a planned request: prompt, token ids, body) is let go once the stream is open."""
    import gc
    import weakref

    class Planned:
        pass

    planned = Planned()
    gone_while_open: list[bool] = []
    ref = weakref.ref(planned)

    async def engine() -> AsyncIterator[str]:
        yield "first"
        gc.collect()
        gone_while_open.append(ref() is None)
        yield " second"

    def make_opener(plan: Planned) -> Any:
        def opener() -> Any:
            assert plan is not None
            return deltaflow.stream(engine(), prefetch=0)

        return opener

    response = SSEResponse(make_opener(planned), ChatCompletionsFramer("m"), done_marker=True, heartbeat=None)
    del planned
    sent = await _run(response)
    assert gone_while_open == [True]
    assert _bodies(sent)[-1] == b"data: [DONE]\n\n"
    with pytest.raises(RuntimeError):
        await _run(response)  # a response streams once

