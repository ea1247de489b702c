"""The server's ``tool_calls_in_reasoning`` policy, seen by the official openai SDK on a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from conftest_server import start_server

from deltaflow import TokenChunk
from deltaflow.server import EngineRequest, create_app

OUTPUT = '<think>Check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> Then.</think>ok'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


async def engine(request: EngineRequest) -> AsyncIterator[Any]:
    """A scripted output with a tool block inside its reasoning, in 9-character pieces."""
    for i in range(0, len(OUTPUT), 9):
        yield TokenChunk(text=OUTPUT[i : i + 9], finish_reason="stop" if i + 9 >= len(OUTPUT) else None)


@pytest.mark.parametrize(
    ("policy", "calls", "reasoning"),
    [
        ("trailing", [], 'Check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> Then.'),
        ("always", [("get_weather", '{"city": "Paris"}')], "Check.  Then."),
        ("never", [], 'Check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> Then.'),
    ],
)
def test_policy_reaches_the_client(policy: str, calls: list[tuple[str, str]], reasoning: str) -> None:
    """The streamed chat completion carries the calls and reasoning of the configured policy."""
    app = create_app(engine, tool_parser="hermes", reasoning_parser="qwen3", model="m", tool_calls_in_reasoning=policy)
    server, thread, base = start_server(app)
    try:
        with openai.OpenAI(base_url=base + "/v1", api_key="t", max_retries=0) as client:
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, stream=True
            )
            got_reasoning, content, args, names = "", "", {}, {}
            finish = None
            for chunk in stream:
                delta = chunk.choices[0].delta
                got_reasoning += getattr(delta, "reasoning_content", None) or ""
                content += delta.content or ""
                for tc in delta.tool_calls or []:
                    if tc.function and tc.function.name:
                        names[tc.index] = tc.function.name
                    args[tc.index] = args.get(tc.index, "") + ((tc.function and tc.function.arguments) or "")
                finish = chunk.choices[0].finish_reason or finish
    finally:
        server.should_exit = True
        thread.join(10)
    assert [(names[i], args[i]) for i in sorted(names)] == calls
    assert (got_reasoning, content) == (reasoning, "ok")
    assert finish == ("tool_calls" if calls else "stop")


def test_unknown_policy_is_refused() -> None:
    """create_app names the option and the accepted values."""
    with pytest.raises(ValueError, match="tool_calls_in_reasoning must be one of"):
        create_app(engine, tool_calls_in_reasoning="sometimes")
