"""Real JavaScript clients (the openai Node SDK, Vercel's ai SDK) against a real deltaflow server.

A uvicorn server on 127.0.0.1 serves a scripted engine (below); ``clients.mjs`` (beside this
file) runs every scenario in one ``node`` process and prints what each client produced as
JSON; each test checks one scenario against what the scripted output implies
(``parse_complete`` of the same raw text, less the blank separators the server drops).

Clients and the npm packages, installed by the test itself with ``npm install --no-audit
--no-fund`` into a temporary folder once per session (pinned exact versions, all of which
support Node >= 18; their newer majors need Node 22):

- ``openai`` 6.49.0: ``chat.completions.create(stream=true)`` (reasoning read off the raw
  chunk's ``delta.reasoning_content``, tool calls accumulated by index) and
  ``responses.stream(...).finalResponse()``;
- ``ai`` 6.0.325 (``streamText``, tool declared with ``jsonSchema()`` and no ``execute``) with
  ``@ai-sdk/openai`` 3.0.141 (``openai.chat(...)``, ``openai.responses(...)``),
  ``@ai-sdk/openai-compatible`` 2.0.92 (the chat model that reads ``reasoning_content``;
  ``@ai-sdk/openai``'s chat model ignores it) and ``@ai-sdk/anthropic`` 3.0.140 (reasoning
  with its ``providerMetadata.anthropic.signature``);
- ``zod`` 4.6.7 (the ai packages' peer dependency).

What the clients do not read is not asserted: ``@ai-sdk/openai`` 3.x surfaces neither chat
``reasoning_content`` nor Responses ``response.reasoning_text.delta`` (it reads reasoning
summaries only), so its reasoning text is checked only through ``@ai-sdk/openai-compatible``,
the openai SDK and ``@ai-sdk/anthropic``.

Skipped, with the reason, when ``node`` or ``npm`` is not on PATH, when Node is older than 18,
or when ``npm install`` fails for lack of network (the npm error's last lines are the reason);
any other install failure fails the tests (an unreachable registry skips in about 13 s).
The whole module takes about 5 s here, npm install included (a few seconds more on a cold npm cache).

Run: ``python -m pytest -q tests/integration/node``; deselect: ``-m "not node"``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from deltaflow import TokenChunk
from deltaflow.server import create_app
from deltaflow.server.engine import EngineRequest, ModelInfo
from deltaflow.testing import shown_complete

pytestmark = pytest.mark.node

HERE = Path(__file__).parent
SCRIPT = HERE / "clients.mjs"

PACKAGES = {
    "openai": "6.49.0",
    "ai": "6.0.325",
    "@ai-sdk/openai": "3.0.141",
    "@ai-sdk/openai-compatible": "2.0.92",
    "@ai-sdk/anthropic": "3.0.140",
    "zod": "4.6.7",
}
MIN_NODE = 18
INSTALL_TIMEOUT = 240
RUN_TIMEOUT = 120
NETWORK_ERRORS = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|"
    r"ERR_SOCKET_TIMEOUT|ENETWORK|getaddrinfo|socket hang up|npm error network|request to \S+ failed",
    re.IGNORECASE,
)

TOOL_MODEL = "m"
LENGTH_MODEL = "m-length"
# Scripted Qwen3-style outputs (hermes tool calls, qwen3 reasoning) and the finish reason of the last piece.
SCRIPTS = {
    TOOL_MODEL: (
        '<think>Need the weather.</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "stop",
    ),
    LENGTH_MODEL: ("<think>Need the weather.</think>\n\nThe weather in Paris is", "length"),
}
TOOLS = [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
PIECE = 5  # characters per engine chunk: the tags arrive split across chunks


class ScriptedEngine:
    """A scripted engine double, not a model: replays ``SCRIPTS[request.model]`` in small text pieces.

    It exists because a real engine cannot be made to stop with ``length`` at a precise point
    on cue for Node clients; the model id picks the script (``m``: reasoning then a tool call,
    finish ``stop``; ``m-length``: reasoning then text cut off, finish ``length``).
    """

    def models(self) -> list[ModelInfo]:
        return [ModelInfo(name, tool_parser="hermes", reasoning_parser="qwen3") for name in SCRIPTS]

    async def generate(self, request: EngineRequest) -> AsyncIterator[TokenChunk]:
        text, finish = SCRIPTS[request.model]
        pieces = [text[i : i + PIECE] for i in range(0, len(text), PIECE)]
        for i, piece in enumerate(pieces):
            yield TokenChunk(text=piece, finish_reason=finish if i == len(pieces) - 1 else None)


@functools.cache
def _expected(model: str) -> Any:
    """What the script implies: ``parse_complete`` of the same raw text, less the blank separators the server
    drops by default (``deltaflow.testing.shown_complete``; computed on first use)."""
    return shown_complete(SCRIPTS[model][0], tool_parser="hermes", reasoning_parser="qwen3", tools=TOOLS)


WEATHER_CALL = [{"name": "get_weather", "input": {"city": "Paris"}}]


def test_scripted_outputs_imply_the_expected_values() -> None:
    """The reference the client checks use: reasoning, the one call, the cut-off text."""
    assert _expected(TOOL_MODEL).reasoning_content == "Need the weather."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in _expected(TOOL_MODEL).tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert _expected(LENGTH_MODEL).reasoning_content == "Need the weather."
    assert (_expected(LENGTH_MODEL).content or "").strip() == "The weather in Paris is"
    assert _expected(LENGTH_MODEL).tool_calls == []


# -- fixtures ---------------------------------------------------------------------------


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@pytest.fixture(scope="session")
def node_clients(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the pinned packages installed and ``clients.mjs`` beside them."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"node and npm are needed on PATH (node: {node or 'absent'}, npm: {npm or 'absent'})")
    version = subprocess.run(
        [node, "--version"], check=False, capture_output=True, text=True, timeout=30
    ).stdout.strip()
    major = re.match(r"v(\d+)", version)
    if major is None or int(major.group(1)) < MIN_NODE:
        pytest.skip(f"Node >= {MIN_NODE} is needed, found {version or 'an unknown version'}")
    folder = tmp_path_factory.mktemp("node_clients")
    (folder / "package.json").write_text(
        json.dumps({"name": "deltaflow-node-clients", "private": True, "type": "module", "dependencies": PACKAGES})
    )
    env = {
        **os.environ,
        "npm_config_update_notifier": "false",
        "npm_config_fetch_retries": "1",
        "npm_config_fetch_retry_mintimeout": "2000",
        "npm_config_fetch_retry_maxtimeout": "5000",
        "npm_config_fetch_timeout": "30000",
        "npm_config_loglevel": "error",
    }
    cmd = [npm, "install", "--no-audit", "--no-fund", "--no-progress", "--prefer-offline"]
    try:
        proc = subprocess.run(
            cmd, check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.skip(f"npm install took over {INSTALL_TIMEOUT} s (no network?): {_tail(out)}")
    if proc.returncode != 0:
        output = proc.stdout + "\n" + proc.stderr
        if NETWORK_ERRORS.search(output):
            code = re.search(r"npm error code (\S+)", output)
            what = f" ({code.group(1)})" if code else ""
            pytest.skip(f"npm install failed for lack of network{what}:\n{_tail(output)}")
        pytest.fail(f"npm install failed (exit {proc.returncode}):\n{_tail(output, 30)}")
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    return folder


def _start_server() -> Any:
    """tests/integration/server/conftest_server.py's ``start_server``, imported by path."""
    path = HERE.parent / "server" / "conftest_server.py"
    spec = importlib.util.spec_from_file_location("deltaflow_node_tests_conftest_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.start_server


@pytest.fixture(scope="module")
def results(node_clients: Path) -> Iterator[dict[str, Any]]:
    """Every scenario's outcome from one ``node clients.mjs`` run against a live server."""
    app = create_app(ScriptedEngine(), heartbeat=5.0)
    server, thread, base = _start_server()(app)
    try:
        proc = subprocess.run(
            [shutil.which("node") or "node", SCRIPT.name, base, TOOL_MODEL, LENGTH_MODEL],
            check=False,
            cwd=node_clients,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    finally:
        server.should_exit = True
        thread.join(10)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    if line is None:
        pytest.fail(
            f"node clients.mjs printed no results (exit {proc.returncode}):\n{_tail(proc.stdout + proc.stderr, 30)}"
        )
    yield json.loads(line[len("RESULTS ") :])


def _scenario(results: dict[str, Any], name: str) -> dict[str, Any]:
    got: dict[str, Any] = results[name]
    if "error" in got:
        pytest.fail(f"{name}: the client raised:\n{got['error']}")
    return got


def _calls(got: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls without their ids (which must be present and non-empty)."""
    for call in got["toolCalls"]:
        assert call["id"], f"a tool call without an id: {call}"
    return [{"name": c["name"], "input": c["input"]} for c in got["toolCalls"]]


# -- the openai SDK ---------------------------------------------------------------------------


def test_openai_chat_stream_reasoning_and_tool_call(results: dict[str, Any]) -> None:
    got = _scenario(results, "openai_chat")
    assert got["reasoning"] == _expected(TOOL_MODEL).reasoning_content
    assert got["content"] == (_expected(TOOL_MODEL).content or "")
    assert _calls(got) == WEATHER_CALL
    assert got["finishReason"] == "tool_calls"


def test_openai_chat_stream_length(results: dict[str, Any]) -> None:
    got = _scenario(results, "openai_chat_length")
    assert got["reasoning"] == _expected(LENGTH_MODEL).reasoning_content
    assert got["content"] == _expected(LENGTH_MODEL).content
    assert got["toolCalls"] == []
    assert got["finishReason"] == "length"


def test_openai_responses_stream_reasoning_and_tool_call(results: dict[str, Any]) -> None:
    got = _scenario(results, "openai_responses")
    assert got["reasoning"] == _expected(TOOL_MODEL).reasoning_content
    assert got["content"] == (_expected(TOOL_MODEL).content or "")
    assert _calls(got) == WEATHER_CALL
    assert got["status"] == "completed"
    assert got["lastEvent"] == "response.completed"


def test_openai_responses_stream_length_is_incomplete(results: dict[str, Any]) -> None:
    got = _scenario(results, "openai_responses_length")
    assert got["reasoning"] == _expected(LENGTH_MODEL).reasoning_content
    assert got["content"] == _expected(LENGTH_MODEL).content
    assert got["status"] == "incomplete"
    assert got["incompleteDetails"] == {"reason": "max_output_tokens"}
    assert got["lastEvent"] == "response.incomplete"


# -- Vercel's ai SDK --------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["ai_openai_chat", "ai_openai_compatible_chat", "ai_openai_responses"])
def test_ai_sdk_openai_tool_call(results: dict[str, Any], scenario: str) -> None:
    """streamText returns the call (no execute) with finishReason tool-calls."""
    got = _scenario(results, scenario)
    assert _calls(got) == WEATHER_CALL
    assert got["text"] == (_expected(TOOL_MODEL).content or "")
    assert got["finishReason"] == "tool-calls"
    if scenario == "ai_openai_compatible_chat":  # the only one of the three that reads reasoning_content
        assert got["reasoningText"] == _expected(TOOL_MODEL).reasoning_content


@pytest.mark.parametrize(
    "scenario", ["ai_openai_chat_length", "ai_openai_compatible_chat_length", "ai_openai_responses_length"]
)
def test_ai_sdk_openai_length(results: dict[str, Any], scenario: str) -> None:
    got = _scenario(results, scenario)
    assert got["text"] == _expected(LENGTH_MODEL).content
    assert got["toolCalls"] == []
    assert got["finishReason"] == "length"
    if scenario == "ai_openai_compatible_chat_length":
        assert got["reasoningText"] == _expected(LENGTH_MODEL).reasoning_content


def test_ai_sdk_openai_responses_reasoning_summary(results: dict[str, Any]) -> None:
    """Asked for a reasoning summary, @ai-sdk/openai's Responses model sees the reasoning (sent as summary parts)."""
    got = _scenario(results, "ai_openai_responses_summary")
    assert got["reasoningText"] == _expected(TOOL_MODEL).reasoning_content
    assert _calls(got) == WEATHER_CALL
    assert got["finishReason"] == "tool-calls"


def test_ai_sdk_anthropic_reasoning_signature_and_tool_call(results: dict[str, Any]) -> None:
    """The thinking block's text, its non-empty signature (providerMetadata.anthropic.signature), the call."""
    got = _scenario(results, "ai_anthropic")
    assert got["reasoningText"] == _expected(TOOL_MODEL).reasoning_content
    assert [p["text"] for p in got["reasoningParts"]] == [_expected(TOOL_MODEL).reasoning_content]
    signature = ((got["reasoningParts"][0]["providerMetadata"] or {}).get("anthropic") or {}).get("signature")
    assert isinstance(signature, str) and signature, (
        f"no signature: {got['reasoningParts']}, stream: {got['streamSignatures']}"
    )
    assert got["text"] == (_expected(TOOL_MODEL).content or "")
    assert _calls(got) == WEATHER_CALL
    assert got["finishReason"] == "tool-calls"


def test_ai_sdk_anthropic_length(results: dict[str, Any]) -> None:
    got = _scenario(results, "ai_anthropic_length")
    assert got["reasoningText"] == _expected(LENGTH_MODEL).reasoning_content
    assert got["text"] == _expected(LENGTH_MODEL).content
    assert got["toolCalls"] == []
    assert got["finishReason"] == "length"
    assert got["rawFinishReason"] == "max_tokens"
