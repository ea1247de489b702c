"""The Chat Completions passthrough: the conversation -> Chat writer, the chat upstream's stream translation,
the plan that renders nothing, GatewayEngine.deltas and the server's direct stream.

The adapter runs on its real HTTP plumbing (``HttpUpstream``: httpx, httpx-sse, the error mapping) over an
``httpx.MockTransport`` serving the ``chat_*`` transcripts of ``transcripts/`` (see its README:
``llamacpp_chat_length.sse`` was recorded from llama.cpp's server; ``vllm_chat_tool_calls.sse`` and
``llamacpp_chat_whole_call.sse`` are written from the documented format of vLLM's and llama.cpp's chat
streams) or event lists written here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from deltaflow.gateway.engine import GatewayEngine, GatewayModel, Plan
from deltaflow.gateway.upstream import ChatRequest, ChatUpstream, UpstreamError
from deltaflow.gateway.upstreams import UPSTREAM_KINDS, ChatCompletionsUpstream, Timeouts, make_upstream
from deltaflow.messages import DeltaMessage
from deltaflow.pipeline.sync import accumulate
from deltaflow.prompt.conversation import AssistantTurn
from deltaflow.prompt.messages import chat_messages
from deltaflow.prompt.readers import read_chat, read_messages, read_responses
from deltaflow.prompt.render import PromptModel
from deltaflow.prompt.writers import write_chat
from deltaflow.server import create_app
from deltaflow.server.engine import EngineRequest
from deltaflow.stages.assembler import Usage

TRANSCRIPTS = Path(__file__).parent / "transcripts"
FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA}},
              {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]


# -- the writer ---------------------------------------------------------------------------------------------------


CHAT_BODY: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning_content": "Need the tool.",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C", "name": "get_weather"},
        {"role": "assistant", "content": "It is 18C."},
        {"role": "system", "content": "Now be briefer."},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [{**CHAT_TOOLS[0], "function": {**CHAT_TOOLS[0]["function"], "strict": True}}, CHAT_TOOLS[1]],
    "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 50, "temperature": 0.2, "top_p": 0.9,
    "seed": 7, "stop": ["END"], "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": True},
}


def test_a_chat_request_is_written_back_as_it_was_read() -> None:
    conversation = read_chat(CHAT_BODY)
    written = write_chat(conversation)
    assert written == {k: v for k, v in CHAT_BODY.items() if k != "model"}
    assert read_chat(written) == conversation  # the writer is the reader's inverse


def test_a_responses_request_becomes_chat_messages() -> None:
    conversation = read_responses({
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 40, "reasoning": {"effort": "none"},
        "input": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Use the tool."}]},
            {"type": "function_call", "call_id": "fc1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
            {"type": "function_call_output", "call_id": "fc1", "output": "5C"},
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": SCHEMA}],
        "tool_choice": {"type": "function", "name": "get_weather"},
    })
    assert write_chat(conversation) == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "reasoning_content": "Use the tool.",
             "tool_calls": [{"id": "fc1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "fc1", "content": "5C"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": True,
        "max_tokens": 40,
        "reasoning_effort": "none",
        "chat_template_kwargs": {"enable_thinking": False},  # "none" effort is thinking off, as the rendered path reads it
    }


def test_an_anthropic_request_becomes_chat_messages() -> None:
    conversation = read_messages({
        "model": "m", "max_tokens": 30, "system": "S", "stop_sequences": ["###"],
        "thinking": {"type": "disabled"},
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                                         {"type": "text", "text": "and?"}]},
        ],
    })
    written = write_chat(conversation)
    assert written["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        # the redacted block never reaches the upstream; the arguments are the input as JSON text
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "hmm",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "user", "content": "and?"},
    ]
    assert (written["tool_choice"], written["parallel_tool_calls"]) == ("required", False)
    assert (written["max_tokens"], written["stop"]) == (30, ["###"])
    assert written["chat_template_kwargs"] == {"enable_thinking": False}


def test_allowed_tools_and_the_edge_cases_of_messages() -> None:
    subset = read_chat({
        "model": "m", "messages": [{"role": "user", "content": "x"}], "tools": CHAT_TOOLS,
        "tool_choice": {"type": "allowed_tools", "allowed_tools": {
            "mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}},
    })
    written = write_chat(subset, max_tokens=9)
    assert [t["function"]["name"] for t in written["tools"]] == ["get_time"]  # only the allowed ones are offered
    assert (written["tool_choice"], written["max_tokens"]) == ("required", 9)
    none = write_chat(read_chat({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": CHAT_TOOLS,
                                 "tool_choice": "none"}))
    assert none["tool_choice"] == "none" and len(none["tools"]) == 2
    bare = write_chat(read_chat({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": []}))
    assert bare == {"messages": [{"role": "user", "content": "x"}]}  # no tool: no tool fields at all
    # a call with blank arguments, an empty assistant message: valid Chat for every server
    odd = read_chat({"model": "m", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                             "function": {"name": "get_time", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c", "content": "noon"},
        {"role": "assistant", "content": ""},
    ]})
    messages = chat_messages(odd)
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == "{}" and messages[1]["content"] is None
    assert messages[3] == {"role": "assistant", "content": ""}


# -- the adapter --------------------------------------------------------------------------------------------------


def sse(*events: Any) -> bytes:
    """An SSE body of these events (dicts are JSON-encoded; strings go as they are)."""
    return b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n" for e in events
    )


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {},
                                                            "finish_reason": finish}], **extra}


class Scripted:
    """A MockTransport that answers every request with one body, and records the request bodies."""

    def __init__(self, body: bytes, *, status: int = 200, content_type: str = "text/event-stream") -> None:
        self.body = body
        self.status = status
        self.content_type = content_type
        self.seen: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(json.loads(request.content))
        return httpx.Response(self.status, headers={"content-type": self.content_type}, content=self.body)


async def run_chat(body: bytes, request: ChatRequest | None = None, **kw: Any) -> tuple[list[Any], Scripted]:
    script = Scripted(body, **kw)
    async with httpx.AsyncClient(transport=httpx.MockTransport(script)) as client:
        up = ChatCompletionsUpstream("http://engine.invalid:8000/v1", client=client, timeouts=FAST, retries=0,
                                     model="served")
        out = [x async for x in up.chat(request or ChatRequest(body={"messages": []}))]
        await up.aclose()
    return out, script


async def chat_failure(body: bytes, **kw: Any) -> UpstreamError:
    with pytest.raises(UpstreamError) as info:
        await run_chat(body, **kw)
    return info.value


def deltas_of(items: Sequence[Any]) -> list[DeltaMessage]:
    return [x for x in items if isinstance(x, DeltaMessage)]


def usage_of(items: Sequence[Any]) -> Usage | None:
    found = [x for x in items if isinstance(x, Usage)]
    return found[-1] if found else None


@pytest.mark.anyio
async def test_vllm_stream_reasoning_content_and_two_calls_in_fragments() -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}
    items, script = await run_chat((TRANSCRIPTS / "vllm_chat_tool_calls.sse").read_bytes(), ChatRequest(body=body))
    (sent,) = script.seen
    assert sent == {**body, "model": "served", "stream": True, "stream_options": {"include_usage": True}}
    deltas = deltas_of(items)
    message = accumulate(deltas)
    assert message.reasoning_content == "The user wants the weather in two cities."  # vLLM's `reasoning` field
    assert message.content == "Checking both."
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("chatcmpl-tool-a1", "get_weather", {"city": "Paris"}),
        ("chatcmpl-tool-b2", "get_weather", {"city": "Zürich"}),
    ]
    firsts = [tc for d in deltas for tc in d.tool_calls if tc.function.name is not None]
    assert [(tc.index, tc.type) for tc in firsts] == [(0, "function"), (1, "function")]
    assert all(tc.id is None and tc.function.name is None  # later fragments carry only the arguments
               for d in deltas for tc in d.tool_calls if tc not in firsts)
    assert deltas[-1] == DeltaMessage(finish_reason="tool_calls")
    assert usage_of(items) == Usage(prompt_tokens=211, completion_tokens=49, completion_known=True,
                                    reasoning_tokens=12, reasoning_known=True)


@pytest.mark.anyio
async def test_llamacpp_streams_recorded_and_written() -> None:
    items, _ = await run_chat((TRANSCRIPTS / "llamacpp_chat_length.sse").read_bytes())
    deltas = deltas_of(items)
    assert [d.content for d in deltas[:-1]] == ["层次", " Pain", " SplashScreen"]  # the role chunk gives nothing
    assert deltas[-1] == DeltaMessage(finish_reason="length")
    assert usage_of(items) == Usage(prompt_tokens=13, completion_tokens=3, completion_known=True)
    items, _ = await run_chat((TRANSCRIPTS / "llamacpp_chat_whole_call.sse").read_bytes())
    message = accumulate(deltas_of(items))
    assert message.reasoning_content == "Need the tool." and message.content is None
    (call,) = message.tool_calls
    assert (call.id, call.function.name) == ("Xk2pL9", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Oslo", "unit": "celsius"}
    assert message.finish_reason == "tool_calls"


@pytest.mark.anyio
async def test_indices_are_renumbered_fragments_wait_for_the_name_and_ids_are_made() -> None:
    body = sse(
        chunk({"tool_calls": [{"index": 3, "function": {"arguments": "{\"a\""}}]}),  # before its name
        chunk({"tool_calls": [{"index": 3, "function": {"name": "f", "arguments": ": 1}"}}]}),
        chunk({"tool_calls": [{"id": "x2", "function": {"name": "g", "arguments": "{}"}}]}),  # no index: a new id
        chunk({"tool_calls": [{"function": {"arguments": " "}}]}),  # no index, no id: continues the last call
        chunk({"content": "done"}, "stop"),
        "[DONE]",
    )
    items, _ = await run_chat(body)
    deltas = deltas_of(items)
    message = accumulate(deltas)
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [("f", "{\"a\": 1}"), ("g", "{} ")]
    assert [tc.index for d in deltas for tc in d.tool_calls] == [0, 1, 1]
    assert message.tool_calls[0].id.startswith("call_") and message.tool_calls[1].id == "x2"
    assert message.content == "done"
    assert deltas[-1].finish_reason == "tool_calls"  # "stop" after calls, as deltaflow's own assembler says


@pytest.mark.anyio
@pytest.mark.parametrize(("sent", "expected"), [
    ("stop", "stop"), ("length", "length"), ("tool_calls", "tool_calls"), ("content_filter", "content_filter"),
    ("function_call", "tool_calls"), ("eos_token", "stop"),
])
async def test_finish_reasons(sent: str, expected: str) -> None:
    items, _ = await run_chat(sse(chunk({"content": "a"}), chunk({}, sent), "[DONE]"))
    assert deltas_of(items)[-1].finish_reason == expected and usage_of(items) is None


@pytest.mark.anyio
async def test_the_usage_may_ride_on_the_finish_chunk_and_done_alone_ends_the_answer() -> None:
    items, _ = await run_chat(sse(chunk({"content": "a"}, "stop", usage={"prompt_tokens": 4, "completion_tokens": 1})))
    assert deltas_of(items)[-1].finish_reason == "stop"
    assert usage_of(items) == Usage(prompt_tokens=4, completion_tokens=1, completion_known=True)
    items, _ = await run_chat(sse(chunk({"content": "a"}), "[DONE]"))
    assert deltas_of(items)[-1].finish_reason == "stop"


@pytest.mark.anyio
@pytest.mark.parametrize(("events", "kind", "words"), [
    (["{not json"], "protocol", "not JSON"),
    ([{"choices": {"index": 0}}], "protocol", "wrong shape"),
    ([chunk({"content": 5})], "protocol", "wrong shape"),
    ([chunk({"tool_calls": [{"index": "0", "function": {"name": "f"}}]})], "protocol", "wrong shape"),
    ([chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": {"a": 1}}}]})], "protocol",
     "wrong shape"),
    ([chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}), chunk({}, "tool_calls")], "protocol",
     "without a function name"),
    ([chunk({}, "stop", usage={"prompt_tokens": -1})], "protocol", "negative"),
    ([chunk({"content": "a"}), {"error": {"message": "out of memory", "code": 500}}], "status", "out of memory"),
    ([chunk({"content": "a"}, "abort")], "status", "abort"),
    ([chunk({"content": "a"})], "closed", "ended before"),
])
async def test_malformed_or_failed_streams_are_upstream_errors(events: list[Any], kind: str, words: str) -> None:
    err = await chat_failure(sse(*events))
    assert err.kind == kind and words in err.message and "engine.invalid" not in err.message


@pytest.mark.anyio
async def test_an_http_error_keeps_the_servers_message() -> None:
    err = await chat_failure(b'{"error": {"message": "tool_choice is invalid", "code": 400}}', status=400,
                             content_type="application/json")
    assert (err.kind, err.status, err.message) == ("status", 400, "tool_choice is invalid")


@pytest.mark.anyio
async def test_the_chat_kind_is_registered() -> None:
    assert UPSTREAM_KINDS["chat"] is ChatCompletionsUpstream
    up = make_upstream("chat", "http://engine.invalid:8000", model="m")
    assert isinstance(up, ChatUpstream) and up.kind == "chat" and up.constraint_forms == ()
    await up.aclose()


# -- the plan, GatewayEngine.deltas and the server ----------------------------------------------------------------


def passthrough_engine(body: bytes, **kw: Any) -> tuple[GatewayEngine, Scripted, httpx.AsyncClient]:
    script = Scripted(body)
    client = httpx.AsyncClient(transport=httpx.MockTransport(script))
    up = ChatCompletionsUpstream("http://engine.invalid:8000", client=client, timeouts=FAST, retries=0)
    model = GatewayModel(name="m", prompt=PromptModel("m", None), upstream=up, **kw)
    return GatewayEngine([model]), script, client


def metrics(eng: GatewayEngine) -> str:
    return eng.metrics_text()[0].decode()


def test_the_plan_renders_nothing_and_passes_tool_choice_on() -> None:
    eng, _, client = passthrough_engine(b"", max_tokens=99)
    try:
        plan = eng.plan(EngineRequest(model="m", protocol="messages", body={
            "model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "forged", "signature": "bad"},
                                                  {"type": "text", "text": "ok"}]},
                {"role": "user", "content": "weather?"}],
            "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
            "tool_choice": {"type": "tool", "name": "get_weather"},
        }))
        assert isinstance(plan, Plan) and plan.passthrough and plan.prompt is None and not plan.tools_on
        assert plan.chat_request is not None
        body = plan.chat_request.body
        # a named tool_choice is the upstream's to enforce: not refused for want of a constraint
        assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
        assert body["max_tokens"] == 5
        # the forged thinking block was not signed by this server: dropped, as on the rendered path
        assert body["messages"][1] == {"role": "assistant", "content": "ok"}
        assert not any(isinstance(t, AssistantTurn) and t.reasoning for t in plan.conversation.turns)
        chat = eng.plan(EngineRequest(model="m", protocol="chat.completions", body={
            "model": "m", "messages": [{"role": "user", "content": "x"}], "tools": CHAT_TOOLS, "tool_choice": "required"}))
        assert chat.chat_request is not None and chat.chat_request.body["max_tokens"] == 99  # the model's default
        assert chat.chat_request.body["tool_choice"] == "required"
        assert 'deltaflow_requests_total{model="m",outcome="accepted",protocol="messages"} 1.0' in metrics(eng)
    finally:
        anyio.run(client.aclose)


@pytest.mark.anyio
async def test_deltas_fill_the_usage_and_the_metrics() -> None:
    eng, script, client = passthrough_engine((TRANSCRIPTS / "vllm_chat_tool_calls.sse").read_bytes())
    async with client:
        request = EngineRequest(model="m", protocol="chat.completions",
                                body={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        usage = Usage()
        got = [d async for d in eng.deltas(request, usage)]
        assert accumulate(got).finish_reason == "tool_calls"
        assert (usage.prompt_tokens, usage.completion_tokens, usage.reasoning_tokens) == (211, 49, 12)
        text = metrics(eng)
        assert 'deltaflow_prompt_tokens_total{model="m"} 211.0' in text
        assert 'deltaflow_generated_tokens_total{model="m"} 49.0' in text
        assert 'deltaflow_time_to_first_token_seconds_count{model="m"} 1.0' in text
        assert 'deltaflow_inter_token_latency_seconds_count{model="m"} 7.0' in text  # 8 deltas with text or calls
        assert 'deltaflow_streams_in_flight{model="m"} 0.0' in text
        script.body = sse(chunk({"content": "a"}), "{broken")
        with pytest.raises(UpstreamError):
            _ = [d async for d in eng.deltas(request)]
        text = metrics(eng)
        assert 'deltaflow_upstream_errors_total{kind="protocol",model="m"} 1.0' in text
        assert 'deltaflow_streams_in_flight{model="m"} 0.0' in text


@pytest.mark.anyio
async def test_the_server_frames_the_upstreams_deltas_in_every_protocol() -> None:
    eng, script, client = passthrough_engine((TRANSCRIPTS / "vllm_chat_tool_calls.sse").read_bytes())
    app = create_app(eng)
    async with client, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        r = await http.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}],
                                                          "tools": CHAT_TOOLS, "tool_choice": "required"})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Checking both."
        assert [json.loads(c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == [
            {"city": "Paris"}, {"city": "Zürich"}]
        assert r.json()["usage"]["prompt_tokens"] == 211
        assert script.seen[-1]["tool_choice"] == "required"
        r = await http.post("/v1/messages", json={
            "model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "x"}], "stream": True,
            "tools": [{"name": "get_weather", "input_schema": SCHEMA}], "tool_choice": {"type": "any"}})
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
        assert [b["type"] for b in starts] == ["thinking", "text", "tool_use", "tool_use"]
        inputs = ["".join(e["delta"]["partial_json"] for e in events
                          if e["type"] == "content_block_delta" and e["index"] == k and
                          e["delta"]["type"] == "input_json_delta") for k in (2, 3)]
        assert [json.loads(i) for i in inputs] == [{"city": "Paris"}, {"city": "Zürich"}]
        assert next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"] == "tool_use"
        assert script.seen[-1]["tool_choice"] == "required"  # Anthropic "any"
        r = await http.post("/v1/responses", json={"model": "m", "input": "x", "tools": [
            {"type": "function", "name": "get_weather", "parameters": SCHEMA}]})
        output = r.json()["output"]
        assert [o["type"] for o in output] == ["reasoning", "message", "function_call", "function_call"]
        assert json.loads(output[2]["arguments"]) == {"city": "Paris"}
        assert r.json()["usage"]["output_tokens_details"]["reasoning_tokens"] == 12
        r = await http.post("/v1/messages/count_tokens", json={"model": "m", "messages": [{"role": "user",
                                                                                          "content": "x"}]})
        assert r.status_code == 400 and "renders the prompt itself" in r.json()["error"]["message"]
        script.body = sse(chunk({"content": "a"}), "{broken")
        r = await http.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 502 and "not JSON" in r.json()["error"]["message"]


def _lp(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()),
            "top_logprobs": [{"token": token, "logprob": logprob, "bytes": list(token.encode())}]}


@pytest.mark.anyio
async def test_a_chat_clients_logprobs_are_asked_of_the_upstream_and_passed_on() -> None:
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hel"},
                                                          "logprobs": {"content": [_lp("Hel", -0.5)]}}]},
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "lo"},
                                                          "logprobs": {"content": [_lp("lo", -0.25)]}}]},
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {},
                                                          "logprobs": {"content": [_lp("!", -1.0)]}}]},
        chunk(finish="stop"),
        "[DONE]",
    )
    eng, script, client = passthrough_engine(body)
    app = create_app(eng)
    async with client, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        ask = {"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 1}
        r = await http.post("/v1/chat/completions", json={**ask, "stream": True})
        assert r.status_code == 200, r.text
        assert script.seen[-1]["logprobs"] is True and script.seen[-1]["top_logprobs"] == 1
        chunks = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        got = [(c["choices"][0]["delta"].get("content"), [t["token"] for t in c["choices"][0]["logprobs"]["content"]])
               for c in chunks if c["choices"] and c["choices"][0].get("logprobs")]
        assert got == [("Hel", ["Hel"]), ("lo", ["lo"]), (None, ["!"])]
        assert chunks[1]["choices"][0]["logprobs"]["content"][0]["logprob"] == -0.5
        # Not asked: nothing is asked of the upstream and nothing is written.
        r = await http.post("/v1/chat/completions", json={k: v for k, v in ask.items() if "logprobs" not in k}
                            | {"stream": True})
        assert "logprobs" not in script.seen[-1] and "top_logprobs" not in script.seen[-1]
        assert all(not c["choices"] or not c["choices"][0].get("logprobs")
                   for c in (json.loads(line[6:]) for line in r.text.splitlines()
                             if line.startswith("data: ") and line != "data: [DONE]"))
        # Another API has no place for them: not asked.
        r = await http.post("/v1/messages", json={"model": "m", "max_tokens": 9, "logprobs": True,
                                                  "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 200 and "logprobs" not in script.seen[-1]


@pytest.mark.anyio
async def test_the_idle_guard_applies_to_the_passthrough() -> None:
    class Silent:
        """A chat upstream double that sends one delta, then nothing (to trip the server's idle timeout)."""

        kind = "chat"
        constraint_forms = ()
        closed = False

        async def chat(self, request: ChatRequest) -> AsyncIterator[Any]:
            try:
                yield DeltaMessage(content="a")
                await anyio.sleep(30)
            finally:
                self.closed = True

        async def health(self) -> bool:
            return True

        async def aclose(self) -> None:
            pass

        def generate(self, request: Any) -> Any:
            raise NotImplementedError

    up = Silent()
    eng = GatewayEngine([GatewayModel(name="m", prompt=PromptModel("m", None), upstream=up)])  # type: ignore[arg-type]
    app = create_app(eng, idle_timeout=0.2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        r = await http.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 504 and "idle" in r.json()["error"]["message"] and up.closed


def test_writer_output_is_json() -> None:
    """What the adapter sends is plain JSON data (msgspec encodes it without a hook)."""
    msgspec.json.encode(write_chat(read_chat(CHAT_BODY)))


# -- configuration and command line -------------------------------------------------------------------------------


def test_config_needs_no_model_folder_for_a_chat_upstream() -> None:
    from deltaflow.gateway.config import ModelConfig, build_engine

    config = ModelConfig(name="q", upstream="http://127.0.0.1:9/v1", upstream_kind="chat", max_tokens=7)
    engine = anyio.run(build_engine, [config])
    try:
        model = engine.served["q"]
        assert model.passthrough and model.max_tokens == 7 and model.prompt.template is None
        assert isinstance(model.upstream, ChatCompletionsUpstream) and model.upstream.model == "q"
        assert [(m.id, m.tool_parser, m.reasoning_parser) for m in engine.models()] == [("q", None, None)]
    finally:
        anyio.run(engine.aclose)
    with pytest.raises(ValueError, match="tool_parser, context_length: not used with upstream_kind 'chat'"):
        ModelConfig(name="q", upstream="http://h:1", upstream_kind="chat", tool_parser="hermes", context_length=9)
    with pytest.raises(ValueError, match="name: required"):
        ModelConfig(upstream="http://h:1", upstream_kind="chat")
    with pytest.raises(ValueError, match="model: the folder"):
        ModelConfig(name="q", upstream="http://h:1", upstream_kind="llamacpp")


def test_cli_serve_with_a_chat_upstream_and_its_usage_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import structlog

    from deltaflow.cli import _build_parser, _gateway_engine, main

    monkeypatch.setattr(structlog, "configure", lambda **kwargs: None)  # keep the test process's logging as it is

    args = _build_parser().parse_args(["serve", "--upstream", "http://127.0.0.1:9", "--upstream-kind", "chat",
                                       "--served-model-name", "q"])
    engine = _gateway_engine(args)
    try:
        assert engine.served["q"].passthrough
    finally:
        anyio.run(engine.aclose)
    cases = [
        (["--upstream-kind", "chat"], "needs --served-model-name"),
        (["--upstream-kind", "chat", "--served-model-name", "q", "--tool-parser", "hermes"],
         "--tool-parser: not used with --upstream-kind chat"),
        ([], "--upstream needs --model DIR"),
    ]
    for extra, words in cases:
        assert main(["serve", "--upstream", "http://127.0.0.1:9", *extra]) == 2
        assert words in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "no --model needed" in " ".join(capsys.readouterr().out.split())
