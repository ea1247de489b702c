"""The gateway end to end with real parts: the official openai and anthropic SDKs -> deltaflow's app on
loopback (uvicorn) -> the Qwen3 chat template and tokenizer of ../shared -> a real llama.cpp server
(xllamacpp) on a tiny random-weight Qwen3 model -> the Hermes parser -> each client protocol.

A random model writes nothing useful, so the requests force a call with ``tool_choice`` (the gateway
turns it into llama.cpp's GBNF, with token references for ``<tool_call>``): what the SDKs receive must be
one call whose arguments validate against the tool's schema, streamed and not, in the three APIs.
Thinking is off in these requests (a random model would fill a free reasoning span to the limit).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from gateway_support import CHAT_TOOLS, SCHEMA, gateway_on, valid

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "server"))
from conftest_server import start_server  # noqa: E402

from deltaflow.gateway.config import ModelConfig, build_engine  # noqa: E402
from deltaflow.server import create_app  # noqa: E402

pytestmark = [pytest.mark.shared, pytest.mark.engine]

openai = pytest.importorskip("openai", reason="the openai SDK is not installed (pip install -e '.[test]')")
anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is not installed (pip install -e '.[test]')")

OFF = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def gateway(shared: Path, llamacpp_qwen3: Any) -> Iterator[str]:
    """deltaflow in front of the Qwen3 llama.cpp server; yields the gateway's base URL."""
    with gateway_on(ModelConfig(
        name="qwen3-tiny",
        upstream=llamacpp_qwen3.base_url,
        upstream_kind="llamacpp",
        model=str(shared / "tokenizers" / "qwen3"),
        tool_parser="hermes",
        reasoning_parser="qwen3",
        context_length=4096,
        max_tokens=256,
    )) as base:
        yield base


def test_chat_completions_forced_call_streamed_and_not(oai: Any) -> None:
    client = oai
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    for seed in (1, 2):
        done = client.chat.completions.create(
            model="qwen3-tiny", messages=messages, tools=CHAT_TOOLS, tool_choice="required", seed=seed,
            max_tokens=200, extra_body=OFF, parallel_tool_calls=False,
        )
        choice = done.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        (call,) = choice.message.tool_calls or []
        assert call.function.name == "get_weather" and valid(json.loads(call.function.arguments))
        assert "<tool_call>" not in (choice.message.content or "") and "<|im_end|>" not in (choice.message.content or "")
    stream = client.chat.completions.create(
        model="qwen3-tiny", messages=messages, tools=CHAT_TOOLS, tool_choice={"type": "function",
        "function": {"name": "get_weather"}}, seed=3, max_tokens=200, stream=True, extra_body=OFF,
    )
    names, args, finish = [], "", None
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or []:
            if tc.function and tc.function.name:
                names.append(tc.function.name)
            if tc.function and tc.function.arguments:
                args += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert names == ["get_weather"] and valid(json.loads(args)) and finish == "tool_calls"


def test_anthropic_messages_forced_call_streamed(claude: Any) -> None:
    client = claude
    tools = [{"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA}]
    with client.messages.stream(
        model="qwen3-tiny", max_tokens=200, tools=tools, tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "Weather in Oslo?"}], thinking={"type": "disabled"},
    ) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    assert "content_block_start" in events and "message_stop" in events
    uses = [b for b in final.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and valid(uses[0].input)
    assert final.stop_reason == "tool_use"


def test_responses_forced_call(oai: Any) -> None:
    client = oai
    resp = client.responses.create(
        model="qwen3-tiny", input="Weather in Rome?", tool_choice="required", max_output_tokens=200,
        parallel_tool_calls=False,
        tools=[{"type": "function", "name": "get_weather", "parameters": SCHEMA}], extra_body=OFF,
    )
    calls = [o for o in resp.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and valid(json.loads(calls[0].arguments))


def test_client_errors_come_back_in_each_protocols_shape(gateway: str) -> None:
    with httpx.Client(base_url=gateway, timeout=30) as http:
        r = http.post("/v1/chat/completions", json={"model": "qwen3-tiny", "messages": [{"role": "wizard",
                                                                                          "content": "x"}]})
        assert r.status_code == 400 and "messages[0].role" in r.json()["error"]["message"]
        long = "word " * 5000  # far past the 4096-token context
        r = http.post("/v1/messages", json={"model": "qwen3-tiny", "max_tokens": 100,
                                            "messages": [{"role": "user", "content": long}]})
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert "context of 4096 tokens" in r.json()["error"]["message"]
        r = http.post("/v1/responses", json={"model": "qwen3-tiny", "input": "hi", "max_output_tokens": 5000})
        assert r.status_code == 400 and "max_output_tokens" in r.json()["error"]["message"]


def test_a_truncated_answer_ends_with_each_protocols_length_signal(oai: Any, claude: Any) -> None:
    done = oai.chat.completions.create(
        model="qwen3-tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8, seed=1, extra_body=OFF,
    )
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 8 and done.usage.prompt_tokens > 0
    msg = claude.messages.create(
        model="qwen3-tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}], thinking={"type": "disabled"},
    )
    assert msg.stop_reason == "max_tokens"


def test_health_and_metrics(gateway: str) -> None:
    with httpx.Client(base_url=gateway, timeout=30) as http:
        h = http.get("/healthz")
        assert h.status_code == 200 and h.json() == {"status": "ok", "upstreams": {"qwen3-tiny": True}}
        text = http.get("/metrics").text
    assert 'deltaflow_requests_total{model="qwen3-tiny",outcome="accepted",protocol="chat.completions"}' in text
    assert 'deltaflow_requests_total{model="qwen3-tiny",outcome="refused",protocol="messages"}' in text
    assert "deltaflow_time_to_first_token_seconds_count" in text and "deltaflow_generated_tokens_total" in text
    assert 'deltaflow_streams_in_flight{model="qwen3-tiny"} 0.0' in text


def test_kind_context_and_special_tokens_are_probed(shared: Path, llamacpp_qwen3: Any) -> None:
    """Without --upstream-kind or a context length, llama.cpp is recognised by its /props, the context
    comes from there, and a generation of one control token shows that markers will survive."""
    folder = str(shared / "tokenizers" / "qwen3")
    engine = anyio.run(build_engine, [ModelConfig(name="Qwen/Qwen3-8B", upstream=llamacpp_qwen3.base_url,
                                                  model=folder)])
    (model,) = engine.served.values()
    assert model.name == "Qwen/Qwen3-8B" and model.upstream.kind == "llamacpp"
    assert model.context_length == llamacpp_qwen3.n_ctx // llamacpp_qwen3.n_parallel  # per slot
    assert model.prompt.tool_parser == "hermes" and model.prompt.reasoning_parser == "qwen3"  # the name's preset
    anyio.run(engine.aclose)


def test_a_llamacpp_server_without_special_tokens_still_gives_the_markers(shared: Path, tiny_gguf: Any) -> None:
    """Without --special llama.cpp leaves control tokens out of its text; the gateway sends the dialect's
    markers as preserved_tokens, so the forced call still parses (and no end-of-turn text leaks)."""
    from llamacpp import LlamaCppServer

    with LlamaCppServer(tiny_gguf("qwen3"), params={"special": False}) as plain:
        config = ModelConfig(name="plain", upstream=plain.base_url, model=str(shared / "tokenizers" / "qwen3"),
                             tool_parser="hermes", reasoning_parser="qwen3")
        engine = anyio.run(build_engine, [config])
        assert "<tool_call>" in engine.served["plain"].upstream.keep_tokens  # type: ignore[attr-defined]
        server, thread, base = start_server(create_app(engine), lifespan="on")
        try:
            with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0) as client:
                done = client.chat.completions.create(
                    model="plain", messages=[{"role": "user", "content": "Weather in Lima?"}], tools=CHAT_TOOLS,
                    tool_choice="required", parallel_tool_calls=False, seed=4, max_tokens=200, extra_body=OFF,
                )
            (call,) = done.choices[0].message.tool_calls or []
            assert call.function.name == "get_weather" and valid(json.loads(call.function.arguments))
        finally:
            server.should_exit = True
            thread.join(10)


def test_an_unreachable_upstream_is_a_502_in_each_protocols_shape(shared: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    config = ModelConfig(name="gone", upstream=f"http://127.0.0.1:{port}", upstream_kind="llamacpp",
                         model=str(shared / "tokenizers" / "qwen3"), context_length=4096)
    engine = anyio.run(build_engine, [config])
    server, thread, base = start_server(create_app(engine), lifespan="on")
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            r = http.post("/v1/chat/completions", json={"model": "gone", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 502 and r.json()["error"]["type"] == "server_error"
            assert str(port) not in r.text and "127.0.0.1" not in r.text  # no internal address
            r = http.post("/v1/messages", json={"model": "gone", "max_tokens": 10,
                                                "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 502 and r.json()["error"]["type"] == "api_error"
            h = http.get("/healthz")
            assert h.status_code == 503 and h.json()["upstreams"] == {"gone": False}
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_client_that_leaves_frees_the_engines_slot(gateway: str, llamacpp_qwen3: Any) -> None:
    """The client closes its stream after a few events: the gateway closes its upstream request, and
    llama.cpp's slot is idle again within a second (it stops generating for nobody). A random model
    may write its end-of-turn token early: a seed whose answer ended by itself is not a test of it."""
    import time

    with httpx.Client(base_url=llamacpp_qwen3.base_url, timeout=10) as engine, \
            httpx.Client(base_url=gateway, timeout=30) as http:
        for seed in range(1, 9):
            body = {"model": "qwen3-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000,
                    "stream": True, "seed": seed, **OFF}
            with http.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                seen = 0
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        seen += 1
                    if seen >= 5:
                        break
                busy = any(s["is_processing"] for s in engine.get("/slots").json())
            if not busy:
                continue  # this answer ended on its own within five events
            left = time.monotonic()
            while any(s["is_processing"] for s in engine.get("/slots").json()):
                assert time.monotonic() - left < 1.0, "llama.cpp is still generating for a client that left"
                time.sleep(0.02)
            return
    pytest.fail("every seed's answer ended within five events")
