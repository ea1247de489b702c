"""Forced tool calls through the gateway for every family with a vocabulary in ../shared, not only Qwen3.

The same chain as ``test_gateway_llamacpp.py`` (official SDK -> deltaflow's app on loopback -> the family's
chat template and tokenizer -> a real llama.cpp server on a tiny random-weight model of that vocabulary ->
the family's tool parser -> the client protocol), for Llama 3 (``llama3_json``: a bare JSON object after
``<|python_tag|>`` or none) and DeepSeek V3 (``deepseek_v3``: special-token markers, a fenced JSON body;
gpt-oss is left out, see FAMILIES). A random model writes nothing useful, so ``tool_choice`` forces the call: the gateway
writes the family's own GBNF constraint (token references for its special-token markers), the engine
samples inside it, and what the SDK receives must be one call whose arguments validate against the schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_support import CHAT_TOOLS, SCHEMA, gateway_on, valid

from deltaflow.gateway.config import ModelConfig

pytestmark = [pytest.mark.shared, pytest.mark.engine]

openai = pytest.importorskip("openai", reason="the openai SDK is not installed (pip install -e '.[test]')")
anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is not installed (pip install -e '.[test]')")

# family (a key of gguf_models.FAMILIES) -> (tokenizer folder in ../shared/tokenizers, tool parser, reasoning parser,
# the marker texts a client must never see in content, the chat template file in ../shared/templates or None for
# the folder's own). DeepSeek V3's own template renders no tool definitions (the gateway refuses tools with it),
# so it runs with the template vLLM ships for tool use, as an operator would (--chat-template).
FAMILIES = {
    "llama3": ("llama3", "llama3_json", None, ("<|python_tag|>", "<|eot_id|>"), None),
    "deepseek-v3": ("deepseek-v3", "deepseek_v3", None, ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁end｜>"),
                    "vllm-tool_chat_template_deepseekv3.jinja"),
}
# Not gpt-oss: Harmony cannot turn reasoning off, so a forced call is constrained only after the analysis
# ends (a lazy grammar whose trigger is "<|end|>", see deltaflow.gateway.upstreams.llamacpp), and a random
# model never writes that token: it fills max_tokens with free text. The after-the-reasoning trigger is
# tested in tests/unit/gateway/test_upstreams.py; gpt-oss's rendering and tokens against llama.cpp in
# test_llamacpp_engine.py.


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def gateway(shared: Path, llamacpp_server: Any, family: str) -> Iterator[str]:
    """deltaflow in front of the family's llama.cpp server; yields the gateway's base URL."""
    folder, tool_parser, reasoning_parser, _, template = FAMILIES[family]
    server = llamacpp_server(family)
    with gateway_on(ModelConfig(
        name="tiny",
        upstream=server.base_url,
        upstream_kind="llamacpp",
        model=str(shared / "tokenizers" / folder),
        chat_template=None if template is None else str(shared / "templates" / template),
        tool_parser=tool_parser,
        reasoning_parser=reasoning_parser,
        context_length=4096,
        max_tokens=256,
    )) as base:
        yield base


def test_chat_forced_call_not_streamed(oai: Any, family: str) -> None:
    markers = FAMILIES[family][3]
    done = oai.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=CHAT_TOOLS,
        tool_choice="required", seed=1, max_tokens=200, parallel_tool_calls=False,
    )
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather" and valid(json.loads(call.function.arguments)), call
    content = choice.message.content or ""
    assert not any(m in content for m in markers), content


def test_chat_named_call_streamed(oai: Any) -> None:
    stream = oai.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Weather in Lima?"}], tools=CHAT_TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, seed=2, max_tokens=200, stream=True,
    )
    names, args, finish, content = [], "", None, ""
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            if tc.function and tc.function.name:
                names.append(tc.function.name)
            if tc.function and tc.function.arguments:
                args += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert names == ["get_weather"] and valid(json.loads(args)) and finish == "tool_calls", (names, args, content)


def test_anthropic_forced_call_streamed(claude: Any) -> None:
    tools = [{"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA}]
    with claude.messages.stream(  # temperature 0: no seed in this API either (see test_responses_forced_call)
        model="tiny", max_tokens=200, tools=tools, tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "Weather in Oslo?"}], extra_body={"temperature": 0},
    ) as s:
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and valid(uses[0].input), final
    assert final.stop_reason == "tool_use"


def test_responses_forced_call(oai: Any) -> None:
    # Responses has no seed: temperature 0 makes llama.cpp's choice greedy, so the run is repeatable. Sampled
    # freely, the random model now and then picks bytes that are no UTF-8 inside the city's string, which the
    # grammar lets through as parts of characters and the engine sends as U+FFFD (past the schema's maxLength).
    resp = oai.responses.create(
        model="tiny", input="Weather in Rome?", tool_choice="required", max_output_tokens=200, temperature=0,
        parallel_tool_calls=False, tools=[{"type": "function", "name": "get_weather", "parameters": SCHEMA}],
    )
    calls = [o for o in resp.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and valid(json.loads(calls[0].arguments)), resp.output
