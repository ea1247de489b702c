"""Anthropic Messages on a real server with the official anthropic SDK: thinking signatures and error types."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import anyio
import httpx
import pytest
import websockets.sync.client
from conftest_server import start_server
from websockets.exceptions import ConnectionClosed

from deltaflow import ReasoningSigner, TokenChunk
from deltaflow.server import EngineRequest, ModelInfo, create_app

KEY = "signing-key-for-tests"
THINKING = "The user greets me. I greet back."
MESSAGES = [{"role": "user", "content": "hi"}]


class Engines:
    """One engine serving several behaviours, one model id each."""

    def __init__(self) -> None:
        self.release = threading.Event()  # lets the "held" model end
        self.app: Any = None

    def models(self) -> list[ModelInfo]:
        return [ModelInfo(name, reasoning_parser="qwen3") for name in ("think", "cut", "boom", "stall", "held")]

    async def generate(self, request: EngineRequest) -> AsyncIterator[Any]:
        model = request.model
        if model == "think":
            yield TokenChunk(text="<think>The user greets me. ")
            yield TokenChunk(text="I greet back.</think>")
            yield TokenChunk(text="Hello!", finish_reason="stop")
        elif model == "cut":  # the answer stops inside the thinking
            yield TokenChunk(text="<think>The user greets me. ")
            yield TokenChunk(text="I greet back.", finish_reason="length")
        elif model == "boom":
            yield TokenChunk(text="<think>hm</think>Hel")
            raise RuntimeError("engine exploded")
        elif model == "stall":
            yield TokenChunk(text="<think>hm</think>Hel")
            await anyio.sleep_forever()
        else:  # held: streams until released
            yield TokenChunk(text="<think>x</think>")
            while not self.release.is_set():
                yield TokenChunk(text="word ")
                await anyio.sleep(0.02)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Engines]]:
    """A server with a signing key, an idle timeout and a limit of two streams at once."""
    engines = Engines()
    app = create_app(engines, signing_key=KEY, idle_timeout=0.5, max_streams=2, max_body_bytes=4000, heartbeat=5.0)
    engines.app = app
    srv, thread, base = start_server(app)
    try:
        yield base, engines
    finally:
        engines.release.set()
        srv.should_exit = True
        thread.join(10)


@pytest.fixture
def claude(server: tuple[str, Engines]) -> Iterator[anthropic.Anthropic]:
    """An anthropic client without retries (a retried 429 or 5xx would hide the first answer)."""
    with anthropic.Anthropic(base_url=server[0], api_key="t", max_retries=0) as client:
        yield client


# -- thinking signatures ---------------------------------------------------------------------


def test_streamed_thinking_block_ends_with_a_signature_that_verifies(claude: anthropic.Anthropic) -> None:
    """messages.stream: a signature_delta right before the thinking block's stop; the signer with the key accepts it."""
    with claude.messages.stream(model="think", max_tokens=64, messages=MESSAGES) as stream:
        events = list(stream)
        final = stream.get_final_message()
    raw = [e for e in events if e.type in ("content_block_start", "content_block_delta", "content_block_stop")]
    first_block = [e for e in raw if e.index == 0]
    assert [e.type if e.type != "content_block_delta" else e.delta.type for e in first_block] == [
        "content_block_start",
        "thinking_delta",
        "thinking_delta",
        "signature_delta",
        "content_block_stop",
    ]
    thinking = final.content[0]
    assert thinking.type == "thinking" and thinking.thinking == THINKING
    signature = thinking.signature
    assert signature and signature == first_block[3].delta.signature
    signer = ReasoningSigner(KEY)
    assert signer.verify(THINKING, signature)
    assert not signer.verify(THINKING + " ", signature)  # tampered text
    assert not signer.verify(THINKING, signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB"))  # tampered signature
    assert not ReasoningSigner(KEY + "x").verify(THINKING, signature)  # another key
    assert not ReasoningSigner(KEY.encode()).verify("another text", signature)
    assert [b.type for b in final.content] == ["thinking", "text"] and final.content[1].text == "Hello!"


def test_non_streaming_thinking_block_has_the_same_signature(claude: anthropic.Anthropic) -> None:
    """messages.create: the thinking block carries the same, verifiable signature as the stream."""
    m = claude.messages.create(model="think", max_tokens=64, messages=MESSAGES)
    thinking = m.content[0]
    assert thinking.type == "thinking" and thinking.thinking == THINKING
    assert ReasoningSigner(KEY).verify(THINKING, thinking.signature)
    assert thinking.signature == ReasoningSigner(KEY).sign(THINKING)
    assert [b.type for b in m.content] == ["thinking", "text"] and m.stop_reason == "end_turn"


def test_a_thinking_block_cut_by_the_finish_is_signed_too(claude: anthropic.Anthropic) -> None:
    """An answer that stops inside its thinking (max_tokens) still gets the block's signature before its stop."""
    with claude.messages.stream(model="cut", max_tokens=64, messages=MESSAGES) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas[-1] == "signature_delta"
    assert final.stop_reason == "max_tokens"
    assert ReasoningSigner(KEY).verify(THINKING, final.content[0].signature)
    body = claude.messages.create(model="cut", max_tokens=64, messages=MESSAGES)
    assert body.content[0].signature == final.content[0].signature


def test_without_a_signing_key_the_app_signs_with_its_per_process_key() -> None:
    """create_app() without signing_key: signatures verify with the app's signer only (and are not empty)."""
    engines = Engines()
    app = create_app(engines)
    srv, thread, base = start_server(app)
    try:
        with anthropic.Anthropic(base_url=base, api_key="t", max_retries=0) as client:
            m = client.messages.create(model="think", max_tokens=64, messages=MESSAGES)
        signature = m.content[0].signature
        assert signature.startswith("dfs1.")
        assert app.state.deltaflow.signer.verify(THINKING, signature)
        assert ReasoningSigner().verify(THINKING, signature)  # the same per-process key
        assert not ReasoningSigner(KEY).verify(THINKING, signature)
    finally:
        srv.should_exit = True
        thread.join(10)


def test_create_app_refuses_an_empty_signing_key() -> None:
    """An empty key is a ValueError with a clear message, not a silent weak key."""
    with pytest.raises(ValueError, match="signing key is empty"):
        create_app(Engines(), signing_key="")


# -- error types -----------------------------------------------------------------------------


def _error_type(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    assert isinstance(body, dict) and body["type"] == "error"
    return str(body["error"]["type"])


@pytest.mark.parametrize(
    ("kwargs", "exc_class", "status", "kind"),
    [
        ({"model": "think", "max_tokens": 0}, anthropic.BadRequestError, 400, "invalid_request_error"),
        ({"model": "nope", "max_tokens": 5}, anthropic.NotFoundError, 404, "not_found_error"),
        ({"model": "think", "max_tokens": 5, "metadata": {"user_id": "x" * 5000}}, anthropic.ContentTooLargeError, 413, "request_too_large"),
    ],
    ids=["bad request", "unknown model", "body too large"],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_client_errors_have_anthropic_types(
    claude: anthropic.Anthropic, kwargs: dict[str, Any], exc_class: type[Exception], status: int, kind: str, streaming: bool
) -> None:
    """400, 404 and 413 raise the SDK's exception class for the status, with the Anthropic error type."""
    with pytest.raises(exc_class) as info:
        if streaming:
            with claude.messages.stream(messages=MESSAGES, **kwargs) as s:
                list(s)
        else:
            claude.messages.create(messages=MESSAGES, **kwargs)
    assert isinstance(info.value, anthropic.APIStatusError)
    assert info.value.status_code == status and _error_type(info.value) == kind


def test_authentication_error_type() -> None:
    """A wrong key is a 401 authentication_error (AuthenticationError), streaming or not."""
    srv, thread, base = start_server(create_app(Engines(), api_key="right", heartbeat=5.0))
    try:
        with anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0) as client:
            with pytest.raises(anthropic.AuthenticationError) as info:
                client.messages.create(model="think", max_tokens=5, messages=MESSAGES)
            assert _error_type(info.value) == "authentication_error"
            with (
                pytest.raises(anthropic.AuthenticationError),
                client.messages.stream(model="think", max_tokens=5, messages=MESSAGES) as s,
            ):
                list(s)
    finally:
        srv.should_exit = True
        thread.join(10)


def test_busy_server_error_type(server: tuple[str, Engines], claude: anthropic.Anthropic) -> None:
    """All stream slots taken: a 429 rate_limit_error (RateLimitError), streaming or not."""
    base, engines = server
    engines.release.clear()
    with httpx.Client(timeout=10) as http:
        held = []
        for _ in range(2):
            cm = http.stream("POST", base + "/v1/messages", json={"model": "held", "max_tokens": 5, "messages": MESSAGES, "stream": True})
            r = cm.__enter__()
            assert r.status_code == 200
            lines = r.iter_lines()
            next(lines)
            held.append((cm, lines))
        try:
            with pytest.raises(anthropic.RateLimitError) as info:
                claude.messages.create(model="think", max_tokens=5, messages=MESSAGES)
            assert info.value.status_code == 429 and _error_type(info.value) == "rate_limit_error"
            with (
                pytest.raises(anthropic.RateLimitError) as info,
                claude.messages.stream(model="think", max_tokens=5, messages=MESSAGES) as s,
            ):
                list(s)
            assert _error_type(info.value) == "rate_limit_error"
        finally:
            engines.release.set()
            for cm, _ in held:
                cm.__exit__(None, None, None)
    deadline = time.monotonic() + 5
    while engines.app.state.deltaflow.slots.active and time.monotonic() < deadline:
        time.sleep(0.02)  # the next tests need the slots back
    assert engines.app.state.deltaflow.slots.active == 0


@pytest.mark.parametrize(("model", "status", "kind", "exc_class", "needle"), [
    ("boom", 500, "api_error", anthropic.InternalServerError, "engine exploded"),
    ("stall", 504, "timeout_error", anthropic.GatewayTimeoutError, "engine idle for 0.5 s"),
])
def test_engine_failure_and_idle_timeout_types(
    claude: anthropic.Anthropic, model: str, status: int, kind: str, exc_class: type[Exception], needle: str
) -> None:
    """Mid-stream: the error event has the type (the SDK raises APIStatusError on the 200 stream); non-streaming: the status and its class."""
    with (
        pytest.raises(anthropic.APIStatusError, match=needle) as info,
        claude.messages.stream(model=model, max_tokens=5, messages=MESSAGES) as s,
    ):
        list(s)
    assert info.value.status_code == 200  # the stream had started: the SDK keeps the response's status
    assert _error_type(info.value) == kind
    with pytest.raises(exc_class, match=needle) as info2:
        claude.messages.create(model=model, max_tokens=5, messages=MESSAGES)
    assert isinstance(info2.value, anthropic.APIStatusError)
    assert info2.value.status_code == status and _error_type(info2.value) == kind


def test_websocket_error_event_uses_the_same_types(server: tuple[str, Engines]) -> None:
    """The WebSocket route's error messages (a failure, a bad request) carry the same Anthropic types."""
    url = server[0].replace("http://", "ws://") + "/v1/ws"
    for req, kind in (
        ({"model": "boom", "max_tokens": 5, "messages": MESSAGES}, "api_error"),
        ({"model": "nope", "max_tokens": 5, "messages": MESSAGES}, "not_found_error"),
        ({"model": "think", "max_tokens": "5", "messages": MESSAGES}, "invalid_request_error"),
    ):
        with websockets.sync.client.connect(url) as ws:
            ws.send(json.dumps({"protocol": "messages", **req}))
            messages = []
            with pytest.raises(ConnectionClosed):
                while True:
                    messages.append(json.loads(ws.recv(timeout=5)))
        assert messages[-1]["type"] == "error" and messages[-1]["error"]["type"] == kind


def test_no_anthropic_body_says_server_error(server: tuple[str, Engines]) -> None:
    """'server_error' is not an Anthropic type: it appears in no /v1/messages answer, streamed or not."""
    base = server[0]
    for model in ("boom", "stall", "nope"):
        for stream in (False, True):
            r = httpx.post(base + "/v1/messages", json={"model": model, "max_tokens": 5, "messages": MESSAGES, "stream": stream}, timeout=5)
            assert "server_error" not in r.text and '"error"' in r.text
