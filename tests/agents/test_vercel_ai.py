"""Vercel's AI SDK (npm ``ai``, pinned) running a multi-step tool loop through the gateway, three of its providers.

``streamText`` with two tools that have ``execute`` functions (``list_files``, ``read_file`` over a work
folder with a README and a notes file) and ``stopWhen: stepCountIs(5)`` (``ai`` 6.x has no ``maxSteps``)
runs in node (``vercel_steps.mjs``, beside this file, copied into the npm install folder), against
deltaflow's gateway in front of the scripted llama.cpp double (``engine_double.py``), which makes the
model call ``list_files``, then ``read_file`` on the README, then answer. The providers:

* ``@ai-sdk/openai``'s chat model (``openai.chat``, ``POST /v1/chat/completions``);
* ``@ai-sdk/openai``'s Responses model (``openai.responses``, ``POST /v1/responses``), stateless
  (``providerOptions.openai``: ``store: false``, ``include: ["reasoning.encrypted_content"]``): the SDK
  sends every earlier item back in full; and with its default (no ``store`` sent, so stored), where it
  sends ``item_reference`` items instead, which the gateway resolves from its response store;
* ``@ai-sdk/anthropic`` (``POST /v1/messages``).

What is checked: the tools ran with the scripted arguments, in order, and the SDK's steps hold those
calls, their results and the finish reasons (``tool-calls``, ``tool-calls``, ``stop``); the final text is
the scripted answer; three requests reached the gateway, on the provider's path, none refused; the double's
completions followed the script's rules in order; the second and third prompts hold the earlier calls as
Qwen3 ``<tool_call>`` blocks and their results as ``<tool_response>`` user turns after them. And what the
SDK sends back of the reasoning, and how it renders: ``@ai-sdk/openai``'s chat model does not read
``reasoning_content``, so it sends none back and the next prompt has no ``<think>`` of the earlier turns;
the Responses model sends the reasoning items back with the gateway's ``encrypted_content`` (empty text:
it reads summaries only), and ``@ai-sdk/anthropic`` the signed ``thinking`` blocks; both render as the
model's ``<think>`` blocks again (the Qwen3 template keeps reasoning after the last user query).

Skipped, with the reason, without node (>= 18) / npm or the npm registry (install ~2 s from the npm cache,
the pins of ``tests/integration/node``); one run takes ~1 s.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_support import API_KEY, MODEL, AgentGateway, base_env, npm_install, run_agent, tail, work_folder
from engine_double import (
    Rule,
    count_results,
    final_answer,
    has_tools,
    hermes_call,
    names_in,
    tool_names,
    tool_responses,
)

pytestmark = [pytest.mark.node, pytest.mark.shared]

HERE = Path(__file__).parent
SCRIPT = HERE / "vercel_steps.mjs"
# The pins of tests/integration/node/test_node_clients.py (the npm cache serves them).
PACKAGES = {"ai": "6.0.325", "@ai-sdk/openai": "3.0.141", "@ai-sdk/anthropic": "3.0.140", "zod": "4.6.7"}
MIN_NODE = 18
RUN_TIMEOUT = 60
TASK = "List the files, then read README"
SYSTEM = "You answer questions about the files of a folder."
FINAL = "The folder holds README.md and notes.txt; the README says the answer is 42."
THINK_1, THINK_2, THINK_3 = "I should list the files.", "Now I read the README.", "I have what I need."
TOOLS = ("list_files", "read_file")
CALL_1 = '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>'
CALL_2 = '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md"}}\n</tool_call>'
STATELESS = {"openai": {"store": False, "include": ["reasoning.encrypted_content"]}}
# case -> (provider of vercel_steps.mjs, providerOptions, the gateway path)
CASES: dict[str, tuple[str, Any, str]] = {
    "openai-chat": ("openai-chat", None, "/v1/chat/completions"),
    "openai-responses": ("openai-responses", STATELESS, "/v1/responses"),
    "anthropic": ("anthropic", None, "/v1/messages"),
}


@pytest.fixture(scope="session")
def ai_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the pinned ai packages installed and ``vercel_steps.mjs`` beside them."""
    folder = tmp_path_factory.mktemp("vercel_ai")
    npm_install(folder, PACKAGES)  # skips without node/npm or the registry
    version = subprocess.run([shutil.which("node") or "node", "--version"], check=False, capture_output=True,
                             text=True, timeout=30).stdout.strip()
    major = re.match(r"v(\d+)", version)
    if major is None or int(major.group(1)) < MIN_NODE:
        pytest.skip(f"Node >= {MIN_NODE} is needed by ai 6.x, found {version or 'an unknown version'}")
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    return folder


def script() -> list[Rule]:
    main = lambda n: lambda p: has_tools(p) and names_in(p, TOOLS) and count_results(p) == n  # noqa: E731
    return [
        Rule("list", main(0), hermes_call("list_files", {}, THINK_1)),
        Rule("read", main(1), hermes_call("read_file", {"path": "README.md"}, THINK_2)),
        Rule("answer", main(2), final_answer(FINAL, THINK_3)),
    ]


def run_steps(ai_sdk: Path, gw: AgentGateway, tmp_path: Path, provider: str, options: Any) -> dict[str, Any]:
    """One ``node vercel_steps.mjs`` run through the gateway; returns its RESULT (or ``{"error", "steps", "ran"}``)."""
    cmd = [shutil.which("node") or "node", SCRIPT.name, gw.url, API_KEY, MODEL, provider, str(tmp_path / "work"),
           TASK, SYSTEM]
    if options is not None:
        cmd.append(json.dumps(options))
    proc = run_agent(cmd, cwd=ai_sdk, env=base_env(tmp_path / "home"), timeout=RUN_TIMEOUT)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        pytest.fail(f"node {SCRIPT.name} printed no result (exit {proc.returncode}):\n"
                    f"{tail(proc.stdout + proc.stderr, 30)}\n{gw.story()}")
    got: dict[str, Any] = json.loads(line[len("RESULT "):])
    return got


def story(gw: AgentGateway, got: dict[str, Any]) -> str:
    return f"{gw.story()}\nnode: {tail(got.get('error', ''), 8) or json.dumps(got)[:3000]}"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return work_folder(tmp_path / "work")


@pytest.mark.parametrize("case", list(CASES))
def test_stream_text_runs_the_tool_loop(
    ai_sdk: Path, agent_gateway: Callable[[list[Rule]], AgentGateway], work: Path, tmp_path: Path, case: str
) -> None:
    provider, options, path = CASES[case]
    gw = agent_gateway(script())
    got = run_steps(ai_sdk, gw, tmp_path, provider, options)
    why = story(gw, got)
    assert "error" not in got, why
    assert not gw.refused(), why

    # The tools ran with the scripted arguments, in order, and the SDK's steps hold the loop.
    assert got["ran"] == [{"name": "list_files", "input": {}}, {"name": "read_file", "input": {"path": "README.md"}}]
    steps = got["steps"]
    assert [s["finishReason"] for s in steps] == ["tool-calls", "tool-calls", "stop"], why
    assert [[(c["name"], c["input"]) for c in s["toolCalls"]] for s in steps] == [
        [("list_files", {})], [("read_file", {"path": "README.md"})], []]
    assert [[(r["name"], r["output"]) for r in s["toolResults"]] for s in steps] == [
        [("list_files", "README.md\nnotes.txt")], [("read_file", (work / "README.md").read_text())], []]
    for s in steps[:2]:
        (call,), (result,) = s["toolCalls"], s["toolResults"]
        assert call["id"] and result["id"] == call["id"], s
        assert s["text"].strip() == "", s  # no text beside the calls (the blank: see the replay test)
    # The final text is the scripted answer (after the "</think>\n\n" separator, which the gateway keeps).
    assert got["text"].strip() == FINAL and steps[2]["text"] == got["text"], why
    assert got["finishReason"] == "stop"

    # Three requests on the provider's path, answered by the script's rules in order.
    assert [s.path for s in gw.seen] == [path] * 3, why
    assert [c.rule for c in gw.double.completions] == ["list", "read", "answer"], why
    assert not gw.double.unmatched

    first, second, third = (c.prompt for c in gw.double.completions)
    assert first.startswith(f"<|im_start|>system\n{SYSTEM}\n\n# Tools"), first[:300]
    assert tool_names(first) == ["list_files", "read_file"]
    assert first.endswith(f"{TASK}<|im_end|>\n<|im_start|>assistant\n")
    # Turn 2: the list_files call, then its output as a tool response, then the open assistant turn.
    assert tool_responses(second) == ["README.md\nnotes.txt"]
    assert CALL_1 in second and second.index(CALL_1) < second.index("<tool_response>"), second[-1500:]
    assert second.endswith("<|im_start|>user\n<tool_response>\nREADME.md\nnotes.txt\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n"), second[-800:]
    # Turn 3: both calls, each followed by its result.
    listed, read = tool_responses(third)
    assert listed == "README.md\nnotes.txt"
    assert read.rstrip("\n") == (work / "README.md").read_text().rstrip("\n")
    assert CALL_1 in third and CALL_2 in third
    assert third.index(CALL_1) < third.index(listed) < third.index(CALL_2) < third.rindex("<tool_response>")
    assert third.startswith(second.split(CALL_1)[0]), "the prompt before the first call changed between turns"

    # What the SDK sends back of the reasoning, and how the next prompts render it.
    replay = gw.seen[2].body
    think_1, think_2 = f"<think>\n{THINK_1}\n</think>", f"<think>\n{THINK_2}\n</think>"
    if case == "openai-chat":
        # @ai-sdk/openai's chat model does not read reasoning_content: no reasoning in the steps, none sent back.
        assert [s["reasoning"] for s in steps] == [[], [], []], steps
        sent = [m for m in replay["messages"] if m["role"] == "assistant"]
        assert len(sent) == 2 and not any("reasoning_content" in m or "reasoning" in m for m in sent), sent
        assert THINK_1 not in second and THINK_1 not in third and THINK_2 not in third
    elif case == "openai-responses":
        # Reasoning items with the gateway's seal and no text (the SDK reads summaries only), sent back whole.
        for s in steps:
            (part,) = s["reasoning"]
            meta = part["providerMetadata"]["openai"]
            assert part["text"] == "" and meta["itemId"] and meta["reasoningEncryptedContent"], part
        sent = [i for i in replay["input"] if i.get("type") == "reasoning"]
        assert [i["id"] for i in sent] == [s["reasoning"][0]["providerMetadata"]["openai"]["itemId"]
                                           for s in steps[:2]], sent
        assert all(i["encrypted_content"] and i["summary"] == [] for i in sent), sent
        assert all(b["store"] is False and b["include"] == ["reasoning.encrypted_content"]
                   for b in (s.body for s in gw.seen))
        assert f"<|im_start|>assistant\n{think_1}\n\n" in second, second[-1500:]
        assert think_1 in third and think_2 in third, third[-2000:]
    else:
        # @ai-sdk/anthropic keeps each thinking block's signature and sends the signed block back.
        for s, thought in zip(steps, (THINK_1, THINK_2, THINK_3), strict=True):
            (part,) = s["reasoning"]
            assert part["text"].strip("\n") == thought and part["providerMetadata"]["anthropic"]["signature"], part
        sent = [m for m in replay["messages"] if m["role"] == "assistant"]
        thinking = [b for m in sent for b in m["content"] if b["type"] == "thinking"]
        assert [(b["thinking"], b["signature"]) for b in thinking] == [
            (s["reasoning"][0]["text"], s["reasoning"][0]["providerMetadata"]["anthropic"]["signature"])
            for s in steps[:2]], sent
        assert [[b["type"] for b in m["content"]][0] for m in sent] == ["thinking", "thinking"], sent
        assert f"<|im_start|>assistant\n{think_1}\n\n" in second, second[-1500:]
        assert think_1 in third and think_2 in third, third[-2000:]
        assert third.index(think_1) < third.index(CALL_1) < third.index(think_2) < third.index(CALL_2)


@pytest.mark.parametrize("case", list(CASES))
def test_a_replayed_call_turn_renders_as_the_model_wrote_it(
    ai_sdk: Path, agent_gateway: Callable[[list[Rule]], AgentGateway], work: Path, tmp_path: Path, case: str
) -> None:
    """The model wrote ``<think>...</think>\\n\\n<tool_call>...``. The SDK sends the turn back with the text it got
    (the step's text): the chat model without the reasoning, so the Qwen3 template renders the call turn as
    ``<|im_start|>assistant\\n<tool_call>``; the Responses and Anthropic models with it, rendered as
    ``<|im_start|>assistant\\n<think>\\n...\\n</think>\\n\\n<tool_call>``, exactly what the model wrote. Served with
    the separator as its text (``"\\n\\n"``), the turn renders with newlines the model never wrote (the template
    adds a ``\\n`` before the first call when the content is not empty), and the prompt no longer shares the
    generated prefix: the server drops blank separators (``create_app(blank_separators="drop")``)."""
    provider, options, _ = CASES[case]
    gw = agent_gateway(script())
    got = run_steps(ai_sdk, gw, tmp_path, provider, options)
    assert "error" not in got and len(gw.double.completions) == 3, story(gw, got)
    second = gw.double.completions[1].prompt
    body = gw.seen[1].body
    if case == "openai-chat":
        content = body["messages"][2].get("content")
        expected, seen_as = f"<|im_start|>assistant\n{CALL_1}", f"Chat content {content!r}"
    elif case == "openai-responses":
        texts = [p["text"] for i in body["input"] if i.get("role") == "assistant" for p in i["content"]]
        content = "".join(texts)
        expected = f"<|im_start|>assistant\n<think>\n{THINK_1}\n</think>\n\n{CALL_1}"
        seen_as = f"a Responses message item [output_text {content!r}]"
    else:
        (turn,) = [m for m in body["messages"] if m["role"] == "assistant"]
        content = "".join(b["text"] for b in turn["content"] if b["type"] == "text")
        expected = f"<|im_start|>assistant\n<think>\n{THINK_1}\n</think>\n\n{CALL_1}"
        seen_as = f"an Anthropic text block {content!r} between the thinking block and the tool_use"
    assert (got["steps"][0]["text"] or None) == (content or None), (got["steps"][0], body)  # none: omitted
    assert not (content and not content.strip()), f"the blank separator came back as {seen_as}"
    assert expected in second, second[-1500:]


def test_stream_text_responses_with_the_default_store(
    ai_sdk: Path, agent_gateway: Callable[[list[Rule]], AgentGateway], work: Path, tmp_path: Path
) -> None:
    """``@ai-sdk/openai``'s Responses model with its defaults: it sends no ``store`` (so the gateway stores each
    response), and from the second step on it sends the earlier reasoning and message items as
    ``{"type": "item_reference", "id": ...}`` (their ids in the gateway's stored response), the function calls
    and their outputs in full."""
    gw = agent_gateway(script())
    got = run_steps(ai_sdk, gw, tmp_path, "openai-responses", None)
    assert "store" not in gw.seen[0].body, gw.seen[0].body
    refs = [i["id"] for i in (gw.seen[1].body or {}).get("input", []) if i.get("type") == "item_reference"]
    assert refs and got.get("steps"), story(gw, got)
    # The ids the SDK references are the items of the response the gateway stored for step 1, and the
    # gateway resolves them from its store: the referenced reasoning is its own, so it renders.
    request = urllib.request.Request(f"{gw.url}/v1/responses/{got['steps'][0]['responseId']}",
                                     headers={"Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        stored = json.load(answer)
    held = {i.get("id"): i.get("type") for i in stored["output"]}
    assert set(refs) <= set(held), (refs, held)
    assert f"<think>\n{THINK_1}\n</think>" in gw.double.completions[1].prompt, story(gw, got)
    why = story(gw, got)
    assert "error" not in got and not gw.refused(), why
    assert got["text"].strip() == FINAL, why
    assert [c.rule for c in gw.double.completions] == ["list", "read", "answer"], why
    assert got["ran"] == [{"name": "list_files", "input": {}}, {"name": "read_file", "input": {"path": "README.md"}}]
