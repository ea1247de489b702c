"""Server limits and access against a real server on 127.0.0.1 with real clients.

API key (OpenAI Bearer, Anthropic x-api-key, WebSocket handshake, the CLI
and its environment variable), request body size limit, concurrent stream
limit, engine idle timeout, and request validation (400 in each protocol's
error shape).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import anyio
import httpx
import openai
import pytest
import websockets.sync.client
from conftest_server import _free_port, start_server
from websockets.exceptions import ConnectionClosed

from deltaflow.server import EngineRequest, ModelInfo, create_app
from deltaflow.server.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_STREAMS

KEY = "sk-test-0123456789"
MODEL = "qwen3-weather"  # a bundled replay transcript
ROUTES = [("/v1/chat/completions", "openai"), ("/v1/responses", "openai"), ("/v1/messages", "anthropic")]


def _body(path: str, **extra: Any) -> dict[str, Any]:
    if path.endswith("responses"):
        return {"model": MODEL, "input": "hi", **extra}
    if path.endswith("messages"):
        return {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], **extra}
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def _assert_error_shape(r: httpx.Response, protocol: str, status: int, needle: str, kind: str | None = None) -> None:
    assert r.status_code == status, r.text
    data = r.json()
    if protocol == "anthropic":
        assert data["type"] == "error"
        assert needle in data["error"]["message"]
        if kind is not None:
            assert data["error"]["type"] == kind
    else:
        err = data["error"]
        assert needle in err["message"]
        assert set(err) >= {"message", "type", "code"}
        if kind is not None:
            assert kind in (err["type"], err["code"])


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start apps on loopback; all are stopped at the end of the test."""
    started: list[tuple[Any, threading.Thread]] = []

    def _start(app: Any) -> str:
        server, thread, base = start_server(app)
        started.append((server, thread))
        return base

    yield _start
    for server, _thread in started:
        server.should_exit = True
    for _, thread in started:
        thread.join(10)


class SlowEngine:
    """Yields one word every ``delay`` seconds; records how many streams are open and closed."""

    def __init__(self, delay: float = 0.05, words: int = 2000) -> None:
        self.delay = delay
        self.words = words
        self.open = 0
        self.closed = 0

    def models(self) -> list[ModelInfo]:
        return [ModelInfo("slow")]

    async def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        self.open += 1
        try:
            for _ in range(self.words):
                yield "word "
                await anyio.sleep(self.delay)
        finally:
            self.closed += 1


class StallEngine:
    """Yields ``before`` words, then produces nothing ever again (until closed)."""

    def __init__(self, before: int = 1) -> None:
        self.before = before
        self.closed = threading.Event()

    def models(self) -> list[ModelInfo]:
        return [ModelInfo("stall")]

    async def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        try:
            for _ in range(self.before):
                yield "hello "
            await anyio.sleep_forever()
            yield "never"  # pragma: no cover
        finally:
            self.closed.set()


def _wait_for(cond: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


# -- API key ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed() -> Iterator[str]:
    """The replay engine behind a server that requires KEY."""
    server, thread, base = start_server(create_app(api_key=KEY, heartbeat=5.0))
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


def test_openai_sdk_with_the_right_key_works_and_a_wrong_key_raises_authentication_error(keyed: str) -> None:
    """Chat Completions (stream and not), Responses and /v1/models accept Bearer KEY; a wrong key is a 401."""
    with openai.OpenAI(base_url=keyed + "/v1", api_key=KEY, max_retries=0) as oai:
        assert MODEL in [m.id for m in oai.models.list()]
        r = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].message.tool_calls
        chunks = list(oai.chat.completions.create(model=MODEL, messages=[], stream=True))
        assert chunks
        resp = oai.responses.create(model=MODEL, input="hi")
        assert resp.output
    with openai.OpenAI(base_url=keyed + "/v1", api_key="sk-wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as info:
            bad.chat.completions.create(model=MODEL, messages=[], stream=True)
        assert info.value.status_code == 401
        assert "invalid API key" in str(info.value)
        with pytest.raises(openai.AuthenticationError):
            bad.responses.create(model=MODEL, input="hi")
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()


def test_anthropic_sdk_with_x_api_key_or_bearer_works_and_a_wrong_key_raises_authentication_error(keyed: str) -> None:
    """/v1/messages accepts x-api-key (the SDK's api_key) or Bearer (auth_token); a wrong key is a 401."""
    with anthropic.Anthropic(base_url=keyed, api_key=KEY, max_retries=0) as claude:
        with claude.messages.stream(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as s:
            final = s.get_final_message()
        assert final.stop_reason == "tool_use"
    with anthropic.Anthropic(base_url=keyed, auth_token=KEY, api_key=None, max_retries=0) as bearer:
        m = bearer.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert m.content
    with anthropic.Anthropic(base_url=keyed, api_key="sk-wrong", max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError) as info:
            bad.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        assert info.value.status_code == 401
        assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


@pytest.mark.parametrize(("path", "protocol"), ROUTES)
@pytest.mark.parametrize(
    ("headers", "needle"),
    [({}, "missing API key"), ({"authorization": "Bearer nope"}, "invalid API key"), ({"authorization": KEY}, "invalid API key")],
    ids=["no header", "wrong key", "no Bearer scheme"],
)
def test_missing_or_wrong_key_is_401_in_the_protocol_error_shape(
    keyed: str, path: str, protocol: str, headers: dict[str, str], needle: str
) -> None:
    """Without the right key every route answers 401 with the protocol's authentication error."""
    r = httpx.post(keyed + path, json=_body(path), headers=headers, timeout=5)
    _assert_error_shape(r, protocol, 401, needle, "authentication_error" if protocol == "anthropic" else "invalid_api_key")
    assert r.headers["www-authenticate"] == "Bearer"


def test_models_needs_the_key_and_x_api_key_is_not_accepted_on_openai_routes(keyed: str) -> None:
    """GET /v1/models wants Bearer; x-api-key only counts on /v1/messages."""
    assert httpx.get(keyed + "/v1/models", timeout=5).status_code == 401
    assert httpx.get(keyed + "/v1/models", headers={"authorization": f"Bearer {KEY}"}, timeout=5).status_code == 200
    r = httpx.post(keyed + "/v1/chat/completions", json=_body("chat"), headers={"x-api-key": KEY}, timeout=5)
    assert r.status_code == 401
    r = httpx.post(keyed + "/v1/messages", json=_body("/v1/messages"), headers={"x-api-key": KEY}, timeout=5)
    assert r.status_code == 200


def test_websocket_checks_the_key_at_the_handshake(keyed: str) -> None:
    """No key: the server sends an authentication error and closes with 1008; with Bearer KEY it streams."""
    url = keyed.replace("http://", "ws://") + "/v1/ws"
    with websockets.sync.client.connect(url) as ws:
        err = json.loads(ws.recv(timeout=5))
        assert "missing API key" in err["error"]["message"]
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1008
    with websockets.sync.client.connect(url, additional_headers={"Authorization": "Bearer wrong"}) as ws:
        assert "invalid API key" in json.loads(ws.recv(timeout=5))["error"]["message"]
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1008
    with websockets.sync.client.connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(json.dumps({"protocol": "chat.completions", "model": MODEL, "messages": []}))
        n = sum(1 for _ in ws)
        assert n > 1 and ws.close_code == 1000


def _run_cli(args: list[str], env_key: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "DELTAFLOW_API_KEY"}
    if env_key is not None:
        env["DELTAFLOW_API_KEY"] = env_key
    proc = subprocess.Popen(
        [sys.executable, "-m", "deltaflow", "serve", "--port", str(port), "--tokens-per-second", "0", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, base
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "serve exited") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("deltaflow serve did not start")


@pytest.mark.parametrize("how", ["env", "option"])
def test_cli_serve_takes_the_key_from_the_option_or_the_environment(how: str) -> None:
    """`deltaflow serve --api-key KEY` and DELTAFLOW_API_KEY=KEY both protect the routes; the limits are applied."""
    args = ["--api-key", KEY] if how == "option" else []
    proc, base = _run_cli([*args, "--max-body-bytes", "2000", "--max-concurrent-streams", "4"], KEY if how == "env" else None)
    try:
        with openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0) as oai:
            assert oai.chat.completions.create(model=MODEL, messages=[]).choices
        with (
            openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0) as bad,
            pytest.raises(openai.AuthenticationError),
        ):
            bad.models.list()
        big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 3000}]}
        r = httpx.post(base + "/v1/chat/completions", json=big, headers={"authorization": f"Bearer {KEY}"}, timeout=5)
        assert r.status_code == 413
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_cli_defaults_match_create_app() -> None:
    """The serve options default to the library's limits."""
    from deltaflow import cli

    assert (cli.DEFAULT_MAX_BODY_BYTES, cli.DEFAULT_MAX_STREAMS) == (DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_STREAMS)
    args = cli._build_parser().parse_args(["serve"])
    assert (args.api_key, args.max_body_bytes, args.max_concurrent_streams, args.idle_timeout) == (
        None,
        DEFAULT_MAX_BODY_BYTES,
        DEFAULT_MAX_STREAMS,
        None,
    )
    with pytest.raises(SystemExit):
        cli._build_parser().parse_args(["serve", "--idle-timeout", "0"])


# -- body size ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_body() -> Iterator[str]:
    """The replay engine behind a server that accepts bodies up to 1000 bytes."""
    server, thread, base = start_server(create_app(max_body_bytes=1000, heartbeat=5.0))
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize(("path", "protocol"), ROUTES)
def test_body_over_the_limit_is_413_in_the_protocol_error_shape(small_body: str, path: str, protocol: str) -> None:
    """A body over max_body_bytes (announced by Content-Length, or chunked without one) is a 413."""
    big = json.dumps(_body(path, metadata={"pad": "x" * 2000})).encode()
    r = httpx.post(small_body + path, content=big, headers={"content-type": "application/json"}, timeout=5)
    _assert_error_shape(r, protocol, 413, "larger than the limit of 1000 bytes", "request_too_large")

    def chunked() -> Iterator[bytes]:
        for i in range(0, len(big), 100):
            yield big[i : i + 100]

    r = httpx.post(small_body + path, content=chunked(), headers={"content-type": "application/json"}, timeout=5)
    assert "content-length" not in r.request.headers
    _assert_error_shape(r, protocol, 413, "larger than the limit", "request_too_large")
    ok = httpx.post(small_body + path, json=_body(path), timeout=5)
    assert ok.status_code == 200


def test_announced_content_length_over_the_limit_is_refused_before_the_body_is_sent(small_body: str) -> None:
    """Content-Length: 1 GB gets a 413 at once, without the server waiting for the body."""
    host, port = small_body.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(
            b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000\r\n\r\n{\"model\":"
        )
        t0 = time.monotonic()
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        assert time.monotonic() - t0 < 2
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["error"]["type"] == "request_too_large"


def test_sdks_see_413_for_an_oversized_request(small_body: str) -> None:
    """The official SDKs surface the 413 as an API status error with the server's message."""
    with openai.OpenAI(base_url=small_body + "/v1", api_key="t", max_retries=0) as oai:
        with pytest.raises(openai.APIStatusError) as info:
            oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 5000}], stream=True)
        assert info.value.status_code == 413
    with anthropic.Anthropic(base_url=small_body, api_key="t", max_retries=0) as claude:
        with pytest.raises(anthropic.APIStatusError) as ainfo:
            claude.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x" * 5000}])
        assert ainfo.value.status_code == 413


def test_websocket_request_over_the_limit_closes_with_1009(small_body: str) -> None:
    """A first WebSocket message over max_body_bytes gets the error and close code 1009."""
    url = small_body.replace("http://", "ws://") + "/v1/ws"
    with websockets.sync.client.connect(url) as ws:
        ws.send(json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]}))
        err = json.loads(ws.recv(timeout=5))
        assert err["error"]["code"] == "request_too_large"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1009


# -- concurrent streams -------------------------------------------------------------------


def test_concurrent_stream_limit_gives_429_and_a_closed_stream_frees_its_slot(serve: Any) -> None:
    """Hold N streams open: the N+1th gets a 429 with Retry-After (SDKs raise RateLimitError); closing one frees a slot."""
    n = 3
    engine = SlowEngine()
    app = create_app(engine, model="slow", max_streams=n, heartbeat=5.0)
    base = serve(app)
    slots = app.state.deltaflow.slots
    with httpx.Client(timeout=10) as client:
        held = []  # (context manager, line iterator): dropping the iterator would close the connection
        for _ in range(n):
            cm = client.stream("POST", base + "/v1/chat/completions", json={"model": "slow", "messages": [], "stream": True})
            r = cm.__enter__()
            assert r.status_code == 200
            lines = r.iter_lines()
            next(lines)
            held.append((cm, lines))
        assert slots.active == n
        over = httpx.post(base + "/v1/chat/completions", json={"model": "slow", "messages": [], "stream": True}, timeout=5)
        _assert_error_shape(over, "openai", 429, f"too many concurrent streams: this server allows {n} at a time", "rate_limit_exceeded")
        assert over.headers["retry-after"] == "1"
        # Non-streaming requests and the other protocols are counted too.
        r = httpx.post(base + "/v1/messages", json={"model": "slow", "max_tokens": 5, "messages": []}, timeout=5)
        _assert_error_shape(r, "anthropic", 429, "too many concurrent streams", "rate_limit_error")
        with (
            openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as oai,
            pytest.raises(openai.RateLimitError, match="too many concurrent streams"),
        ):
            oai.responses.create(model="slow", input="x", stream=True)
        with (
            anthropic.Anthropic(base_url=base, api_key="t", max_retries=0) as claude,
            pytest.raises(anthropic.RateLimitError),
            claude.messages.stream(model="slow", max_tokens=5, messages=[]) as s,
        ):
            for _ in s:
                pass
        url = base.replace("http://", "ws://") + "/v1/ws"
        with websockets.sync.client.connect(url) as ws:
            ws.send(json.dumps({"model": "slow", "messages": []}))
            assert "too many concurrent streams" in json.loads(ws.recv(timeout=5))["error"]["message"]
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=5)
            assert ws.close_code == 1013

        held.pop()[0].__exit__(None, None, None)  # the client disconnects mid-stream
        assert _wait_for(lambda: slots.active == n - 1), "the slot was not released after the disconnect"
        with client.stream("POST", base + "/v1/chat/completions", json={"model": "slow", "messages": [], "stream": True}) as r:
            assert r.status_code == 200
            assert any("word" in line for line in itertools.islice(r.iter_lines(), 20))
        for cm, _ in held:
            cm.__exit__(None, None, None)
    assert _wait_for(lambda: slots.active == 0)
    assert _wait_for(lambda: engine.closed == engine.open)


def test_finished_streams_release_their_slots(serve: Any) -> None:
    """With max_streams=1, many sequential streams (SSE, non-streaming, WebSocket) all succeed."""
    app = create_app(max_streams=1, heartbeat=5.0)
    base = serve(app)
    with openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as oai:
        for _ in range(3):
            assert list(oai.chat.completions.create(model=MODEL, messages=[], stream=True))
            assert oai.responses.create(model=MODEL, input="x").output
    url = base.replace("http://", "ws://") + "/v1/ws"
    for _ in range(2):
        with websockets.sync.client.connect(url) as ws:
            ws.send(json.dumps({"protocol": "messages", "model": MODEL, "max_tokens": 5, "messages": []}))
            for _ in ws:
                pass
            assert ws.close_code == 1000
    assert _wait_for(lambda: app.state.deltaflow.slots.active == 0)


# -- idle timeout --------------------------------------------------------------------------


def test_stalled_engine_ends_the_stream_with_an_idle_error_after_heartbeats(serve: Any) -> None:
    """Heartbeats go out while the engine is silent; after idle_timeout the stream ends with the error and the engine is closed."""
    engine = StallEngine()
    app = create_app(engine, model="stall", idle_timeout=0.8, heartbeat=0.2)
    base = serve(app)
    lines: list[str] = []
    t0 = time.monotonic()
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", base + "/v1/chat/completions", json={"model": "stall", "messages": [], "stream": True}) as r,
    ):
        lines = list(r.iter_lines())
    elapsed = time.monotonic() - t0
    assert 0.7 < elapsed < 5
    pings = [i for i, line in enumerate(lines) if line.startswith(": ping")]
    errors = [i for i, line in enumerate(lines) if line.startswith("data:") and '"error"' in line]
    assert len(pings) >= 2 and errors and max(pings) < errors[0]
    assert "engine idle for 0.8 s" in lines[errors[0]]
    assert any("hello" in line for line in lines[: errors[0]])
    assert engine.closed.wait(2), "the engine iterator was not closed"
    assert _wait_for(lambda: app.state.deltaflow.slots.active == 0)


def test_idle_timeout_reaches_every_protocol_as_its_error(serve: Any) -> None:
    """The OpenAI and Anthropic SDKs raise the idle error; the WebSocket closes with 1011; non-streaming is a 504."""
    engine = StallEngine(before=0)
    base = serve(create_app(engine, model="stall", idle_timeout=0.3, heartbeat=0.1))
    with openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as oai:
        with pytest.raises(openai.APIError, match="engine idle for 0.3 s"):
            for _ in oai.chat.completions.create(model="stall", messages=[], stream=True):
                pass
        events = list(oai.responses.create(model="stall", input="x", stream=True))
        assert events[-1].type == "error" and "engine idle for 0.3 s" in events[-1].message
    with (
        anthropic.Anthropic(base_url=base, api_key="t", max_retries=0) as claude,
        pytest.raises(anthropic.APIError, match="engine idle for 0.3 s"),
        claude.messages.stream(model="stall", max_tokens=5, messages=[]) as s,
    ):
        for _ in s:
            pass
    url = base.replace("http://", "ws://") + "/v1/ws"
    with websockets.sync.client.connect(url) as ws:
        ws.send(json.dumps({"protocol": "messages", "model": "stall", "max_tokens": 5, "messages": []}))
        messages = []
        with pytest.raises(ConnectionClosed):
            while True:
                messages.append(json.loads(ws.recv(timeout=5)))
        assert messages[-1]["type"] == "error" and "engine idle" in messages[-1]["error"]["message"]
        assert ws.close_code == 1011
    r = httpx.post(base + "/v1/chat/completions", json={"model": "stall", "messages": []}, timeout=5)
    assert r.status_code == 504 and r.json()["error"]["message"] == "engine idle for 0.3 s"


def test_a_steady_engine_slower_than_nothing_is_not_idle(serve: Any) -> None:
    """A stream whose chunks each arrive within idle_timeout runs to the end, however long it takes in total."""
    engine = SlowEngine(delay=0.05, words=20)
    base = serve(create_app(engine, model="slow", idle_timeout=0.5))
    with openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as oai:
        text = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(model="slow", messages=[], stream=True) if c.choices)
    assert text == "word " * 20


# -- validation ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain() -> Iterator[str]:
    """One replay server (default limits, no key) for the validation cases."""
    server, thread, base = start_server(create_app(heartbeat=5.0))
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)



BAD = [
    ("/v1/chat/completions", {"messages": "hi"}, "'messages' is required and must be a list"),
    ("/v1/chat/completions", {"messages": ["hi"]}, "messages[0] must be an object"),
    ("/v1/chat/completions", {"messages": [{"content": "x"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"max_tokens": "10"}, "'max_tokens' must be a positive integer"),
    ("/v1/chat/completions", {"max_tokens": 0}, "'max_tokens' must be a positive integer"),
    ("/v1/chat/completions", {"stream": "yes"}, "'stream' must be a boolean"),
    ("/v1/chat/completions", {"tools": {"name": "f"}}, "tools must be a list"),
    ("/v1/chat/completions", {"tool_choice": "sometimes"}, "'tool_choice' must be one of none, auto, required"),
    ("/v1/chat/completions", {"tool_choice": 3}, "'tool_choice' must be a string or an object"),
    ("/v1/chat/completions", {"tool_choice": {"type": "function", "function": {}}}, "function.name"),
    ("/v1/chat/completions", {"tools": [{"name": "f", "parameters": {}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}, "'g', which is not in 'tools'"),
    ("/v1/responses", {"input": 5}, "'input' must be a string or a list"),
    ("/v1/responses", {"max_output_tokens": -1}, "'max_output_tokens' must be a positive integer"),
    ("/v1/responses", {"stream": 1}, "'stream' must be a boolean"),
    ("/v1/responses", {"tools": "f"}, "tools must be a list"),
    ("/v1/responses", {"tool_choice": {"type": "function"}}, "needs a string 'name'"),
    ("/v1/messages", {"messages": {"role": "user"}}, "'messages' is required and must be a list"),
    ("/v1/messages", {"messages": [{"role": "tool", "content": "x"}]}, "must be 'user', 'assistant' or 'system'"),
    ("/v1/messages", {"max_tokens": None}, "'max_tokens' is required and must be a positive integer"),
    ("/v1/messages", {"max_tokens": True}, "'max_tokens' is required and must be a positive integer"),
    ("/v1/messages", {"max_tokens": 1.5}, "'max_tokens' is required and must be a positive integer"),
    ("/v1/messages", {"stream": "true"}, "'stream' must be a boolean"),
    ("/v1/messages", {"tools": [1]}, "tools[0] must be an object"),
    ("/v1/messages", {"tool_choice": "auto"}, "'tool_choice' must be an object with type one of auto, any, tool, none"),
    ("/v1/messages", {"tool_choice": {"type": "tool"}}, "needs a string 'name'"),
    ("/v1/messages", {"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}}, "not in 'tools'"),
]


@pytest.mark.parametrize(("path", "override", "needle"), BAD, ids=[f"{p.rsplit('/', 1)[1]}:{n}" for p, _, n in BAD])
def test_wrong_types_are_400_in_the_protocol_error_shape(
    plain: str, path: str, override: dict[str, Any], needle: str
) -> None:
    """Wrong types of messages, max_tokens, stream, tools and tool_choice values are a 400 naming the field."""
    base = plain
    body = {**_body(path), **override}
    r = httpx.post(base + path, json=body, timeout=5)
    protocol = "anthropic" if path.endswith("messages") else "openai"
    _assert_error_shape(r, protocol, 400, needle, "invalid_request_error")


def test_valid_tool_choices_are_accepted(plain: str) -> None:
    """The documented tool_choice forms pass validation."""
    base = plain
    tools_oai = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    cases = [
        ("/v1/chat/completions", {"tools": tools_oai, "tool_choice": "required"}),
        ("/v1/chat/completions", {"tools": tools_oai, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
        ("/v1/chat/completions", {"stream": None, "max_completion_tokens": 5}),
        ("/v1/responses", {"tools": [{"type": "function", "name": "get_weather", "parameters": {}}], "tool_choice": {"type": "function", "name": "get_weather"}}),
        ("/v1/messages", {"tools": [{"name": "get_weather", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "get_weather"}}),
        ("/v1/messages", {"tool_choice": {"type": "none"}}),
    ]
    for path, override in cases:
        r = httpx.post(base + path, json={**_body(path), **override}, timeout=5)
        assert r.status_code == 200, (path, override, r.text)


def test_websocket_unknown_protocol_and_bad_fields_close_1008_with_the_error(plain: str) -> None:
    """An unknown protocol, or a bad field, gets the error (in that protocol's shape when known) and close 1008."""
    url = plain.replace("http://", "ws://") + "/v1/ws"
    with websockets.sync.client.connect(url) as ws:
        ws.send(json.dumps({"protocol": "completions", "model": MODEL, "messages": []}))
        err = json.loads(ws.recv(timeout=5))
        assert "'protocol' must be one of chat.completions, responses, messages" in err["error"]["message"]
        assert err["error"]["type"] == "invalid_request_error"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1008
    with websockets.sync.client.connect(url) as ws:
        ws.send(json.dumps({"protocol": "messages", "model": MODEL, "max_tokens": "5", "messages": []}))
        err = json.loads(ws.recv(timeout=5))
        assert err["type"] == "error" and "'max_tokens'" in err["error"]["message"]
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        assert ws.close_code == 1008
