"""The gateway's Chat Completions passthrough end to end: the official openai and anthropic SDKs -> deltaflow's
app on loopback (uvicorn) in passthrough mode (``upstream_kind = "chat"``, no model folder) -> a server's own
``/v1/chat/completions``.

Two upstreams:

* **llama.cpp's real server** (xllamacpp, its default ``--jinja``) on the tiny random-weight Qwen3 model: its
  own template renders the conversation and its own parser reads the output. It cannot be made to call a tool
  here: ``tool_choice`` ``"required"`` and named choices did not constrain the random model (it writes random
  text to the limit; ../shared/GATEWAY.md §3 saw the same), and a custom ``grammar`` next to ``tools`` is
  refused by the server ("Cannot use custom grammar constraints with tools."). So with it these tests check
  what it does produce, in the three client APIs: streamed and whole content, the ``length`` finish (Chat
  ``length``, Anthropic ``max_tokens``, Responses ``incomplete``), the server's usage, that the tools reach its
  template (the prompt grows), and that a required ``tool_choice`` is passed on instead of refused.
* **a scripted double** for the tool calls (:class:`ChatDouble`): a raw ASGI app on a real loopback HTTP server
  that speaks Chat Completions SSE as vLLM does (a call opened with its id and name, its arguments in
  fragments, a usage chunk, ``[DONE]``), records what the gateway sent, and notices when the gateway drops the
  connection. It stands in for an engine whose parser found a call, which the random model cannot provide.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "server"))
from conftest_server import start_server  # noqa: E402

from deltaflow.gateway.config import ModelConfig, build_engine  # noqa: E402
from deltaflow.server import create_app  # noqa: E402

pytestmark = [pytest.mark.shared, pytest.mark.engine]

openai = pytest.importorskip("openai", reason="the openai SDK is not installed (pip install -e '.[test]')")
anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is not installed (pip install -e '.[test]')")

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA}}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather.", "parameters": SCHEMA}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA}]
OFF = {"chat_template_kwargs": {"enable_thinking": False}}
LIMIT = 8


def serve(models: list[ModelConfig]) -> tuple[Any, threading.Thread, str]:
    engine = anyio.run(build_engine, models)
    return start_server(create_app(engine, heartbeat=5.0), lifespan="on")


# -- llama.cpp's own chat endpoint --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_gateway(llamacpp_qwen3: Any) -> Iterator[str]:
    """deltaflow in passthrough mode in front of llama.cpp's /v1/chat/completions; yields its base URL."""
    config = ModelConfig(name="qwen3-chat", upstream=llamacpp_qwen3.base_url, upstream_kind="chat", max_tokens=LIMIT)
    server, thread, base = serve([config])
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


def test_llamacpp_chat_in_chat_out(llama_gateway: str) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    with openai.OpenAI(base_url=f"{llama_gateway}/v1", api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="qwen3-chat", messages=messages, max_tokens=LIMIT, seed=1, stream=True,
            stream_options={"include_usage": True}, extra_body=OFF,
        )
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
        assert text and finish == "length"
        assert usage is not None and usage.completion_tokens == LIMIT and usage.prompt_tokens > 0
        done = client.chat.completions.create(model="qwen3-chat", messages=messages, seed=1, extra_body=OFF)
        assert done.choices[0].finish_reason == "length"  # the model's max_tokens (the gateway's default) applies
        assert done.choices[0].message.content and done.usage is not None
        assert done.usage.completion_tokens == LIMIT
        # the tools reach the upstream's own template, and a required tool_choice is the upstream's to enforce:
        # passed on, not refused for want of a deltaflow constraint (llama.cpp does not force it on this model)
        tooled = client.chat.completions.create(model="qwen3-chat", messages=messages, seed=1, extra_body=OFF,
                                                tools=CHAT_TOOLS, tool_choice="required")
        assert tooled.usage is not None and tooled.usage.prompt_tokens > done.usage.prompt_tokens
        assert tooled.choices[0].finish_reason in ("length", "tool_calls")


def test_llamacpp_through_anthropic_streamed(llama_gateway: str) -> None:
    with anthropic.Anthropic(base_url=llama_gateway, api_key="unused", max_retries=0) as client:
        with client.messages.stream(
            model="qwen3-chat", max_tokens=LIMIT, thinking={"type": "disabled"},
            messages=[{"role": "user", "content": "Say hi."}],
        ) as stream:
            message = stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert [b.type for b in message.content] == ["text"] and message.content[0].text  # type: ignore[union-attr]
    assert message.usage.output_tokens == LIMIT and message.usage.input_tokens > 0


def test_llamacpp_through_responses(llama_gateway: str) -> None:
    with openai.OpenAI(base_url=f"{llama_gateway}/v1", api_key="unused", max_retries=0) as client:
        response = client.responses.create(model="qwen3-chat", input="Say hi.", max_output_tokens=LIMIT,
                                           reasoning={"effort": "none"})
        assert response.status == "incomplete" and response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.output_text and response.usage is not None and response.usage.output_tokens == LIMIT
        # (the SDK's get_final_response() wants response.completed; an answer cut at the limit ends incomplete)
        with client.responses.stream(model="qwen3-chat", input="Say hi.", max_output_tokens=LIMIT,
                                     reasoning={"effort": "none"}) as stream:
            events = list(stream)
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert events[-1].type == "response.incomplete" and text
        assert events[-1].response.output_text == text  # type: ignore[union-attr]


# -- the scripted double: tool calls ------------------------------------------------------------------------------


def _event(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, int] | None = None,
           choices: bool = True) -> bytes:
    chunk: dict[str, Any] = {"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": 0, "model": "m",
                             "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []}
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


TOOL_CALL = [
    _event({"role": "assistant", "content": ""}),
    _event({"reasoning": "The user wants Paris."}),
    _event({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-1", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}),
    _event({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": \"Pa"}}]}),
    _event({"tool_calls": [{"index": 0, "function": {"arguments": "ris\", \"unit\": \"celsius\"}"}}]}),
    _event({}, "tool_calls"),
    _event(usage={"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}, choices=False),
    b"data: [DONE]\n\n",
]


class ChatDouble:
    """A scripted Chat Completions server (a double, see the module docstring): answers every
    ``/v1/chat/completions`` with :data:`TOOL_CALL`, or with an endless slow stream of content when
    :attr:`endless` is set; records the request bodies, the events sent and whether the client went away."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.endless = False
        self.sent = 0
        self.disconnected = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        more = True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        if scope["path"] != "/v1/chat/completions":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"object": "list", "data": []}'})
            return
        self.bodies.append(json.loads(body))
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                self.disconnected.set()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            if self.endless:
                while True:
                    await send({"type": "http.response.body", "body": _event({"content": "tick "}), "more_body": True})
                    self.sent += 1
                    await anyio.sleep(0.01)
            for event in TOOL_CALL:
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


@pytest.fixture(scope="module")
def double_gateway() -> Iterator[tuple[str, ChatDouble]]:
    """deltaflow in passthrough mode in front of the double; yields its base URL and the double."""
    double = ChatDouble()
    up_server, up_thread, up_base = start_server(double)
    config = ModelConfig(name="scripted", upstream=up_base, upstream_kind="chat", max_tokens=64,
                         options={"model": "upstream-name"})
    server, thread, base = serve([config])
    try:
        yield base, double
    finally:
        server.should_exit = True
        thread.join(10)
        up_server.should_exit = True
        up_thread.join(10)


def test_anthropic_sdk_streams_the_call_as_a_tool_use_block(double_gateway: tuple[str, ChatDouble]) -> None:
    base, double = double_gateway
    with anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0) as client:
        with client.messages.stream(
            model="scripted", max_tokens=64, tools=ANTHROPIC_TOOLS, tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "Weather in Paris?"}],
        ) as stream:
            partial = "".join(e.partial_json for e in stream if e.type == "input_json")
            message = stream.get_final_message()
    sent = double.bodies[-1]
    assert sent["tool_choice"] == "required" and sent["model"] == "upstream-name" and sent["stream"] is True
    assert sent["tools"][0]["function"]["name"] == "get_weather" and sent["max_tokens"] == 64
    assert message.stop_reason == "tool_use"
    blocks = {b.type: b for b in message.content}
    assert set(blocks) == {"thinking", "tool_use"}
    tool = blocks["tool_use"]
    assert tool.name == "get_weather" and tool.input == {"city": "Paris", "unit": "celsius"}  # type: ignore[union-attr]
    assert json.loads(partial) == tool.input  # type: ignore[union-attr]
    assert message.usage.input_tokens == 42 and message.usage.output_tokens == 17


def test_responses_sdk_gets_a_function_call_item(double_gateway: tuple[str, ChatDouble]) -> None:
    base, double = double_gateway
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0) as client:
        response = client.responses.create(model="scripted", input="Weather in Paris?", tools=RESPONSES_TOOLS,
                                           tool_choice="required")
        with client.responses.stream(model="scripted", input="Weather in Paris?", tools=RESPONSES_TOOLS,
                                     tool_choice={"type": "function", "name": "get_weather"}) as stream:
            streamed = stream.get_final_response()
    assert double.bodies[-2]["tool_choice"] == "required"
    assert double.bodies[-1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    for r in (response, streamed):
        calls = [o for o in r.output if o.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather"
        assert json.loads(calls[0].arguments) == {"city": "Paris", "unit": "celsius"}
        assert r.status == "completed" and r.usage is not None and r.usage.input_tokens == 42


def test_chat_sdk_streams_the_fragments(double_gateway: tuple[str, ChatDouble]) -> None:
    base, _ = double_gateway
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "Weather?"}], tools=CHAT_TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True,
        )
        names, args, ids, finish = [], "", set(), None
        for chunk in stream:
            for tc in chunk.choices[0].delta.tool_calls or []:
                ids.add(tc.id) if tc.id else None
                names += [tc.function.name] if tc.function and tc.function.name else []
                args += (tc.function.arguments or "") if tc.function else ""
            finish = chunk.choices[0].finish_reason or finish
    assert names == ["get_weather"] and ids == {"chatcmpl-tool-1"} and finish == "tool_calls"
    assert json.loads(args) == {"city": "Paris", "unit": "celsius"}


def test_a_client_that_leaves_closes_the_upstream_request(double_gateway: tuple[str, ChatDouble]) -> None:
    base, double = double_gateway
    double.endless = True
    double.disconnected.clear()
    try:
        with httpx.Client(base_url=base, timeout=10) as http, http.stream(
            "POST", "/v1/chat/completions",
            json={"model": "scripted", "messages": [{"role": "user", "content": "x"}], "stream": True},
        ) as r:
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 3:
                    break
        assert double.disconnected.wait(10), "the gateway kept the upstream request open"
        sent = double.sent
        time.sleep(0.2)
        assert double.sent == sent  # nothing is sent upstream any more
        deadline = time.monotonic() + 5
        while True:  # the gateway's stream is gone too
            with httpx.Client(base_url=base, timeout=5) as http:
                metrics = http.get("/metrics").text
            if 'deltaflow_streams_in_flight{model="scripted"} 0.0' in metrics or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert 'deltaflow_streams_in_flight{model="scripted"} 0.0' in metrics
    finally:
        double.endless = False


def test_the_websocket_route_frames_the_passthrough_too(double_gateway: tuple[str, ChatDouble]) -> None:
    websockets = pytest.importorskip("websockets.sync.client", reason="websockets is not installed")
    from websockets.exceptions import ConnectionClosedOK

    base, _ = double_gateway
    with websockets.connect(base.replace("http://", "ws://") + "/v1/ws") as ws:
        ws.send(json.dumps({"protocol": "messages", "model": "scripted", "max_tokens": 64, "tools": ANTHROPIC_TOOLS,
                            "messages": [{"role": "user", "content": "Weather?"}]}))
        events = []
        with pytest.raises(ConnectionClosedOK):
            while True:
                events.append(json.loads(ws.recv(timeout=10)))
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "tool_use"] and events[-1]["type"] == "message_stop"
