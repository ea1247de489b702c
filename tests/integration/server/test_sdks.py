"""The official openai and anthropic SDKs, and a websockets client, against a real server.

For every bundled transcript, the message each SDK accumulates must equal
``parse_complete`` of the same raw text.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets.sync.client

from deltaflow import parse_complete
from deltaflow.server import ReplayEngine
from deltaflow.testing import shown_complete

ENGINE = ReplayEngine()
MODELS = [m for m in ENGINE.models()]
IDS = [m.id for m in MODELS]


def _tool_names(text: str, info: Any) -> list[str]:
    """The names the transcript calls (so the request offers exactly those tools)."""
    m = parse_complete(text, tool_parser=info.tool_parser, reasoning_parser=info.reasoning_parser)
    return sorted({c.function.name for c in m.tool_calls})


def _expected(model_id: str) -> tuple[Any, Any, list[str]]:
    info = next(m for m in MODELS if m.id == model_id)
    text = ENGINE.text(model_id)
    names = _tool_names(text, info)
    tools = [{"name": n, "parameters": {"type": "object"}} for n in names]
    return info, shown(text, info, tools), names


def shown(text: str, info: Any, tools: list[dict[str, Any]]) -> Any:
    """What the server shows of ``text``: ``parse_complete``'s message, less the blank separators the server
    drops by default (``create_app(blank_separators="drop")``: whitespace-only content between a thought or a
    call and a call or the end)."""
    message = shown_complete(text, tool_parser=info.tool_parser, reasoning_parser=info.reasoning_parser, tools=tools)
    whole = parse_complete(text, tool_parser=info.tool_parser, reasoning_parser=info.reasoning_parser, tools=tools)
    assert _calls(message) == _calls(whole) and message.reasoning_content == whole.reasoning_content
    assert "".join((message.content or "").split()) == "".join((whole.content or "").split())  # only blanks go
    return message


def _calls(expected: Any) -> list[tuple[str, Any]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in expected.tool_calls]


@pytest.fixture
def oai(live_server: Any) -> Any:
    """An openai client for the live server (closed after the test)."""
    with openai.OpenAI(base_url=live_server.base + "/v1", api_key="test") as client:
        yield client


@pytest.fixture
def claude(live_server: Any) -> Any:
    """An anthropic client for the live server (closed after the test)."""
    with anthropic.Anthropic(base_url=live_server.base, api_key="test") as client:
        yield client


def _openai_tools(names: list[str]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]


@pytest.mark.parametrize("model_id", IDS)
def test_openai_chat_stream_helper_accumulates_parse_complete(oai: Any, model_id: str) -> None:
    """chat.completions.stream's final message equals parse_complete (content, reasoning, calls)."""
    _, expected, names = _expected(model_id)
    client = oai
    kwargs: dict[str, Any] = {"tools": _openai_tools(names)} if names else {}
    with client.chat.completions.stream(
        model=model_id, messages=[{"role": "user", "content": "go"}], **kwargs
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    msg = final.choices[0].message
    assert (msg.content or None) == expected.content
    assert getattr(msg, "reasoning_content", None) == expected.reasoning_content
    got = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
    assert got == _calls(expected)
    assert final.choices[0].finish_reason == ("tool_calls" if names else "stop")


@pytest.mark.parametrize("model_id", IDS)
def test_openai_chat_raw_stream_with_usage(oai: Any, model_id: str) -> None:
    """create(stream=True): ids/names once per index, dense indexes, a final usage chunk with reasoning tokens."""
    info, expected, names = _expected(model_id)
    client = oai
    kwargs: dict[str, Any] = {"tools": _openai_tools(names)} if names else {}
    chunks = list(
        client.chat.completions.create(
            model=model_id,
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            stream_options={"include_usage": True},
            **kwargs,
        )
    )
    seen_names: dict[int, int] = {}
    args: dict[int, str] = {}
    for ch in chunks[:-1]:
        for tc in ch.choices[0].delta.tool_calls or []:
            if tc.function and tc.function.name:
                seen_names[tc.index] = seen_names.get(tc.index, 0) + 1
                assert tc.id and tc.type == "function"
            args[tc.index] = args.get(tc.index, "") + ((tc.function.arguments or "") if tc.function else "")
    assert sorted(seen_names) == list(range(len(expected.tool_calls)))
    assert all(v == 1 for v in seen_names.values())
    assert [json.loads(args[i]) for i in sorted(args)] == [a for _, a in _calls(expected)]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    if info.tokenizer is not None:
        assert usage.completion_tokens > 0
        if expected.reasoning_content:
            assert 0 < usage.completion_tokens_details.reasoning_tokens < usage.completion_tokens


@pytest.mark.parametrize("model_id", IDS)
def test_openai_responses_stream_accumulates_parse_complete(oai: Any, model_id: str) -> None:
    """responses.stream's final response has the reasoning, message and function_call items of parse_complete."""
    _, expected, names = _expected(model_id)
    client = oai
    tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in names]
    with client.responses.stream(model=model_id, input="go", tools=tools) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    reasoning = "".join(
        part.text for item in final.output if item.type == "reasoning" for part in (item.content or [])
    )
    assert (reasoning or None) == expected.reasoning_content
    assert (final.output_text or None) == expected.content
    got = [(i.name, json.loads(i.arguments)) for i in final.output if i.type == "function_call"]
    assert got == _calls(expected)


@pytest.mark.parametrize("model_id", IDS)
def test_anthropic_messages_stream_accumulates_parse_complete(claude: Any, model_id: str) -> None:
    """messages.stream's final message has thinking, text and tool_use blocks equal to parse_complete."""
    _, expected, names = _expected(model_id)
    client = claude
    tools = [{"name": n, "input_schema": {"type": "object"}} for n in names]
    with client.messages.stream(
        model=model_id, max_tokens=1024, messages=[{"role": "user", "content": "go"}], tools=tools
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_message()
    thinking = "".join(b.thinking for b in final.content if b.type == "thinking")
    text = "".join(b.text for b in final.content if b.type == "text")
    assert (thinking or None) == expected.reasoning_content
    assert (text or None) == expected.content
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == _calls(expected)
    assert final.stop_reason == ("tool_use" if names else "end_turn")


@pytest.mark.parametrize("protocol", ["chat.completions", "responses", "messages"])
def test_non_streaming_responses(live_server: Any, protocol: str) -> None:
    """stream=false returns the complete object of each protocol with the parsed calls."""
    model_id = "qwen3-weather"
    _, expected, _names = _expected(model_id)
    path = {"chat.completions": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[protocol]
    body: dict[str, Any] = {"model": model_id, "stream": False}
    if protocol == "responses":
        body["input"] = "go"
    else:
        body["messages"] = [{"role": "user", "content": "go"}]
    if protocol == "messages":
        body["max_tokens"] = 100
    r = httpx.post(live_server.base + path, json=body, timeout=10)
    assert r.status_code == 200, r.text
    data = r.json()
    if protocol == "chat.completions":
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in data["choices"][0]["message"]["tool_calls"]]
    elif protocol == "responses":
        calls = [(o["name"], json.loads(o["arguments"])) for o in data["output"] if o["type"] == "function_call"]
    else:
        calls = [(b["name"], b["input"]) for b in data["content"] if b["type"] == "tool_use"]
    assert calls == _calls(expected)


@pytest.mark.parametrize("protocol", ["chat.completions", "responses", "messages"])
def test_websocket_sends_one_message_per_event_and_closes_normally(live_server: Any, protocol: str) -> None:
    """The WebSocket route streams the same events as JSON messages and closes with 1000."""
    model_id = "qwen3-weather"
    _, expected, _ = _expected(model_id)
    url = live_server.base.replace("http://", "ws://") + "/v1/ws"
    req: dict[str, Any] = {"protocol": protocol, "model": model_id, "max_tokens": 100}
    if protocol == "responses":
        req["input"] = "go"
    else:
        req["messages"] = [{"role": "user", "content": "go"}]
    events = []
    with websockets.sync.client.connect(url) as ws:
        ws.send(json.dumps(req))
        for message in ws:
            events.append(json.loads(message))
        assert ws.close_code == 1000
    args: dict[str, str] = {}
    if protocol == "chat.completions":
        for e in events:
            for tc in (e["choices"][0]["delta"].get("tool_calls") or []) if e.get("choices") else []:
                args[str(tc["index"])] = args.get(str(tc["index"]), "") + tc["function"].get("arguments", "")
    elif protocol == "responses":
        for e in events:
            if e["type"] == "response.function_call_arguments.delta":
                args[e["item_id"]] = args.get(e["item_id"], "") + e["delta"]
    else:
        for e in events:
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
                args[str(e["index"])] = args.get(str(e["index"]), "") + e["delta"]["partial_json"]
    assert [json.loads(v) for v in args.values()] == [a for _, a in _calls(expected)]
