"""Server behaviour with real connections: errors, disconnects, heartbeats, custom engines."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import anyio
import httpx
import openai
import pytest
from conftest_server import start_server

from deltaflow import TokenChunk
from deltaflow.server import EngineRequest, create_app


class RecordingEngine:
    """An engine whose stream records how it ended (for disconnect tests)."""

    def __init__(self, chunks: list[Any], delay: float = 0.0, fail_after: int | None = None) -> None:
        self.chunks = chunks
        self.delay = delay
        self.fail_after = fail_after
        self.closed = threading.Event()
        self.pulled = 0

    def models(self) -> list[Any]:
        from deltaflow.server import ModelInfo

        return [ModelInfo("rec", tool_parser="hermes", reasoning_parser="qwen3")]

    async def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        try:
            for i, c in enumerate(self.chunks):
                if self.fail_after is not None and i == self.fail_after:
                    raise RuntimeError("engine exploded")
                self.pulled += 1
                yield c
                await anyio.sleep(self.delay)
        finally:
            self.closed.set()


@pytest.fixture
def recording() -> Iterator[tuple[RecordingEngine, str]]:
    """A slow recording engine behind a live server."""
    engine = RecordingEngine(["<think>x</think>"] + ["word "] * 2000, delay=0.01)
    server, thread, base = start_server(create_app(engine, heartbeat=0.2))
    try:
        yield engine, base
    finally:
        server.should_exit = True
        thread.join(10)


def test_client_disconnect_closes_the_engine_iterator_within_a_second(recording: tuple[RecordingEngine, str]) -> None:
    """A client that leaves mid-stream makes the server close the engine's iterator promptly."""
    engine, base = recording
    with httpx.Client(timeout=10) as client, client.stream(
        "POST", base + "/v1/chat/completions", json={"model": "rec", "messages": [], "stream": True}
    ) as r:
        for line in r.iter_lines():
            if "word" in line:
                break
    t0 = time.monotonic()
    assert engine.closed.wait(1.0), "the engine iterator was not closed within a second"
    assert time.monotonic() - t0 < 1.0
    assert engine.pulled < 2000


def test_engine_failure_mid_stream_becomes_the_openai_error_and_the_sdk_raises() -> None:
    """An exception in the engine reaches an OpenAI client as an error payload, which the SDK raises."""
    engine = RecordingEngine(["hello ", "world "] * 5, fail_after=4)
    server, thread, base = start_server(create_app(engine))
    try:
        with (
            openai.OpenAI(base_url=base + "/v1", api_key="t") as oai,
            pytest.raises(openai.APIError, match="engine exploded"),
        ):
            for _ in oai.chat.completions.create(model="rec", messages=[], stream=True):
                pass
        with (
            anthropic.Anthropic(base_url=base, api_key="t") as claude,
            pytest.raises(anthropic.APIError, match="engine exploded"),
            claude.messages.stream(model="rec", max_tokens=10, messages=[]) as s,
        ):
            for _ in s:
                pass
        # The server stays healthy for the next request.
        r = httpx.get(base + "/v1/models", timeout=5)
        assert r.status_code == 200
    finally:
        server.should_exit = True
        thread.join(10)


def test_idle_stream_gets_heartbeat_comments(recording: tuple[RecordingEngine, str]) -> None:
    """While the engine is silent, the SSE stream carries ': ping' comment lines."""
    engine, base = recording
    engine.delay = 0.5
    pings = 0
    with httpx.Client(timeout=10) as client, client.stream(
        "POST", base + "/v1/chat/completions", json={"model": "rec", "messages": [], "stream": True}
    ) as r:
        for line in r.iter_lines():
            if line.startswith(": ping"):
                pings += 1
                if pings == 2:
                    break
    assert pings == 2


@pytest.mark.parametrize(
    ("path", "protocol"),
    [("/v1/chat/completions", "openai"), ("/v1/responses", "openai"), ("/v1/messages", "anthropic")],
)
@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"model": "qwen3-weather", "messages": [], "input": "x", "max_tokens": 5, "tools": [{"type": "function"}]}', "tools[0]"),
        (b'{"messages": [], "input": "x", "max_tokens": 5}', "'model' is required"),
    ],
    ids=["malformed JSON", "invalid tools", "missing model"],
)
def test_bad_requests_get_400_in_the_protocol_error_shape(
    live_server: Any, path: str, protocol: str, body: bytes, needle: str
) -> None:
    """Malformed JSON, an invalid tools list or a missing model is a 400 with a clear message in the protocol's shape."""
    r = httpx.post(live_server.base + path, content=body, headers={"content-type": "application/json"}, timeout=5)
    assert r.status_code == 400
    data = r.json()
    if protocol == "anthropic":
        assert data["type"] == "error" and needle in data["error"]["message"]
    else:
        assert needle in data["error"]["message"] and data["error"]["type"] == "invalid_request_error"


def test_unknown_model_is_404_listing_the_models(live_server: Any) -> None:
    """An unknown model id is a 404 naming the available ids."""
    r = httpx.post(live_server.base + "/v1/chat/completions", json={"model": "nope", "messages": []}, timeout=5)
    assert r.status_code == 404
    assert "qwen3-weather" in r.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_generation_endpoints_take_post_only(live_server: Any, path: str) -> None:
    """The generation endpoints (plain ASGI apps under starlette's router) still refuse other methods."""
    r = httpx.get(live_server.base + path, timeout=5)
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_users_middleware_and_exception_handlers_apply_to_generation_endpoints(path: str) -> None:
    """A user's middleware wraps a generation request, and an exception that escapes the endpoint (here from its
    planning step) reaches the app's own exception handlers, as for any starlette endpoint."""
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    app = create_app(RecordingEngine(["x"]))

    async def refuse(protocol: str, raw: Any) -> Any:
        raise LookupError("no models today")

    app.state.deltaflow.accept = refuse
    seen: list[str] = []

    async def tag(request: Request, call_next: Any) -> Any:
        seen.append(request.url.path)
        response = await call_next(request)
        response.headers["x-user-middleware"] = "1"
        return response

    async def lookup_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"handled": str(exc)}, status_code=418)

    app.add_middleware(BaseHTTPMiddleware, dispatch=tag)
    app.add_exception_handler(LookupError, lookup_error)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        body = {"model": "rec", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        r = await client.post(path, json=body)
    assert (r.status_code, r.json()) == (418, {"handled": "no models today"})
    assert r.headers["x-user-middleware"] == "1"
    assert seen == [path]


@pytest.mark.anyio
@pytest.mark.parametrize("root_path", ["", "/api"])
async def test_generation_requests_skip_starlettes_stack_only_on_a_plain_app(root_path: str) -> None:
    """A plain app calls the generation endpoints directly (starlette's middleware stack is never built for
    them); under a root_path, or once a user has added middleware, they take starlette's way."""
    from starlette.middleware import Middleware

    body = {"model": "rec", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    app = create_app(RecordingEngine(["x"]))
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.post(root_path + "/v1/chat/completions", json=body)
        assert r.status_code == 200 and '"x"' in r.text and r.text.endswith("data: [DONE]\n\n")
        assert (app.middleware_stack is None) == (root_path == "")
        assert (await client.get(root_path + "/v1/models")).status_code == 200
        assert app.middleware_stack is not None  # any other request builds it

    seen: list[str] = []

    class Tag:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            seen.append(scope["path"])
            await self.inner(scope, receive, send)

    app = create_app(RecordingEngine(["x"]))
    app.user_middleware.insert(0, Middleware(Tag))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    assert seen == ["/v1/chat/completions"]


@pytest.mark.anyio
@pytest.mark.parametrize("root_path", ["", "/api"])
async def test_an_unexpected_failure_is_a_500_either_way(root_path: str) -> None:
    """An exception that escapes a generation endpoint reaches the server (a 500), whether the request took
    the direct way or starlette's (whose error middleware answers 500 and raises it on)."""
    app = create_app(RecordingEngine(["x"]))

    async def broken(protocol: str, raw: Any) -> Any:
        raise RuntimeError("a bug")

    app.state.deltaflow.accept = broken
    body = {"model": "rec", "messages": [{"role": "user", "content": "hi"}]}
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with pytest.raises(RuntimeError, match="a bug"):
            await client.post(root_path + "/v1/chat/completions", json=body)
    quiet = httpx.ASGITransport(app=app, root_path=root_path, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=quiet, base_url="http://test") as client:
        assert (await client.post(root_path + "/v1/chat/completions", json=body)).status_code == 500


def test_tool_choice_none_disables_tool_parsing(live_server: Any) -> None:
    """With tool_choice="none" the tool blocks stay content text."""
    r = httpx.post(
        live_server.base + "/v1/chat/completions",
        json={"model": "qwen3-weather", "messages": [], "tool_choice": "none"},
        timeout=5,
    )
    msg = r.json()["choices"][0]["message"]
    assert "tool_calls" not in msg
    assert "<tool_call>" in msg["content"]


def test_models_lists_one_id_per_transcript(live_server: Any) -> None:
    """GET /v1/models lists the bundled transcripts."""
    ids = [m["id"] for m in httpx.get(live_server.base + "/v1/models", timeout=5).json()["data"]]
    assert {"qwen3-weather", "qwen3-haiku", "qwen3-coding-agent"} <= set(ids)


def test_custom_function_engine_with_token_ids(shared: Any) -> None:
    """create_app(engine=fn, tokenizer=...) streams a user's engine of token ids through the parsers."""
    from deltaflow.testing import load_tokenizer

    tok = load_tokenizer("qwen3")
    text = '<think>ok</think>Sure.<tool_call>{"name": "f", "arguments": {"x": "東京"}}</tool_call>'
    ids = tok.encode(text, add_special_tokens=False).ids

    async def engine(request: EngineRequest) -> AsyncIterator[Any]:
        for i in range(0, len(ids), 3):
            yield TokenChunk(token_ids=ids[i : i + 3])

    server, thread, base = start_server(
        create_app(engine, tool_parser="hermes", reasoning_parser="qwen3", tokenizer=tok, model="mine")
    )
    try:
        with (
            openai.OpenAI(base_url=base + "/v1", api_key="t") as oai,
            oai.chat.completions.stream(model="mine", messages=[]) as s,
        ):
            for _ in s:
                pass
            msg = s.get_final_completion().choices[0].message
        assert msg.content == "Sure."
        assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []] == [("f", {"x": "東京"})]
    finally:
        server.should_exit = True
        thread.join(10)
