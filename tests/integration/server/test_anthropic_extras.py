"""Anthropic extras agents call, on a real server with the official anthropic SDK: ``/v1/messages/count_tokens``,
the ``anthropic-version`` / ``anthropic-beta`` headers, ``stop_sequences``, ``metadata`` and every ``tool_choice``.

The gateway tests run a :class:`~deltaflow.gateway.engine.GatewayEngine` over :class:`RecordingUpstream`, a
double of an upstream engine that records what it is sent; the wire-only tests run the bundled replay engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from conftest_server import start_server
from structlog.testing import capture_logs

from deltaflow.gateway.engine import GatewayEngine, GatewayModel
from deltaflow.gateway.upstream import UpstreamRequest
from deltaflow.items import TokenChunk
from deltaflow.prompt.render import PromptModel
from deltaflow.prompt.template import ChatTemplate
from deltaflow.server import EngineRequest, create_app

REPLAY = "qwen3-weather"
TEMPLATE = (
    "{%- if tools %}{{ '<|tools|>' + (tools | tojson) + '<|end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{{ '<|' + m.role + '|>' + (m.content or '') }}"
    "{%- for c in m.tool_calls or [] %}{{ '<call>' + c.function.name + (c.function.arguments | tojson) }}{%- endfor %}"
    "{{ '<|end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>' }}{%- endif %}"
)
TOOLS = [{"name": "get_weather", "description": "The weather in a city.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@dataclass
class RecordingUpstream:
    """An upstream double, not a model: it answers every request with one get_weather call (Hermes format)
    and records the requests it is sent."""

    constraint_forms: tuple[str, ...] = ("gbnf",)
    kind: str = "recording"
    requests: list[UpstreamRequest] = field(default_factory=list)

    async def generate(self, request: UpstreamRequest) -> AsyncIterator[TokenChunk]:
        self.requests.append(request)
        yield TokenChunk(text=CALL[:20])
        yield TokenChunk(text=CALL[20:], finish_reason="stop")

    async def health(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass


def _serve(app: Any) -> Iterator[str]:
    server, thread, base = start_server(app, lifespan="on")
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


def _gateway(prompt: PromptModel, up: RecordingUpstream) -> GatewayEngine:
    return GatewayEngine([GatewayModel(name="m", prompt=prompt, upstream=up)])


@dataclass
class Gateway:
    base: str
    engine: GatewayEngine
    upstream: RecordingUpstream
    client: anthropic.Anthropic


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    """A gateway with an inline template (no tokenizer) over the recording upstream double."""
    up = RecordingUpstream()
    template = ChatTemplate.from_string(TEMPLATE, name="t", special_tokens={"eos_token": "<|end|>"})
    engine = _gateway(PromptModel("m", template, tool_parser="hermes"), up)
    for base in _serve(create_app(engine, heartbeat=5.0)):
        with anthropic.Anthropic(base_url=base, api_key="x", max_retries=0) as client:
            yield Gateway(base, engine, up, client)


@pytest.fixture(scope="module")
def qwen3(shared: Path) -> Iterator[Gateway]:
    """A gateway rendering with the real Qwen3 template and tokenizer (from ../shared), over an upstream that
    cannot constrain generation."""
    up = RecordingUpstream(constraint_forms=())
    prompt = PromptModel.from_folder(shared / "tokenizers" / "qwen3", tool_parser="hermes", reasoning_parser="qwen3")
    engine = _gateway(prompt, up)
    for base in _serve(create_app(engine, heartbeat=5.0, api_key="secret")):
        with anthropic.Anthropic(base_url=base, api_key="secret", max_retries=0) as client:
            yield Gateway(base, engine, up, client)


@pytest.fixture(scope="module")
def replay() -> Iterator[anthropic.Anthropic]:
    """The replay engine (no prompt rendering)."""
    for base in _serve(create_app(heartbeat=5.0)):
        with anthropic.Anthropic(base_url=base, api_key="x", max_retries=0) as client:
            yield client


# --------------------------------------------------------------------------- count_tokens


def _planned_length(engine: GatewayEngine, body: dict[str, Any]) -> int:
    """The prompt length of the same body sent to /v1/messages (with a max_tokens)."""
    plan = engine.plan(EngineRequest(model="m", protocol="messages", body={**body, "max_tokens": 16}))
    assert plan.prompt.token_ids is not None
    return len(plan.prompt.token_ids)


def test_count_tokens_is_the_length_of_the_prompt_a_message_renders(qwen3: Gateway) -> None:
    """input_tokens is the token count of the prompt the same request renders to, system and tools included."""
    client = qwen3.client
    plain = client.messages.count_tokens(model="m", messages=MESSAGES)
    assert plain.input_tokens == _planned_length(qwen3.engine, {"messages": MESSAGES}) > 5
    full = {"system": "Be brief.", "tools": TOOLS, "messages": MESSAGES}
    counted = client.messages.count_tokens(model="m", **full)
    assert counted.input_tokens == _planned_length(qwen3.engine, full) > plain.input_tokens
    assert qwen3.upstream.requests == []  # counting never generates


def test_count_tokens_counts_forced_tool_choices_as_auto(qwen3: Gateway) -> None:
    """tool_choice any/tool only constrains generation: counted like auto, even where nothing can constrain."""
    client = qwen3.client
    auto = client.messages.count_tokens(model="m", messages=MESSAGES, tools=TOOLS)
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"},
                   {"type": "auto", "disable_parallel_tool_use": True}):
        got = client.messages.count_tokens(model="m", messages=MESSAGES, tools=TOOLS, tool_choice=choice)
        assert got.input_tokens == auto.input_tokens, choice
    with pytest.raises(anthropic.BadRequestError, match="not in 'tools'"):
        client.messages.count_tokens(model="m", messages=MESSAGES, tools=TOOLS,
                                     tool_choice={"type": "tool", "name": "nope"})


def test_count_tokens_through_the_beta_client(qwen3: Gateway) -> None:
    """client.beta.messages.count_tokens (betas sent as anthropic-beta) counts the same; thinking is accepted."""
    beta = qwen3.client.beta.messages.count_tokens(model="m", messages=MESSAGES,
                                                   betas=["token-counting-2024-11-01", "not-a-real-beta"])
    assert beta.input_tokens == qwen3.client.messages.count_tokens(model="m", messages=MESSAGES).input_tokens
    thinking = qwen3.client.messages.count_tokens(model="m", messages=MESSAGES,
                                                  thinking={"type": "enabled", "budget_tokens": 1024})
    assert thinking.input_tokens > 0


def test_count_tokens_refusals(qwen3: Gateway) -> None:
    """An unknown model (404), a body without messages (400), no API key (401): the Anthropic error shapes."""
    with pytest.raises(anthropic.NotFoundError) as exc:
        qwen3.client.messages.count_tokens(model="nope", messages=MESSAGES)
    assert exc.value.body == {"type": "error", "error": {"type": "not_found_error", "message": exc.value.body["error"]["message"]}}
    r = httpx.post(qwen3.base + "/v1/messages/count_tokens", json={"model": "m"}, headers={"x-api-key": "secret"})
    assert r.status_code == 400 and "'messages' is required" in r.json()["error"]["message"]
    r = httpx.post(qwen3.base + "/v1/messages/count_tokens", json={"model": "m", "messages": MESSAGES})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_count_tokens_without_a_tokenizer_says_so(gateway: Gateway) -> None:
    """A gateway model served as text (no tokenizer) cannot count: a 400 naming the model."""
    with pytest.raises(anthropic.BadRequestError, match="model 'm' is served without a tokenizer"):
        gateway.client.messages.count_tokens(model="m", messages=MESSAGES)


def test_count_tokens_on_an_engine_that_renders_no_prompt(replay: anthropic.Anthropic) -> None:
    """The replay engine renders no prompt: a 400 (not retried by SDKs) that names the engine and the gateway."""
    with pytest.raises(anthropic.BadRequestError) as exc:
        replay.messages.count_tokens(model=REPLAY, messages=MESSAGES)
    message = exc.value.body["error"]["message"]
    assert "ReplayEngine" in message and "deltaflow serve --upstream" in message


# --------------------------------------------------------------------------- headers


@pytest.mark.parametrize("version", ["2023-06-01", "2099-12-31", "not-a-date"])
def test_anthropic_version_and_beta_headers_are_never_refused(replay: anthropic.Anthropic, version: str) -> None:
    """Any anthropic-version, known and unknown betas (logged at debug): the request is served."""
    client = replay.with_options(default_headers={"anthropic-version": version})
    with capture_logs() as logs:
        msg = client.beta.messages.create(model=REPLAY, max_tokens=64, messages=MESSAGES,
                                          betas=["interleaved-thinking-2025-05-14", "made-up-beta-2031-01-01"])
        with client.beta.messages.stream(model=REPLAY, max_tokens=64, messages=MESSAGES,
                                         betas=["fine-grained-tool-streaming-2025-05-14"]) as stream:
            streamed = stream.get_final_message()
    assert msg.stop_reason == streamed.stop_reason == "tool_use"
    betas = [e for e in logs if e["event"] == "anthropic_beta_ignored"]
    assert [e["log_level"] for e in betas] == ["debug", "debug"]
    assert betas[0]["betas"] == ["interleaved-thinking-2025-05-14", "made-up-beta-2031-01-01"]


# --------------------------------------------------------------------------- stop_sequences, metadata, tool_choice

CHOICES = [
    None,
    {"type": "auto"},
    {"type": "auto", "disable_parallel_tool_use": True},
    {"type": "any"},
    {"type": "any", "disable_parallel_tool_use": True},
    {"type": "tool", "name": "get_weather"},
    {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    {"type": "none"},
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: "omitted" if c is None else "-".join(map(str, c.values())))
def test_tool_choice_stop_sequences_and_metadata_through_the_gateway(
    gateway: Gateway, choice: dict[str, Any] | None, stream: bool
) -> None:
    """Every tool_choice form passes app.prepare and the gateway; stop_sequences reach the upstream; metadata is
    ignored; any/tool become a constraint, auto/none do not; none turns tool parsing off."""
    extra: dict[str, Any] = {"tool_choice": choice} if choice is not None else {}
    kwargs: dict[str, Any] = dict(model="m", max_tokens=64, messages=MESSAGES, tools=TOOLS,
                                  stop_sequences=["END", "\n\nHuman:"], metadata={"user_id": "user-1"}, **extra)
    if stream:
        with gateway.client.messages.stream(**kwargs) as s:
            msg = s.get_final_message()
    else:
        msg = gateway.client.messages.create(**kwargs)
    sent = gateway.upstream.requests[-1]
    assert sent.stop[-2:] == ("END", "\n\nHuman:") and "user-1" not in sent.prompt
    forced = choice is not None and choice["type"] in ("any", "tool")
    assert (sent.constraint is not None) == forced
    if choice is not None and choice["type"] == "none":
        assert msg.stop_reason == "end_turn" and msg.content[0].type == "text"
    else:
        assert msg.stop_reason == "tool_use" and [b.type for b in msg.content] == ["tool_use"]
        assert msg.content[0].input == {"city": "Paris"}


@pytest.mark.parametrize("choice", CHOICES[1:], ids=lambda c: "-".join(map(str, c.values())))
def test_tool_choice_forms_on_the_replay_engine(replay: anthropic.Anthropic, choice: dict[str, Any]) -> None:
    """The server's own checks accept every tool_choice form (wire only: the replay engine ignores them)."""
    msg = replay.messages.create(model=REPLAY, max_tokens=64, messages=MESSAGES, tools=TOOLS,
                                 tool_choice=choice, stop_sequences=["END"], metadata={"user_id": "u"})
    assert msg.stop_reason == ("end_turn" if choice["type"] == "none" else "tool_use")


def test_a_tool_choice_naming_no_tool_is_refused(replay: anthropic.Anthropic) -> None:
    """tool_choice {"type": "tool"} naming a tool not in tools, or without a name, is a 400 saying so."""
    with pytest.raises(anthropic.BadRequestError, match="which is not in 'tools'"):
        replay.messages.create(model=REPLAY, max_tokens=64, messages=MESSAGES, tools=TOOLS,
                               tool_choice={"type": "tool", "name": "nope"})
    with pytest.raises(anthropic.BadRequestError, match="needs a string 'name'"):
        replay.messages.create(model=REPLAY, max_tokens=64, messages=MESSAGES, tools=TOOLS,
                               tool_choice={"type": "tool"})
