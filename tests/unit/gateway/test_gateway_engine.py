"""GatewayEngine's own logic, with a scripted upstream double (it replays chunks on cue: what no real
engine can be made to do for every chunking). The real engine runs in tests/engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow.gateway.engine import GatewayEngine, GatewayModel, Plan, PlanError
from deltaflow.gateway.upstream import UpstreamRequest
from deltaflow.items import EngineUsage, TokenChunk
from deltaflow.prompt.readers import RequestError
from deltaflow.prompt.render import PromptModel
from deltaflow.prompt.template import ChatTemplate
from deltaflow.server.engine import EngineRequest

TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if tools %}{{ tools | tojson }}{%- endif %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                       "properties": {"q": {"type": "string"}}}}}]


class ScriptedUpstream:
    """An upstream double: yields the chunks it is given, and records each request."""

    kind = "scripted"

    def __init__(self, chunks: list[TokenChunk], constraint_forms: tuple[str, ...] = ("gbnf",)) -> None:
        self.chunks = chunks
        self.constraint_forms = constraint_forms
        self.requests: list[UpstreamRequest] = []
        self.closed = 0

    async def generate(self, request: UpstreamRequest) -> AsyncIterator[TokenChunk]:
        self.requests.append(request)
        try:
            for c in self.chunks:
                yield c
        finally:
            self.closed += 1

    async def health(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass


def engine(chunks: list[TokenChunk], **kw: Any) -> tuple[GatewayEngine, ScriptedUpstream]:
    up = ScriptedUpstream(chunks, **kw.pop("upstream", {}))
    pm = PromptModel("m", ChatTemplate.from_string(TEMPLATE, name="t", special_tokens={"eos_token": "<|im_end|>"}),
                     tool_parser="hermes")
    return GatewayEngine([GatewayModel(name="m", prompt=pm, upstream=up, **kw)]), up


def request(body: dict[str, Any], protocol: str = "chat.completions") -> EngineRequest:
    return EngineRequest(model="m", protocol=protocol, body=body)


def run(eng: GatewayEngine, req: EngineRequest) -> list[TokenChunk]:
    async def go() -> list[TokenChunk]:
        return [c async for c in eng.generate(req)]

    return anyio.run(go)


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@settings(max_examples=150, deadline=None)
@given(answer=st.text(alphabet="ab<|>_imend\n", max_size=30), cuts=st.lists(st.integers(0, 60), max_size=6))
def test_the_closing_end_of_turn_marker_is_dropped_on_every_chunking(answer: str, cuts: list[int]) -> None:
    raw = answer + "<|im_end|>"
    points = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    pieces = [raw[a:b] for a, b in zip(points, points[1:], strict=False)] or [""]
    chunks = [TokenChunk(text=p) for p in pieces[:-1]] + [TokenChunk(text=pieces[-1], finish_reason="stop")]
    eng, _ = engine(chunks)
    out = run(eng, request(CHAT))
    assert "".join(c.text or "" for c in out) == answer  # only the closing marker goes; text inside stays
    assert out[-1].finish_reason == "stop"


def test_a_marker_in_the_middle_is_text_and_the_stream_is_closed_after() -> None:
    eng, up = engine([TokenChunk(text="x<|im_end|>y"), TokenChunk(text="", finish_reason="length")])
    out = run(eng, request(CHAT))
    assert "".join(c.text or "" for c in out) == "x<|im_end|>y" and up.closed == 1


def test_plan_renders_limits_and_stops() -> None:
    eng, _ = engine([], max_tokens=64)
    plan = eng.plan(request({**CHAT, "stop": ["END"], "temperature": 0.5, "seed": 3}))
    assert isinstance(plan, Plan)
    r = plan.upstream_request
    assert r.prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" and r.prompt_ids is None
    assert r.stop == ("<|im_end|>", "END") and (r.temperature, r.seed, r.max_tokens) == (0.5, 3, 64)
    assert plan.tools_on is False and r.constraint is None


def test_tool_choice_becomes_a_constraint_or_a_clear_refusal() -> None:
    eng, _ = engine([])
    assert eng.plan(request({**CHAT, "tools": TOOLS})).upstream_request.constraint is None  # auto: not forced
    forced = eng.plan(request({**CHAT, "tools": TOOLS, "tool_choice": "required"}))
    assert forced.tools_on and forced.upstream_request.constraint is not None
    assert "<tool_call>" in forced.upstream_request.constraint.gbnf
    off = eng.plan(request({**CHAT, "tools": TOOLS, "tool_choice": "none"}))
    assert off.tools_on is False and off.upstream_request.constraint is None
    plain, _ = engine([], upstream={"constraint_forms": ()})
    with pytest.raises(PlanError, match="cannot constrain generation; use tool_choice 'auto'") as exc:
        plain.plan(request({**CHAT, "tools": TOOLS, "tool_choice": "required"}))
    assert exc.value.code == "tool_choice_unsupported" and exc.value.status == 400
    assert plain.plan(request({**CHAT, "tools": TOOLS})).tools_on  # auto still parses calls


def test_context_length_is_checked_before_the_upstream_is_called(shared: Path) -> None:
    pm = PromptModel.from_folder(shared / "tokenizers" / "qwen3", tool_parser="hermes", reasoning_parser="qwen3")
    up = ScriptedUpstream([])
    eng = GatewayEngine([GatewayModel(name="m", prompt=pm, upstream=up, context_length=64, max_tokens=1000)])
    plan = eng.plan(request(CHAT))
    ids = plan.upstream_request.prompt_ids
    assert ids is not None and plan.upstream_request.max_tokens == 64 - len(ids)  # the room left, under the cap
    with pytest.raises(PlanError, match=r"context of 64 tokens .* lower max_output_tokens") as exc:
        eng.plan(request({"input": "hi", "max_output_tokens": 64}, protocol="responses"))
    assert exc.value.code == "context_length_exceeded"
    with pytest.raises(PlanError, match="at most 0 left"):
        eng.plan(request({"messages": [{"role": "user", "content": "word " * 100}]}))
    assert up.requests == []


def test_request_errors_keep_their_api_shape() -> None:
    eng, _ = engine([])
    with pytest.raises(RequestError) as exc:
        eng.plan(request({"messages": [{"role": "user"}]}))
    assert exc.value.param == "messages[0].content" and "error" in exc.value.body()
    with pytest.raises(RequestError) as exc2:
        eng.plan(request({"messages": [{"role": "user", "content": "x"}]}, protocol="messages"))
    assert exc2.value.body()["type"] == "error"  # Anthropic's shape: max_tokens is required there


def test_usage_and_latency_are_counted() -> None:
    eng, _ = engine([TokenChunk(text="a"), TokenChunk(text="b", finish_reason="stop",
                                                     usage=EngineUsage(prompt_tokens=7, completion_tokens=2))])
    run(eng, request(CHAT))
    text = eng.metrics_text()[0].decode()
    assert 'deltaflow_prompt_tokens_total{model="m"} 7.0' in text
    assert 'deltaflow_generated_tokens_total{model="m"} 2.0' in text
    assert 'deltaflow_time_to_first_token_seconds_count{model="m"} 1.0' in text
    assert 'deltaflow_inter_token_latency_seconds_count{model="m"} 1.0' in text


def test_a_too_large_limit_is_lowered_where_the_operator_asks(shared: Path) -> None:
    """Claude Code asks 32,000 tokens of any model: with clamp_max_tokens the limit becomes what is left."""
    pm = PromptModel.from_folder(shared / "tokenizers" / "qwen3", tool_parser="hermes", reasoning_parser="qwen3")
    eng = GatewayEngine([GatewayModel(name="m", prompt=pm, upstream=ScriptedUpstream([]), context_length=64,
                                      clamp_max_tokens=True)])
    plan = eng.plan(request({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 32000},
                            protocol="messages"))
    ids = plan.upstream_request.prompt_ids
    assert ids is not None and plan.upstream_request.max_tokens == 64 - len(ids)
    with pytest.raises(PlanError, match="at most 0 left"):  # a prompt that does not fit is still refused
        eng.plan(request({"messages": [{"role": "user", "content": "word " * 100}], "max_tokens": 10},
                         protocol="messages"))
