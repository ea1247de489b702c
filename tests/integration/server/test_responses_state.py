"""OpenAI Responses state on a real server with the official openai SDK: ``store``, ``previous_response_id``,
``GET`` / ``DELETE /v1/responses/{id}``, ``/input_items``; and the Responses options agents send.

The wire tests run the bundled replay engine (``qwen3-weather``: reasoning, a sentence, two calls). The
prompt tests run a :class:`~deltaflow.gateway.engine.GatewayEngine` over :class:`ScriptedUpstream`, a double
of an upstream engine, and compare the prompts it receives: a conversation continued with
``previous_response_id`` must render exactly as the same conversation sent whole.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
import websockets.sync.client
from conftest_server import start_server
from structlog.testing import capture_logs

from deltaflow.gateway.engine import GatewayEngine, GatewayModel
from deltaflow.gateway.upstream import UpstreamRequest
from deltaflow.items import TokenChunk
from deltaflow.prompt.render import PromptModel
from deltaflow.prompt.template import ChatTemplate
from deltaflow.server import create_app
from deltaflow.server.store import MemoryResponseStore, SQLiteResponseStore, StoredResponse

REPLAY = "qwen3-weather"

# A template that renders everything a conversation holds (instructions, reasoning, calls, results,
# tools), so a prompt comparison sees every part of it.
TEMPLATE = (
    "{%- if tools %}{{ '<|tools|>' + (tools | tojson) + '<|end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{{ '<|' + m.role + '|>' }}"
    "{%- if m.reasoning_content %}{{ '<think>' + m.reasoning_content + '</think>' }}{%- endif %}"
    "{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}{{ '<call ' + c.id + '>' + c.function.name + (c.function.arguments | tojson) }}"
    "{%- endfor %}"
    "{%- if m.tool_call_id %}{{ ' (answers ' + m.tool_call_id + ')' }}{%- endif %}{{ '<|end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>' }}{%- endif %}"
)
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = '<think>The user wants the weather; I call the tool.</think><tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "<think>The tool answered.</think>It is sunny in Paris."


@dataclass
class ScriptedUpstream:
    """An upstream double, not a model: it answers a prompt whose last turn is a tool result with
    :data:`ANSWER`, any other prompt with :data:`CALL`, and records every prompt it is sent."""

    kind: str = "scripted"
    constraint_forms: tuple[str, ...] = ("gbnf",)
    prompts: list[str] = field(default_factory=list)

    async def generate(self, request: UpstreamRequest) -> AsyncIterator[TokenChunk]:
        self.prompts.append(request.prompt)
        last_turn = request.prompt.split("<|end|>\n")[-2]  # the last message (after it: the generation prompt)
        reply = ANSWER if last_turn.startswith("<|tool|>") else CALL
        half = len(reply) // 2
        yield TokenChunk(text=reply[:half])
        yield TokenChunk(text=reply[half:], finish_reason="stop")

    async def health(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass


def prompt_model() -> PromptModel:
    template = ChatTemplate.from_string(TEMPLATE, name="t", special_tokens={"eos_token": "<|end|>"})
    return PromptModel("m", template, tool_parser="hermes", reasoning_parser="qwen3")


@dataclass
class Served:
    base: str
    app: Any
    client: openai.OpenAI


def _serve(app: Any) -> Iterator[Served]:
    server, thread, base = start_server(app, lifespan="on")
    try:
        with openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0) as client:
            yield Served(base, app, client)
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def replay() -> Iterator[Served]:
    """The replay engine, with the default (memory) store."""
    yield from _serve(create_app(heartbeat=5.0))


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[Served, ScriptedUpstream]]:
    """A gateway over the scripted upstream double."""
    up = ScriptedUpstream()
    engine = GatewayEngine([GatewayModel(name="m", prompt=prompt_model(), upstream=up)])
    for served in _serve(create_app(engine, heartbeat=5.0)):
        yield served, up


def dumped(items: list[Any]) -> list[dict[str, Any]]:
    """SDK output items as a client sends them back."""
    return [i.model_dump(exclude_none=True) for i in items]


# --------------------------------------------------------------------------- store, retrieve, delete


def test_a_stored_response_is_retrieved_as_it_was_sent(replay: Served) -> None:
    """store (default true): GET /v1/responses/{id} is the response object sent, non-streaming or streamed."""
    client = replay.client
    sent = client.responses.create(model=REPLAY, input="Weather in Paris and Tokyo?")
    assert [o.type for o in sent.output] == ["reasoning", "message", "function_call", "function_call"]
    assert client.responses.retrieve(sent.id).model_dump() == sent.model_dump()
    with client.responses.stream(model=REPLAY, input="Again?", store=True) as stream:
        final = [e for e in stream if e.type == "response.completed"][-1].response
    # (the SDK's stream helper adds 'parsed': None to the text parts it hands over)
    assert client.responses.retrieve(final.id).model_dump(exclude_none=True) == final.model_dump(exclude_none=True)


def test_a_streamed_response_is_stored_before_response_completed_is_sent(replay: Served) -> None:
    """A client that continues the moment it sees response.completed finds the response stored."""
    client = replay.client
    with client.responses.stream(model=REPLAY, input="Weather?") as stream:
        for event in stream:
            if event.type == "response.completed":
                assert client.responses.retrieve(event.response.id).id == event.response.id
                follow = client.responses.create(model=REPLAY, input="More?", previous_response_id=event.response.id)
                assert follow.status == "completed"


def test_store_false_is_not_stored_and_unknown_ids_are_404(replay: Served) -> None:
    """store: false leaves nothing to retrieve; an unknown id is a 404 in OpenAI's error shape."""
    client = replay.client
    sent = client.responses.create(model=REPLAY, input="hi", store=False)
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.retrieve(sent.id)
    assert exc.value.body == {"message": f"Response with id '{sent.id}' not found.", "type": "invalid_request_error",
                              "param": None, "code": "not_found"}
    for method, path in (("GET", "resp_nope"), ("GET", "resp_nope/input_items"), ("DELETE", "resp_nope")):
        r = httpx.request(method, f"{replay.base}/v1/responses/{path}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_delete(replay: Served) -> None:
    """DELETE answers OpenAI's deletion object; the response is then gone (GET and DELETE are 404s)."""
    client = replay.client
    sent = client.responses.create(model=REPLAY, input="hi")
    r = httpx.delete(f"{replay.base}/v1/responses/{sent.id}")
    assert r.status_code == 200 and r.json() == {"id": sent.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(sent.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(sent.id)
    other = client.responses.create(model=REPLAY, input="hi")
    client.responses.delete(other.id)  # the SDK's own call
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(other.id)


def test_input_items_are_listed_in_openai_shape(replay: Served) -> None:
    """input_items: a string input is one user message; order desc by default, asc, limit, after, has_more."""
    client = replay.client
    one = client.responses.create(model=REPLAY, input="Weather?")
    items = client.responses.input_items.list(one.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [("message", "user", "Weather?")]
    many = client.responses.create(model=REPLAY, input=[
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"type": "message", "role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "input_text", "text": "second"}]},
    ])
    raw = httpx.get(f"{replay.base}/v1/responses/{many.id}/input_items").json()
    assert raw["object"] == "list" and raw["has_more"] is False
    ids = [i["id"] for i in raw["data"]]
    assert len(set(ids)) == 4 and all(i.startswith("msg_") for i in ids)
    assert (raw["first_id"], raw["last_id"]) == (ids[0], ids[-1])
    assert [i["role"] for i in raw["data"]] == ["user", "assistant", "user", "developer"]  # newest first
    asc = client.responses.input_items.list(many.id, order="asc")
    assert [i.id for i in asc.data] == ids[::-1]
    page = httpx.get(f"{replay.base}/v1/responses/{many.id}/input_items",
                     params={"order": "asc", "limit": 3}).json()
    assert [i["id"] for i in page["data"]] == ids[::-1][:3] and page["has_more"] is True
    rest = httpx.get(f"{replay.base}/v1/responses/{many.id}/input_items",
                     params={"order": "asc", "after": page["last_id"]}).json()
    assert [i["id"] for i in rest["data"]] == ids[::-1][3:] and rest["has_more"] is False
    paged = list(client.responses.input_items.list(many.id, order="asc", limit=1))  # the SDK follows the pages
    assert [i.id for i in paged] == ids[::-1]
    for params, param in (({"limit": 0}, "limit"), ({"limit": "x"}, "limit"), ({"order": "up"}, "order"),
                          ({"after": "msg_nope"}, "after")):
        r = httpx.get(f"{replay.base}/v1/responses/{many.id}/input_items", params=params)
        assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_retrieving_with_stream_is_refused(replay: Served) -> None:
    """GET ...?stream=true is a clear 400 (a stored response is not replayed as events)."""
    sent = replay.client.responses.create(model=REPLAY, input="hi")
    r = httpx.get(f"{replay.base}/v1/responses/{sent.id}", params={"stream": "true"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"


# --------------------------------------------------------------------------- previous_response_id


def test_an_unknown_previous_response_id_is_openais_400(replay: Served) -> None:
    """An unknown previous_response_id: 400 previous_response_not_found, as OpenAI answers it."""
    with pytest.raises(openai.BadRequestError) as exc:
        replay.client.responses.create(model=REPLAY, input="x", previous_response_id="resp_nope")
    assert exc.value.body == {"message": "Previous response with id 'resp_nope' not found.",
                              "type": "invalid_request_error", "param": "previous_response_id",
                              "code": "previous_response_not_found"}
    r = httpx.post(f"{replay.base}/v1/responses", json={"model": REPLAY, "input": "x", "previous_response_id": 3})
    assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
    r = httpx.post(f"{replay.base}/v1/responses", json={"model": REPLAY, "input": "x", "conversation": "conv_1"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "conversation"


def test_a_continued_response_stores_the_whole_input(replay: Served) -> None:
    """The continued response's input items: the previous input, the previous output, then the new input."""
    client = replay.client
    first = client.responses.create(model=REPLAY, input="Weather?")
    calls = [o for o in first.output if o.type == "function_call"]
    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls]
    second = client.responses.create(model=REPLAY, input=outputs, previous_response_id=first.id)
    items = list(client.responses.input_items.list(second.id, order="asc", limit=100))
    first_input = list(client.responses.input_items.list(first.id, order="asc"))
    assert [i.id for i in items[: 1 + len(first.output)]] == [first_input[0].id, *[o.id for o in first.output]]
    assert [i.type for i in items] == ["message", "reasoning", "message", "function_call", "function_call",
                                       "function_call_output", "function_call_output"]
    assert [i.call_id for i in items[-2:]] == [c.call_id for c in calls]
    store = replay.app.state.deltaflow.response_store

    async def record() -> StoredResponse | None:
        return await store.get(second.id)

    stored = anyio.run(record)
    assert stored is not None and stored.previous_response_id == first.id and stored.model == REPLAY


def test_continuing_renders_the_prompt_of_the_whole_conversation(gateway: tuple[Served, ScriptedUpstream]) -> None:
    """A call, its result, a new question: continued with previous_response_id, each prompt is the one of the
    same conversation sent whole (instructions given again each time, as OpenAI requires)."""
    served, up = gateway
    client = served.client
    ask = "What is the weather in Paris?"
    first = client.responses.create(model="m", instructions="Be brief.", input=ask, tools=TOOLS,
                                    include=["reasoning.encrypted_content"])  # sealed: the resent items verify
    assert [o.type for o in first.output] == ["reasoning", "function_call"]
    call = first.output[1]
    result = [{"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}]
    second = client.responses.create(model="m", instructions="Be brief.", input=result, tools=TOOLS,
                                     previous_response_id=first.id, include=["reasoning.encrypted_content"])
    assert second.output_text == "It is sunny in Paris."
    continued_second = up.prompts[-1]
    third = client.responses.create(model="m", instructions="Be brief.", input="And tomorrow?", tools=TOOLS,
                                    previous_response_id=second.id, stream=False)
    continued_third = up.prompts[-1]
    assert third.status == "completed"

    whole = [{"role": "user", "content": ask}, *dumped(first.output), *result]
    client.responses.create(model="m", instructions="Be brief.", input=whole, tools=TOOLS, store=False)
    assert up.prompts[-1] == continued_second
    whole += [*dumped(second.output), {"role": "user", "content": "And tomorrow?"}]
    client.responses.create(model="m", instructions="Be brief.", input=whole, tools=TOOLS, store=False)
    assert up.prompts[-1] == continued_third
    assert "It is sunny in Paris." in continued_third and continued_third.count("(answers ") == 1
    assert continued_third.startswith("<|tools|>") and "<|system|>Be brief.<|end|>" in continued_third


def test_item_references_render_as_the_items_they_name(gateway: tuple[Served, ScriptedUpstream]) -> None:
    """``item_reference`` items (what the AI SDK sends for a stored response's items) render as the stored
    items themselves, the referenced reasoning as the model's own (it is this server's; no seal was asked
    for); an unknown id is a 400 naming the item; a reference without an id too."""
    served, up = gateway
    client = served.client
    ask = "What is the weather in Paris?"
    first = client.responses.create(model="m", input=ask, tools=TOOLS)  # stored; nothing sealed
    reasoning, call = first.output
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}
    refs = [{"type": "item_reference", "id": reasoning.id}, {"type": "item_reference", "id": call.id}]
    client.responses.create(model="m", input=[{"role": "user", "content": ask}, *refs, result], tools=TOOLS)
    referenced = up.prompts[-1]
    assert "<think>The user wants the weather; I call the tool.</think>" in referenced
    sealed = client.responses.create(model="m", input=ask, tools=TOOLS, include=["reasoning.encrypted_content"],
                                     store=False)
    whole = [{"role": "user", "content": ask}, *dumped(sealed.output), {**result, "call_id": sealed.output[1].call_id}]
    client.responses.create(model="m", input=whole, tools=TOOLS, store=False)
    assert up.prompts[-1] == referenced.replace(call.call_id, sealed.output[1].call_id)  # the same conversation
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model="m", input=[{"type": "item_reference", "id": "msg_nothing"}])
    assert "Item with id 'msg_nothing' not found." in str(exc.value) and exc.value.body["param"] == "input[0].id"
    with pytest.raises(openai.BadRequestError, match=r"input\[0\].id: an item_reference needs the 'id'"):
        client.responses.create(model="m", input=[{"type": "item_reference"}])


def test_instructions_are_not_inherited(gateway: tuple[Served, ScriptedUpstream]) -> None:
    """A continuation without instructions renders none; tools come from the new request only."""
    served, up = gateway
    client = served.client
    first = client.responses.create(model="m", instructions="Be brief.", input="Weather?", tools=TOOLS)
    assert "Be brief." in up.prompts[-1] and "<|tools|>" in up.prompts[-1]
    client.responses.create(model="m", input="And in Rome?", previous_response_id=first.id)
    assert "Be brief." not in up.prompts[-1] and "<|tools|>" not in up.prompts[-1]
    assert up.prompts[-1].startswith("<|user|>Weather?<|end|>\n")


def test_a_streamed_continuation(gateway: tuple[Served, ScriptedUpstream]) -> None:
    """Streaming on both sides: the streamed first response is continued by a streamed second one."""
    served, up = gateway
    client = served.client
    with client.responses.stream(model="m", input="Weather?", tools=TOOLS) as s:
        first = s.get_final_response()
    call = first.output[-1]
    with client.responses.stream(model="m", tools=TOOLS, previous_response_id=first.id,
                                 input=[{"type": "function_call_output", "call_id": call.call_id,
                                         "output": "sunny"}]) as s:
        second = s.get_final_response()
    assert second.output_text == "It is sunny in Paris."
    assert client.responses.retrieve(second.id).output_text == "It is sunny in Paris."


def test_stored_reasoning_is_sealed_when_replayed(tmp_path: Path) -> None:
    """With a reasoning sealer (the gateway renders only sealed reasoning), the stored reasoning of the
    previous response reaches the continued prompt; reasoning a client wrote into its input does not."""
    signing = pytest.importorskip("deltaflow.signing")
    sealer_class = getattr(signing, "ReasoningSealer", None)
    if sealer_class is None or not hasattr(GatewayEngine, "use_keys"):
        pytest.skip("needs deltaflow.signing.ReasoningSealer and GatewayEngine.use_keys (reasoning verification)")
    pytest.importorskip("cryptography")
    up = ScriptedUpstream()
    engine = GatewayEngine([GatewayModel(name="m", prompt=prompt_model(), upstream=up)])
    app = create_app(engine, heartbeat=5.0, signing_key="k")
    state = app.state.deltaflow
    if getattr(state, "sealer", None) is None:
        state.sealer = sealer_class("k")
    engine.use_keys(state.signer, state.sealer)
    for served in _serve(app):
        client = served.client
        first = client.responses.create(model="m", tools=TOOLS, input=[
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "a client's words"}]},
            {"role": "user", "content": "Weather?"},
        ])
        assert "a client's words" not in up.prompts[-1]
        call = first.output[-1]
        client.responses.create(model="m", tools=TOOLS, previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
        assert "The user wants the weather; I call the tool." in up.prompts[-1]
        assert "a client's words" not in up.prompts[-1]


# --------------------------------------------------------------------------- SQLite, the WebSocket, a failing store


def test_sqlite_state_survives_a_restart(tmp_path: Path) -> None:
    """Responses stored in SQLite are retrieved, listed and continued after the server (and store) restarted."""
    path = tmp_path / "responses.sqlite3"
    for served in _serve(create_app(heartbeat=5.0, response_store=SQLiteResponseStore(path))):
        sent = served.client.responses.create(model=REPLAY, input="Weather?")
        items = [i.model_dump() for i in served.client.responses.input_items.list(sent.id)]
    # the server stopped; its lifespan closed the store
    for served in _serve(create_app(heartbeat=5.0, response_store=SQLiteResponseStore(path))):
        client = served.client
        assert client.responses.retrieve(sent.id).model_dump() == sent.model_dump()
        assert [i.model_dump() for i in client.responses.input_items.list(sent.id)] == items
        follow = client.responses.create(model=REPLAY, input="More?", previous_response_id=sent.id)
        assert len(list(client.responses.input_items.list(follow.id, limit=100))) == 1 + len(sent.output) + 1


def test_the_websocket_route_stores_too(replay: Served) -> None:
    """A Responses request over /v1/ws is stored before its final event, and may continue a stored one."""
    url = replay.base.replace("http://", "ws://") + "/v1/ws"
    first = replay.client.responses.create(model=REPLAY, input="Weather?")
    with websockets.sync.client.connect(url) as ws:
        ws.send(json.dumps({"protocol": "responses", "model": REPLAY, "input": "More?",
                            "previous_response_id": first.id}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads(ws.recv(timeout=5)))
    done = events[-1]["response"]
    assert replay.client.responses.retrieve(done["id"]).id == done["id"]
    assert len(list(replay.client.responses.input_items.list(done["id"], limit=100))) == 2 + len(first.output)


class FailingStore(MemoryResponseStore):
    """A store whose writes fail."""

    async def put(self, response_id: str, record: StoredResponse) -> None:
        raise OSError("disk full")


def test_a_failing_store_does_not_fail_the_answer() -> None:
    """The response still goes out (streamed and not); the failure is logged as an error."""
    for served in _serve(create_app(heartbeat=5.0, response_store=FailingStore())):
        with capture_logs() as logs:
            sent = served.client.responses.create(model=REPLAY, input="hi")
            with served.client.responses.stream(model=REPLAY, input="hi") as s:
                streamed = s.get_final_response()
            deadline = time.monotonic() + 5
            while sum(e["event"] == "response_store_failed" for e in logs) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        assert sent.status == streamed.status == "completed"
        failures = [e for e in logs if e["event"] == "response_store_failed"]
        assert [(e["log_level"], e["op"], e["error"]) for e in failures] == [("error", "put", "disk full")] * 2


# --------------------------------------------------------------------------- Responses options agents send


HOSTED = [
    {"type": "web_search"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "mcp", "server_label": "deepwiki", "server_url": "https://example.invalid/mcp"},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
    {"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "linux"},
    {"type": "local_shell"},
    {"type": "namespace", "name": "ns", "tools": []},
]


@pytest.mark.parametrize("tool", HOSTED, ids=lambda t: t["type"])
def test_unsupported_tool_types_are_refused_by_default(replay: Served, tool: dict[str, Any]) -> None:
    """A tool that is not a function is a 400 naming its index, its type and the ignore option."""
    with pytest.raises(openai.BadRequestError) as exc:
        replay.client.responses.create(model=REPLAY, input="x", tools=[TOOLS[0], tool])
    body = exc.value.body
    assert isinstance(body, dict) and body["param"] == "tools[1].type" and body["code"] == "unsupported_value"
    assert "tools[1]" in body["message"] and repr(tool["type"]) in body["message"]
    assert "unsupported_tools='ignore'" in body["message"]
    if "name" in tool or "server_label" in tool:
        assert repr(tool.get("name", tool.get("server_label"))) in body["message"]


def test_unsupported_tools_ignored_when_the_operator_says_so() -> None:
    """unsupported_tools="ignore": hosted tools are dropped (logged); the functions reach the prompt."""
    up = ScriptedUpstream()
    engine = GatewayEngine([GatewayModel(name="m", prompt=prompt_model(), upstream=up)])
    for served in _serve(create_app(engine, heartbeat=5.0, unsupported_tools="ignore")):
        with capture_logs() as logs:
            sent = served.client.responses.create(model="m", input="Weather?", tools=[*HOSTED, TOOLS[0]],
                                                  tool_choice={"type": "web_search_preview"})
        assert sent.status == "completed" and [o.type for o in sent.output] == ["reasoning", "function_call"]
        tools_line = up.prompts[-1].split("<|tools|>")[1].split("<|end|>")[0]
        assert [t["function"]["name"] for t in json.loads(tools_line)] == ["get_weather"]
        dropped = [e for e in logs if e["event"] == "unsupported_tools_dropped"]
        assert dropped and dropped[0]["tools"][:4] == ["web_search", "file_search", "mcp 'deepwiki'",
                                                       "custom 'apply_patch'"]
        assert any(e["event"] == "unsupported_tool_choice_dropped" for e in logs)
        stored = served.client.responses.input_items.list(sent.id)
        assert len(stored.data) == 1
    with pytest.raises(ValueError, match="unsupported_tools must be one of refuse, ignore"):
        create_app(unsupported_tools="drop")


def test_options_agents_send_are_accepted(gateway: tuple[Served, ScriptedUpstream]) -> None:
    """parallel_tool_calls, text.format (json_schema is accepted, not enforced), truncation, include."""
    served, _ = gateway
    client = served.client
    schema = {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}
    for options in (
        {"parallel_tool_calls": False},
        {"text": {"format": {"type": "text"}, "verbosity": "low"}},
        {"text": {"format": schema}},
        {"text": {"format": {"type": "json_object"}}},
        {"truncation": "auto"},
        {"truncation": "disabled"},
        {"include": ["reasoning.encrypted_content"]},
        {"include": ["message.output_text.logprobs"], "store": False, "parallel_tool_calls": True},
    ):
        sent = client.responses.create(model="m", input="Weather?", tools=TOOLS, **options)
        assert sent.status == "completed", options
    prepared = served.app.state.deltaflow.prepare(
        "responses", {"model": "m", "input": "x", "include": ["reasoning.encrypted_content"]})
    assert prepared.include == ("reasoning.encrypted_content",)


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"truncation": "middle"}, "truncation"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"text": {"format": {"type": "xml"}}}, "text.format"),
        ({"text": "json"}, "text"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"store": "yes"}, "store"),
        ({"input": ["not an item"]}, "input[0]"),
    ],
    ids=lambda x: json.dumps(x) if isinstance(x, dict) else x,
)
def test_options_of_the_wrong_form_are_400s(replay: Served, options: dict[str, Any], param: str) -> None:
    """Each option of a wrong form is a 400 naming it."""
    r = httpx.post(f"{replay.base}/v1/responses", json={"model": REPLAY, "input": "x", **options})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_stored_responses_need_the_api_key() -> None:
    """With an API key, GET, DELETE and input_items answer 401 without it (OpenAI's shape), and work with it."""
    for served in _serve(create_app(heartbeat=5.0, api_key="k")):
        with openai.OpenAI(base_url=served.base + "/v1", api_key="k", max_retries=0) as client:
            sent = client.responses.create(model=REPLAY, input="hi")
            for method, path in (("GET", sent.id), ("GET", f"{sent.id}/input_items"), ("DELETE", sent.id)):
                r = httpx.request(method, f"{served.base}/v1/responses/{path}")
                assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert client.responses.retrieve(sent.id).id == sent.id
            client.responses.delete(sent.id)
