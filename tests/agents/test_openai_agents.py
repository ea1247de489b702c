"""The OpenAI Agents SDK (PyPI ``openai-agents``) running a tool loop through the gateway, both of its OpenAI models.

``Runner.run`` drives an ``Agent`` with two Python function tools (``list_files``, ``read_file``) over
``OpenAIResponsesModel`` (``/v1/responses``) and ``OpenAIChatCompletionsModel`` (``/v1/chat/completions``),
each given an ``AsyncOpenAI`` client whose ``base_url`` is the gateway's ``/v1``; behind the gateway the
scripted llama.cpp double (``engine_double.py``) makes the model call ``list_files``, then ``read_file``,
then answer. What is checked: the tools ran with the scripted arguments, the final output is the
scripted answer, and the prompts the double saw hold each tool's output as a Qwen3 ``<tool_response>``
user turn after the call that asked for it. Tracing is off (it would post to OpenAI).

Skipped without the package (``pip install openai-agents==0.24.0``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_support import API_KEY, MODEL, AgentGateway, work_folder
from engine_double import Rule, count_results, final_answer, has_tools, hermes_call, names_in, tool_responses

pytestmark = pytest.mark.shared

agents = pytest.importorskip("agents", reason="openai-agents is not installed (pip install openai-agents==0.24.0)")
openai = pytest.importorskip("openai")

FINAL = "The folder holds README.md and notes.txt; the README says the answer is 42."
THINK_1, THINK_2, THINK_3 = "I should list the files.", "Now I read the README.", "I have what I need."
TOOLS = ("list_files", "read_file")


def script() -> list[Rule]:
    main = lambda n: lambda p: has_tools(p) and names_in(p, TOOLS) and count_results(p) == n  # noqa: E731
    return [
        Rule("list", main(0), hermes_call("list_files", {}, THINK_1)),
        Rule("read", main(1), hermes_call("read_file", {"path": "README.md"}, THINK_2)),
        Rule("answer", main(2), final_answer(FINAL, THINK_3)),
    ]


def build_agent(work: Path, model: Any, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    @agents.function_tool
    def list_files() -> str:
        """List the files of the working folder, one per line."""
        calls.append(("list_files", {}))
        return "\n".join(sorted(p.name for p in work.iterdir()))

    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a file of the working folder.

        Args:
            path: the file's name in the working folder.
        """
        calls.append(("read_file", {"path": path}))
        return (work / path).read_text()

    return agents.Agent(name="files", instructions="You answer questions about the files of a folder.",
                        model=model, tools=[list_files, read_file])


def run_agent_sdk(gw: AgentGateway, api: str, work: Path, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """``Runner.run`` of the files agent through the gateway, with the Responses or the Chat Completions model."""
    agents.set_tracing_disabled(True)

    async def run() -> Any:
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=API_KEY, max_retries=0)
        model = (agents.OpenAIResponsesModel(model=MODEL, openai_client=client) if api == "responses"
                 else agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client))
        try:
            return await agents.Runner.run(build_agent(work, model, calls), "List the files, then read README",
                                           max_turns=6)
        finally:
            await client.close()

    return asyncio.run(run())


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_runner_calls_two_tools_and_answers(
    agent_gateway: Callable[[list[Rule]], AgentGateway], tmp_path: Path, api: str
) -> None:
    work = work_folder(tmp_path / "work")
    gw = agent_gateway(script())
    calls: list[tuple[str, dict[str, Any]]] = []
    result = run_agent_sdk(gw, api, work, calls)
    story = gw.story()
    assert not gw.refused(), story
    assert calls == [("list_files", {}), ("read_file", {"path": "README.md"})], story
    assert str(result.final_output).strip() == FINAL, story
    assert [c.rule for c in gw.double.completions] == ["list", "read", "answer"], story

    path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
    assert [s.path for s in gw.seen] == [path] * 3, story
    first, second, third = (c.prompt for c in gw.double.completions)
    assert first.startswith("<|im_start|>system\nYou answer questions about the files of a folder.\n\n# Tools")
    assert tool_responses(second) == ["README.md\nnotes.txt"]
    assert '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>' in second
    listed, read = tool_responses(third)
    assert read == (work / "README.md").read_text().rstrip("\n") or read == (work / "README.md").read_text()
    assert '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md"}}\n</tool_call>' in third

    # Whether the first turn's reasoning came back into the prompt depends on what the SDK sends back:
    # Chat Completions messages without reasoning_content, Responses reasoning items the gateway did not seal.
    body = gw.seen[1].body
    sent_back = json.dumps(body.get("input") if api == "responses" else body.get("messages"))
    rendered = f"<think>\n{THINK_1}\n</think>" in second
    if api == "chat":
        assert ("reasoning_content" in sent_back or '"reasoning"' in sent_back) == rendered, sent_back[:2000]
    else:
        sealed = any(i.get("type") == "reasoning" and i.get("encrypted_content") for i in body["input"])
        assert rendered == sealed, sent_back[:2000]


def test_a_replayed_call_turn_renders_as_a_turn_without_text(
    agent_gateway: Callable[[list[Rule]], AgentGateway], tmp_path: Path
) -> None:
    """The model wrote ``<think>...</think>\\n\\n<tool_call>...``: the reasoning, the template's separator, the call.
    The SDK sends the assistant message it got back (``content`` and ``tool_calls``, no reasoning), and the
    Qwen3 template renders a call turn with empty content as ``<|im_start|>assistant\\n<tool_call>``. Were
    the separator served as its content (``"\\n\\n"``), the turn would render as
    ``assistant\\n\\n\\n\\n<tool_call>``, text the model never wrote (and a prompt that no longer shares the
    generated prefix): the server drops blank separators (``create_app(blank_separators="drop")``)."""
    work = work_folder(tmp_path / "work")
    gw = agent_gateway(script())
    run_agent_sdk(gw, "chat", work, [])
    replayed = gw.seen[1].body["messages"][2]
    assert replayed["role"] == "assistant" and replayed["tool_calls"], replayed
    second = gw.double.completions[1].prompt
    content = replayed.get("content")
    assert not (isinstance(content, str) and content and not content.strip()), f"blank content {content!r} came back"
    assert "<|im_start|>assistant\n<tool_call>" in second, second[-800:]
