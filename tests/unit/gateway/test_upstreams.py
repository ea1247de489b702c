"""The upstream adapters against their engines' wire formats.

A scripted engine (a raw ASGI app under uvicorn on a free loopback port, started with the
helper the server tests use) serves the transcripts in ``transcripts/`` (see its README:
llama.cpp's were recorded from a real server, the others written from the documented formats)
and records every request body and every client disconnect. ``httpx.MockTransport`` stands in
where a socket adds nothing (transport failures injected on the first attempt).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "server"))

from conftest_server import start_server

from deltaflow.constrain import ToolConstraint, UnsupportedConstraintError, prepare_request
from deltaflow.gateway.upstream import UpstreamError, UpstreamRequest
from deltaflow.gateway.upstreams import (
    UPSTREAM_KINDS,
    HttpUpstream,
    LlamaCppUpstream,
    OllamaUpstream,
    OpenAICompletionsUpstream,
    SGLangUpstream,
    TGIUpstream,
    Timeouts,
    make_upstream,
    probe_llamacpp,
)
from deltaflow.gateway.upstreams._http import _SentBody
from deltaflow.items import EngineUsage, TokenChunk

pytestmark = pytest.mark.anyio

TRANSCRIPTS = Path(__file__).parent / "transcripts"
API_KEY = "sk-test-0123456789"
FAST = Timeouts(connect=2.0, first_byte=5.0, idle=5.0)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


# -- the scripted engine ------------------------------------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    content_type: str = "text/event-stream"
    chunks: Sequence[bytes] = ()
    delay: float = 0.0  # before each chunk
    before_headers: float = 0.0
    hang: bool = False  # keep the response open after the chunks (until the client leaves)
    crash: bool = False  # break the connection after the chunks


@dataclass
class Seen:
    """One request the engine received."""

    path: str
    headers: dict[str, str]
    body: Any


class ScriptedEngine:
    """A raw ASGI app answering each path from a queue of replies; 404 when the queue is empty."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.base = ""
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._replies: dict[str, list[Reply]] = {}
            self.requests: list[Seen] = []
            self.disconnected = threading.Event()

    def script(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._replies.setdefault(path, []).extend(replies)

    def seen(self, path: str) -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _next(self, path: str) -> Reply | None:
        with self._lock:
            queue = self._replies.get(path)
            return queue.pop(0) if queue else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        more = True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = body
        with self._lock:
            self.requests.append(Seen(scope["path"], headers, parsed))
        reply = self._next(scope["path"]) or Reply(404, "application/json", [b'{"error": "nothing scripted"}'])

        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while True:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        self.disconnected.set()
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch)
            await anyio.sleep(reply.before_headers)
            await send({"type": "http.response.start", "status": reply.status,
                        "headers": [(b"content-type", reply.content_type.encode())]})
            for chunk in reply.chunks:
                if reply.delay:
                    await anyio.sleep(reply.delay)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if reply.crash:
                raise RuntimeError("scripted crash: the connection breaks")
            if reply.hang:
                await anyio.sleep_forever()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedEngine]:
    app = ScriptedEngine()
    uv, thread, base = start_server(app)
    app.base = base
    try:
        yield app
    finally:
        uv.should_exit = True
        thread.join(10)


@pytest.fixture
def engine(server: ScriptedEngine) -> ScriptedEngine:
    server.reset()
    return server


# -- helpers ------------------------------------------------------------------------------------------------------


def sse_events(name: str) -> list[bytes]:
    """A transcript's SSE events, one body chunk each."""
    raw = (TRANSCRIPTS / name).read_bytes()
    return [block + b"\n\n" for block in raw.split(b"\n\n") if block.strip()]


def ndjson_lines(name: str) -> list[bytes]:
    return [line + b"\n" for line in (TRANSCRIPTS / name).read_bytes().split(b"\n") if line.strip()]


def event_json(name: str) -> list[Any]:
    out = []
    for block in sse_events(name):
        data = block.decode()[len("data: "):].strip()
        out.append(None if data == "[DONE]" else json.loads(data))
    return out


def body_of(name: str) -> bytes:
    return (TRANSCRIPTS / name).read_bytes()


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


async def collect(gen: AsyncGenerator[TokenChunk, None]) -> list[TokenChunk]:
    async with aclosing(gen) as g:
        return [c async for c in g]


async def failure(gen: AsyncGenerator[TokenChunk, None]) -> tuple[UpstreamError, list[TokenChunk]]:
    got: list[TokenChunk] = []
    with pytest.raises(UpstreamError) as info:
        async with aclosing(gen) as g:
            async for c in g:
                got.append(c)
    return info.value, got


def text_of(chunks: Sequence[TokenChunk]) -> str:
    return "".join(c.text or "" for c in chunks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def constraint(choice: str, parser: str = "hermes", **kw: Any) -> ToolConstraint:
    c = prepare_request(TOOLS, choice, tool_parser=parser, **kw).constraint
    assert c is not None
    return c


class Vocab:
    """The Qwen3 ids of the hermes markers (anything with ``token_to_id`` will do)."""

    IDS = {"<tool_call>": 151657, "</tool_call>": 151658, "<|im_start|>": 151644}

    def token_to_id(self, token: str) -> int | None:
        return self.IDS.get(token)


def assert_safe(err: UpstreamError, base: str) -> None:
    """No URL, address or credential in what a client may see."""
    text = f"{err} {err.message!r}"
    host_port = base.split("://", 1)[1]
    assert base not in text and host_port not in text and API_KEY not in text and "127.0.0.1" not in text


PROMPT_IDS = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198]


# -- llama.cpp ----------------------------------------------------------------------------------------------------


async def test_llamacpp_body_and_recorded_stream(engine: ScriptedEngine) -> None:
    engine.script("/completion", Reply(chunks=sse_events("llamacpp_completion.sse")))
    up = LlamaCppUpstream(engine.base, api_key=API_KEY, timeouts=FAST, keep_tokens=("<think>", "</think>"))
    req = UpstreamRequest(prompt="ignored when ids are given", prompt_ids=PROMPT_IDS, max_tokens=3, stop=("<|im_end|>",),
                          temperature=0.0, top_p=0.9, seed=1, logprobs=1)
    chunks = await collect(up.generate(req))
    await up.aclose()
    (seen,) = engine.seen("/completion")
    assert seen.body == {
        "prompt": PROMPT_IDS, "stream": True, "cache_prompt": True, "return_tokens": True, "n_predict": 3,
        "stop": ["<|im_end|>"], "temperature": 0.0, "top_p": 0.9, "seed": 1, "n_probs": 1,
        "preserved_tokens": ["<think>", "</think>"],
    }
    assert seen.headers["authorization"] == f"Bearer {API_KEY}"
    events = event_json("llamacpp_completion.sse")
    assert [c.text for c in chunks] == [".moves", "(redis", "atus", ""]
    assert [c.token_ids for c in chunks] == [[84516], [97676], [1000], []]
    assert [c.logprobs for c in chunks[:3]] == [e["completion_probabilities"] for e in events[:3]]
    assert [c.finish_reason for c in chunks] == [None, None, None, "length"]
    assert chunks[-1].usage == EngineUsage(prompt_tokens=9, completion_tokens=3)
    assert all(c.usage is None for c in chunks[:-1])


async def test_llamacpp_stop_word_and_preserved_control_token(engine: ScriptedEngine) -> None:
    engine.script("/completion", Reply(chunks=sse_events("llamacpp_stop_word.sse")),
                  Reply(chunks=sse_events("llamacpp_preserved_eos.sse")))
    async with LlamaCppUpstream(engine.base, timeouts=FAST) as up:
        word = await collect(up.generate(UpstreamRequest(prompt="hi", stop=(" the",))))
        eos = await collect(up.generate(UpstreamRequest(prompt="hi")))
    # The stop word's token comes with empty content: the text is what counts.
    assert text_of(word) == "hi" and word[-1].finish_reason == "stop"
    assert [c.token_ids for c in word] == [[6023], [91679], []]
    assert text_of(eos) == "<|im_start|>hi" and eos[-1].finish_reason == "stop"
    assert eos[-1].usage == EngineUsage(prompt_tokens=1, completion_tokens=3)
    assert engine.seen("/completion")[0].body["prompt"] == "hi"


def test_llamacpp_constraint_fields() -> None:
    up = LlamaCppUpstream("http://engine.invalid:8080", tokenizer=Vocab(), keep_tokens=("<think>",))
    required = constraint("required")
    body = up.request_body(UpstreamRequest(prompt="p", constraint=required))
    assert body["grammar"] == required.gbnf_grammar(Vocab())
    assert "<[151657]>" in body["grammar"] and "<[151658]>" in body["grammar"]
    assert "grammar_lazy" not in body and "grammar_triggers" not in body
    assert body["preserved_tokens"] == ["<think>", "<tool_call>", "</tool_call>"]

    auto = constraint("auto")
    body = up.request_body(UpstreamRequest(prompt="p", constraint=auto))
    assert body["grammar_lazy"] is True
    assert body["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]

    after = constraint("required", reasoning_parser="qwen3", enable_thinking=True)
    assert after.after_reasoning_end == "</think>"
    body = up.request_body(UpstreamRequest(prompt="p", constraint=after))
    assert body["grammar_lazy"] is True
    assert body["grammar_triggers"] == [{"type": 3, "value": "[\\s\\S]*?<\\/think>([\\s\\S]*)"}]

    plain = LlamaCppUpstream("http://engine.invalid:8080")
    assert plain.request_body(UpstreamRequest(prompt="p", constraint=required))["grammar"] == required.gbnf

    lark = LlamaCppUpstream("http://engine.invalid:8080", tokenizer=Vocab(), grammar_form="lark")
    assert lark.constraint_forms == ("lark", "gbnf")
    g = lark.request_body(UpstreamRequest(prompt="p", constraint=required))["grammar"]
    assert g.startswith("%llguidance {}\n") and "<[151657]>" in g
    # llama.cpp applies an llguidance grammar from the first token even when marked lazy: lazy stays GBNF.
    g = lark.request_body(UpstreamRequest(prompt="p", constraint=auto))["grammar"]
    assert not g.startswith("%llguidance") and g == auto.gbnf_grammar(Vocab())

    # A one-token trigger must be preserved, or llama.cpp refuses the request (pythonic's "[").
    py = constraint("auto", parser="pythonic")
    body = plain.request_body(UpstreamRequest(prompt="p", constraint=py))
    assert set(py.triggers) <= set(body["preserved_tokens"])
    # extra passes through, last
    assert plain.request_body(UpstreamRequest(prompt="p", extra={"n_predict": 7, "top_k": 1}))["n_predict"] == 7


async def test_llamacpp_recorded_errors(engine: ScriptedEngine) -> None:
    engine.script("/completion",
                  Reply(400, "application/json; charset=utf-8", [body_of("llamacpp_error_400.json")]),
                  Reply(chunks=sse_events("llamacpp_error_midstream.sse")))
    async with LlamaCppUpstream(engine.base, api_key=API_KEY, timeouts=FAST) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="hi")))
        assert (err.kind, err.status, err.before_first_byte) == ("status", 400, True)
        assert err.message == "Failed to initialize samplers: failed to parse grammar" and not got
        assert len(engine.seen("/completion")) == 1  # a 400 is not retried
        err, got = await failure(up.generate(UpstreamRequest(prompt="hi")))
    assert (err.kind, err.status, err.before_first_byte) == ("status", 500, False)
    assert "Unexpected empty grammar stack" in err.message and text_of(got) == "hi"
    assert_safe(err, engine.base)


async def test_llamacpp_probe(engine: ScriptedEngine) -> None:
    engine.script("/props", *[Reply(200, "application/json", [body_of("llamacpp_props.json")])] * 3)
    engine.script("/completion", Reply(200, "application/json", [b'{"content": "", "tokens": [151644], "stop": true}']),
                  Reply(200, "application/json", [b'{"content": "<|im_start|>", "stop": true}']))
    props = await probe_llamacpp(engine.base, control_token_id=151644, timeouts=FAST)
    assert props.is_llamacpp and props.total_slots == 2 and props.n_ctx == 2048
    assert props.eos_token == "<|im_end|>" and props.special_rendered is False
    (probe,) = engine.seen("/completion")
    assert probe.body["grammar"] == "root ::= <[151644]>" and "preserved_tokens" not in probe.body
    async with LlamaCppUpstream(engine.base, timeouts=FAST) as up:
        assert (await up.probe(control_token_id=151644)).special_rendered is True
        assert (await up.probe()).special_rendered is None  # nothing to test with
    assert len(engine.seen("/completion")) == 2


async def test_health(engine: ScriptedEngine) -> None:
    engine.script("/health", Reply(200, "application/json", [b'{"status": "ok"}']),
                  Reply(503, "application/json", [b'{"error": {"code": 503, "message": "Loading model"}}']))
    engine.script("/api/version", Reply(200, "application/json", [b'{"version": "0.12.0"}']))
    engine.script("/v1/models", Reply(200, "application/json", [b'{"data": []}']))
    async with LlamaCppUpstream(engine.base, timeouts=FAST) as up:
        assert await up.health() is True
        assert await up.health() is False
    async with OllamaUpstream(engine.base, model="m", timeouts=FAST) as ol:
        assert await ol.health() is True
    async with OpenAICompletionsUpstream(engine.base + "/v1", flavor="generic", timeouts=FAST) as oa:
        assert await oa.health() is True
    async with TGIUpstream(f"http://127.0.0.1:{free_port()}", timeouts=FAST) as closed:
        assert await closed.health() is False


# -- OpenAI-compatible completions ----------------------------------------------------------------------------------


async def test_openai_vllm_body_and_stream(engine: ScriptedEngine) -> None:
    engine.script("/v1/completions", Reply(chunks=sse_events("vllm_completions.sse")))
    c = constraint("required")
    async with OpenAICompletionsUpstream(engine.base, model="Qwen/Qwen3-8B", return_token_ids=True, api_key=API_KEY,
                                         timeouts=FAST) as up:
        assert up.constraint_forms == ("structural_tag", "lark")
        req = UpstreamRequest(prompt="p", prompt_ids=PROMPT_IDS, max_tokens=64, stop=("<|im_end|>",),
                              stop_ids=(151645,), seed=7, temperature=0.6, top_p=0.95, logprobs=1, constraint=c)
        chunks = await collect(up.generate(req))
    (seen,) = engine.seen("/v1/completions")
    assert seen.body == {
        "prompt": PROMPT_IDS, "stream": True, "stream_options": {"include_usage": True}, "model": "Qwen/Qwen3-8B",
        "max_tokens": 64, "stop": ["<|im_end|>"], "seed": 7, "temperature": 0.6, "top_p": 0.95, "logprobs": 1,
        "skip_special_tokens": False, "spaces_between_special_tokens": False, "stop_token_ids": [151645],
        "return_token_ids": True, "structured_outputs": {"structural_tag": c.structural_tag_json},
    }
    assert json.loads(seen.body["structured_outputs"]["structural_tag"])["type"] == "structural_tag"
    assert seen.headers["authorization"] == f"Bearer {API_KEY}"
    assert text_of(chunks) == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'
    assert [len(c.token_ids) for c in chunks] == [1, 8, 12, 1]
    assert chunks[0].token_ids == [151657] and chunks[-1].token_ids == [151658]
    assert [c.finish_reason for c in chunks] == [None, None, None, "stop"]
    assert chunks[-1].usage == EngineUsage(prompt_tokens=9, completion_tokens=23)
    assert chunks[0].logprobs == [{"token": "<too", "logprob": -0.01,
                                   "top_logprobs": [{"token": "<too", "logprob": -0.01},
                                                    {"token": "Hello", "logprob": -3.5}]}]


async def test_openai_string_prompt_v1_base_and_length(engine: ScriptedEngine) -> None:
    engine.script("/v1/completions", Reply(chunks=pieces(body_of("vllm_length.sse"), 7)))
    async with OpenAICompletionsUpstream(engine.base + "/v1/", token_prompts=False, timeouts=FAST) as up:
        chunks = await collect(up.generate(UpstreamRequest(prompt="<|im_start|>user\nhi", prompt_ids=[1, 2])))
    (seen,) = engine.seen("/v1/completions")
    assert seen.body["prompt"] == "<|im_start|>user\nhi" and "model" not in seen.body
    assert "return_token_ids" not in seen.body and "structured_outputs" not in seen.body
    assert text_of(chunks) == "<think>\nThe user asks"
    assert chunks[-1].finish_reason == "length" and chunks[-1].usage == EngineUsage(prompt_tokens=9, completion_tokens=4)


async def test_openai_llamacpp_flavor_recorded(engine: ScriptedEngine) -> None:
    engine.script("/v1/completions", Reply(chunks=sse_events("llamacpp_v1_completions.sse")))
    c = constraint("auto")
    async with OpenAICompletionsUpstream(engine.base, flavor="llamacpp", tokenizer=Vocab(), timeouts=FAST) as up:
        chunks = await collect(up.generate(UpstreamRequest(prompt="p", prompt_ids=PROMPT_IDS, logprobs=1,
                                                           constraint=c, stop_ids=(151645,))))
    body = engine.seen("/v1/completions")[0].body
    assert body["cache_prompt"] is True and "skip_special_tokens" not in body and "stop_token_ids" not in body
    assert body["grammar"] == c.gbnf_grammar(Vocab()) and body["grammar_lazy"] is True
    assert body["preserved_tokens"] == ["<tool_call>", "</tool_call>"]
    events = event_json("llamacpp_v1_completions.sse")
    assert [c.text for c in chunks] == [".moves", "(redis", "atus", ""]
    assert chunks[0].logprobs == events[0]["choices"][0]["logprobs"]["content"]
    assert chunks[-1].finish_reason == "length" and chunks[-1].usage == EngineUsage(prompt_tokens=9, completion_tokens=3)


def test_openai_constraint_forms() -> None:
    vllm = OpenAICompletionsUpstream("http://engine.invalid")
    py = constraint("required", parser="pythonic")  # no structural tag: Lark for the guidance backend
    assert vllm.request_body(UpstreamRequest(prompt="p", constraint=py))["structured_outputs"] == {"grammar": py.lark}
    with pytest.raises(UnsupportedConstraintError):  # vLLM has no lazy grammar
        vllm.generate(UpstreamRequest(prompt="p", constraint=constraint("auto", parser="pythonic")))
    generic = OpenAICompletionsUpstream("http://engine.invalid", flavor="generic")
    assert generic.constraint_forms == ()
    with pytest.raises(UnsupportedConstraintError):  # at the call, before any I/O
        generic.generate(UpstreamRequest(prompt="p", constraint=constraint("required")))
    body = generic.request_body(UpstreamRequest(prompt="p", stop_ids=(1,)))
    assert set(body) == {"prompt", "stream", "stream_options"}
    with pytest.raises(ValueError):
        OpenAICompletionsUpstream("http://engine.invalid", flavor="tabby")  # type: ignore[arg-type]


async def test_openai_vllm_error_body(engine: ScriptedEngine) -> None:
    engine.script("/v1/completions", Reply(400, "application/json", [body_of("vllm_error_400.json")]))
    async with OpenAICompletionsUpstream(engine.base, timeouts=FAST) as up:
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.status) == ("status", 400)
    assert err.message.startswith("This model's maximum context length is 4096 tokens")


# -- SGLang -------------------------------------------------------------------------------------------------------

SGLANG_TEXTS = ["<think>", "\nCafé ", "🙂", "</think>", "\n\nHi"]
SGLANG_IDS = [[151667], [198, 34, 2224, 220], [145838, 224], [151668], [271, 13048]]


def test_sglang_body() -> None:
    up = SGLangUpstream("http://engine.invalid")
    c = constraint("auto")
    body = up.request_body(UpstreamRequest(prompt="p", prompt_ids=PROMPT_IDS, max_tokens=32, temperature=0.0, top_p=0.5,
                                           stop=("<|im_end|>",), stop_ids=(151645,), seed=3, logprobs=2, constraint=c,
                                           extra={"sampling_params": {"top_k": 1}, "rid": "r1"}))
    assert body == {
        "input_ids": PROMPT_IDS,
        "sampling_params": {"skip_special_tokens": False, "spaces_between_special_tokens": False, "max_new_tokens": 32,
                            "temperature": 0.0, "top_p": 0.5, "stop": ["<|im_end|>"], "stop_token_ids": [151645],
                            "sampling_seed": 3, "structural_tag": c.structural_tag_json, "top_k": 1},
        "stream": True, "return_logprob": True, "top_logprobs_num": 2, "return_text_in_logprobs": True, "rid": "r1",
    }
    py = constraint("required", parser="pythonic")
    assert up.request_body(UpstreamRequest(prompt="p", constraint=py))["sampling_params"]["ebnf"] == py.gbnf
    with pytest.raises(UnsupportedConstraintError):
        up.generate(UpstreamRequest(prompt="p", constraint=constraint("auto", parser="pythonic")))
    text = SGLangUpstream("http://engine.invalid", token_prompts=False).request_body(
        UpstreamRequest(prompt="p", prompt_ids=[1]))
    assert text["text"] == "p" and "input_ids" not in text


@pytest.mark.parametrize(("transcript", "flag"), [
    ("sglang_cumulative.sse", None), ("sglang_cumulative.sse", False),
    ("sglang_incremental.sse", None), ("sglang_incremental.sse", True),
])
async def test_sglang_stream_never_cumulative(engine: ScriptedEngine, transcript: str, flag: bool | None) -> None:
    # Cut at every 5th byte too, so events and UTF-8 characters straddle reads.
    engine.script("/generate", Reply(chunks=sse_events(transcript)), Reply(chunks=pieces(body_of(transcript), 5)))
    async with SGLangUpstream(engine.base, incremental=flag, timeouts=FAST) as up:
        for _ in range(2):
            chunks = await collect(up.generate(UpstreamRequest(prompt="p", prompt_ids=[1, 2], logprobs=1)))
            assert [c.text for c in chunks] == SGLANG_TEXTS
            assert [c.token_ids for c in chunks] == SGLANG_IDS
            assert [len(c.logprobs or ()) for c in chunks] == [len(ids) for ids in SGLANG_IDS]
            assert chunks[1].logprobs is not None
            assert chunks[1].logprobs[0] == {"token": None, "logprob": -0.5, "id": 198,
                                             "top_logprobs": [{"token": None, "logprob": -0.5, "id": 198},
                                                              {"token": ".", "logprob": -4.0, "id": 13}]}
            assert [c.finish_reason for c in chunks] == [None] * 4 + ["length"]
            assert chunks[-1].usage == EngineUsage(prompt_tokens=9, completion_tokens=10)
    assert engine.seen("/generate")[0].body["input_ids"] == [1, 2]


async def test_sglang_wrong_mode_flag_is_a_protocol_error(engine: ScriptedEngine) -> None:
    engine.script("/generate", Reply(chunks=sse_events("sglang_incremental.sse")))
    async with SGLangUpstream(engine.base, incremental=False, timeouts=FAST) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert err.kind == "protocol" and not err.before_first_byte and text_of(got) == "<think>"


async def test_sglang_abort_and_error_body(engine: ScriptedEngine) -> None:
    engine.script("/generate", Reply(chunks=sse_events("sglang_abort.sse")),
                  Reply(400, "application/json", [body_of("sglang_error_400.json")]))
    async with SGLangUpstream(engine.base, timeouts=FAST) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))
        assert (err.kind, err.status, err.before_first_byte) == ("status", 503, False)
        assert err.message == "The request was aborted: out of memory." and text_of(got) == "Hi"
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.status) == ("status", 400) and "longer than the model's context length" in err.message


# -- Ollama -------------------------------------------------------------------------------------------------------


async def test_ollama_body_and_stream(engine: ScriptedEngine) -> None:
    engine.script("/api/generate", Reply(content_type="application/x-ndjson", chunks=ndjson_lines("ollama_generate.ndjson")),
                  Reply(404, "application/json; charset=utf-8", [body_of("ollama_error_404.json")]))
    async with OllamaUpstream(engine.base, model="qwen3:0.6b", timeouts=FAST) as up:
        assert up.constraint_forms == ()
        req = UpstreamRequest(prompt="<|im_start|>user\nhi", prompt_ids=[1], max_tokens=4, temperature=0.2, top_p=0.8,
                              seed=5, stop=("<|im_end|>",), extra={"options": {"num_ctx": 4096}, "keep_alive": "5m"})
        chunks = await collect(up.generate(req))
        err, _ = await failure(up.generate(UpstreamRequest(prompt="x")))
        with pytest.raises(UnsupportedConstraintError):
            up.generate(UpstreamRequest(prompt="p", constraint=constraint("required")))
    assert engine.seen("/api/generate")[0].body == {
        "model": "qwen3:0.6b", "prompt": "<|im_start|>user\nhi", "raw": True, "stream": True,
        "options": {"num_predict": 4, "temperature": 0.2, "top_p": 0.8, "seed": 5, "stop": ["<|im_end|>"],
                    "num_ctx": 4096},
        "keep_alive": "5m",
    }
    assert [c.text for c in chunks] == ["<think>", "\nhm", "</think>", "\n\nHello!", ""]
    assert all(c.token_ids == [] for c in chunks)
    assert chunks[-1].finish_reason == "length" and chunks[-1].usage == EngineUsage(prompt_tokens=9, completion_tokens=4)
    assert (err.kind, err.status) == ("status", 404) and err.message == 'model "nope" not found, try pulling it first'
    with pytest.raises(ValueError):
        OllamaUpstream(engine.base, model="")


# -- TGI ----------------------------------------------------------------------------------------------------------


async def test_tgi_body_and_special_tokens_kept(engine: ScriptedEngine) -> None:
    engine.script("/generate_stream", Reply(chunks=sse_events("tgi_generate_stream.sse")))
    async with TGIUpstream(engine.base, timeouts=FAST) as up:
        req = UpstreamRequest(prompt="<|start|>user<|message|>hi<|end|>", max_tokens=10, temperature=0.0, top_p=1.0,
                              seed=2, stop=("<|return|>",), logprobs=2)
        chunks = await collect(up.generate(req))
    assert engine.seen("/generate_stream")[0].body == {
        "inputs": "<|start|>user<|message|>hi<|end|>",
        "parameters": {"details": True, "decoder_input_details": False, "max_new_tokens": 10, "do_sample": False,
                       "seed": 2, "stop": ["<|return|>"], "top_n_tokens": 2},
    }
    # TGI's generated_text drops special tokens; the tokens' own text keeps the markers.
    assert text_of(chunks) == "<|channel|>analysis<|message|>Think<|end|><|channel|>final<|message|>Hi<|return|>"
    assert len(chunks) == 10 and chunks[0].token_ids == [200005]
    assert chunks[0].logprobs == [{"token": "<|channel|>", "logprob": -0.25, "id": 200005, "top_logprobs": []}]
    assert chunks[-1].finish_reason == "stop" and chunks[-1].usage == EngineUsage(prompt_tokens=7, completion_tokens=10)
    sampled = TGIUpstream(engine.base).request_body(UpstreamRequest(prompt="p", temperature=0.7, top_p=0.9))
    assert sampled["parameters"]["do_sample"] is True and sampled["parameters"]["temperature"] == 0.7
    assert sampled["parameters"]["top_p"] == 0.9


async def test_tgi_errors(engine: ScriptedEngine) -> None:
    engine.script("/generate_stream", Reply(chunks=sse_events("tgi_error_midstream.sse")),
                  Reply(422, "application/json", [body_of("tgi_error_422.json")]))
    async with TGIUpstream(engine.base, timeouts=FAST) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))
        assert (err.kind, err.before_first_byte) == ("status", False) and text_of(got) == "<|channel|>"
        assert "CUDA out of memory" in err.message
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
        assert (err.kind, err.status) == ("status", 422) and err.message.startswith("Input validation error")
        with pytest.raises(UnsupportedConstraintError):
            up.generate(UpstreamRequest(prompt="p", constraint=constraint("required")))


# -- errors, timeouts, retry, closing --------------------------------------------------------------------------------


async def test_connect_refused() -> None:
    base = f"http://127.0.0.1:{free_port()}"
    async with LlamaCppUpstream(base, api_key=API_KEY, timeouts=FAST, retry_backoff=0) as up:
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.status, err.before_first_byte) == ("connect", None, True)
    assert_safe(err, base)


async def test_status_error_message_is_scrubbed(engine: ScriptedEngine) -> None:
    leak = json.dumps({"error": {"code": 500, "message": f"boom at {engine.base}/completion with key {API_KEY}"}})
    engine.script("/completion", Reply(500, "application/json", [leak.encode()]))
    async with LlamaCppUpstream(engine.base, api_key=API_KEY, timeouts=FAST) as up:
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.status, err.before_first_byte) == ("status", 500, True)
    assert err.message.startswith("boom at ") and "<upstream>" in err.message
    assert_safe(err, engine.base)
    assert len(engine.seen("/completion")) == 1  # 500 is not retried


async def test_non_json_error_body_and_non_sse_answer(engine: ScriptedEngine) -> None:
    engine.script("/completion", Reply(502, "text/html", [b"<html>Bad Gateway at 127.0.0.1</html>"]),
                  Reply(502, "text/html", [b"<html>Bad Gateway</html>"]),
                  Reply(200, "application/json", [b'{"content": "whole answer", "stop": true}']))
    async with LlamaCppUpstream(engine.base, timeouts=FAST, retry_backoff=0) as up:
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
        assert (err.kind, err.status) == ("status", 502)
        assert err.message == "the upstream engine answered with HTTP 502"
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert err.kind == "protocol" and "event stream" in err.message


async def test_malformed_event(engine: ScriptedEngine) -> None:
    events = sse_events("llamacpp_completion.sse")
    engine.script("/completion", Reply(chunks=[events[0], b"data: {not json\n\n", *events[1:]]),
                  Reply(chunks=[b'data: {"content": 5}\n\n']))
    async with LlamaCppUpstream(engine.base, timeouts=FAST) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))
        assert (err.kind, err.before_first_byte) == ("protocol", False) and text_of(got) == ".moves"
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))
        assert (err.kind, err.before_first_byte) == ("protocol", True) and not got


async def test_truncated_stream_is_closed(engine: ScriptedEngine) -> None:
    events = sse_events("llamacpp_completion.sse")
    engine.script("/completion", Reply(chunks=events[:2]), Reply(chunks=events[:2], crash=True))
    async with LlamaCppUpstream(engine.base, timeouts=FAST) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))  # ends cleanly, no final event
        assert (err.kind, err.before_first_byte) == ("closed", False) and text_of(got) == ".moves(redis"
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))  # the connection breaks
        assert (err.kind, err.before_first_byte) == ("closed", False) and text_of(got) == ".moves(redis"
    assert len(engine.seen("/completion")) == 2  # never retried after the first byte


async def test_an_event_stream_is_read_as_utf8_whatever_charset_it_declares(engine: ScriptedEngine) -> None:
    # The SSE standard: an event stream is always UTF-8. An engine that declares another charset still
    # sends UTF-8, and reading it as Latin-1 would turn every non-ASCII character into mojibake.
    text = "caf\u00e9 \u2014 \u65e5\u672c"
    final = {"content": "", "stop": True, "stop_type": "eos", "tokens_predicted": 1, "tokens_evaluated": 1}
    chunks = [b"data: " + json.dumps({"content": text, "stop": False}, ensure_ascii=False).encode() + b"\n\n",
              b"data: " + json.dumps(final).encode() + b"\n\n"]
    engine.script("/completion", Reply(content_type="text/event-stream; charset=latin-1", chunks=chunks))
    async with LlamaCppUpstream(engine.base, timeouts=FAST) as up:
        got = await collect(up.generate(UpstreamRequest(prompt="p")))
    assert text_of(got) == text


async def test_idle_timeout(engine: ScriptedEngine) -> None:
    engine.script("/completion", Reply(chunks=sse_events("llamacpp_completion.sse")[:1], hang=True))
    async with LlamaCppUpstream(engine.base, timeouts=Timeouts(first_byte=5.0, idle=0.3)) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.before_first_byte) == ("timeout", False) and text_of(got) == ".moves"
    assert "0.3 s" in err.message
    assert await anyio.to_thread.run_sync(engine.disconnected.wait, 5.0)  # the engine saw the request end


async def test_first_byte_timeout_is_not_retried(engine: ScriptedEngine) -> None:
    engine.script("/completion", Reply(before_headers=2.0, chunks=sse_events("llamacpp_completion.sse")),
                  Reply(chunks=sse_events("llamacpp_completion.sse")))
    async with LlamaCppUpstream(engine.base, timeouts=Timeouts(first_byte=0.3, idle=5.0)) as up:
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.before_first_byte) == ("timeout", True)
    assert len(engine.seen("/completion")) == 1


async def test_retry_once_before_the_first_byte(engine: ScriptedEngine) -> None:
    busy = Reply(503, "application/json", [b'{"error": {"code": 503, "message": "Loading model"}}'])
    engine.script("/completion", busy, Reply(chunks=sse_events("llamacpp_completion.sse")))
    async with LlamaCppUpstream(engine.base, timeouts=FAST, retry_backoff=0) as up:
        chunks = await collect(up.generate(UpstreamRequest(prompt="p")))
        assert text_of(chunks) == ".moves(redisatus" and len(engine.seen("/completion")) == 2
        engine.script("/completion", busy, busy, busy)
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
        assert (err.kind, err.status, err.message) == ("status", 503, "Loading model")
        assert len(engine.seen("/completion")) == 4  # one retry, no more
    engine.reset()
    engine.script("/completion", busy, busy)
    async with LlamaCppUpstream(engine.base, timeouts=FAST, retries=0) as none:
        err, _ = await failure(none.generate(UpstreamRequest(prompt="p")))
    assert err.status == 503 and len(engine.seen("/completion")) == 1


async def test_the_body_is_sent_whole_on_a_retry_and_let_go_at_the_first_chunk(
    engine: ScriptedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream keeps no copy of its request body once its answer has started (a long conversation's prompt and
    # ids are tens of kilobytes per open stream); before that, a retry sends it whole again.
    released: list[int] = []
    real_release = _SentBody.release

    def release(self: _SentBody) -> None:
        released.append(len(self))
        real_release(self)

    monkeypatch.setattr(_SentBody, "release", release)
    busy = Reply(503, "application/json", [b'{"error": {"code": 503, "message": "Loading model"}}'])
    engine.script("/completion", busy, Reply(chunks=sse_events("llamacpp_completion.sse")))
    async with LlamaCppUpstream(engine.base, timeouts=FAST, retry_backoff=0) as up:
        stream = up.generate(UpstreamRequest(prompt="p", prompt_ids=PROMPT_IDS))
        first = await stream.__anext__()
        assert first.text == ".moves" and len(released) == 1 and released[0] > len(str(PROMPT_IDS))
        rest = [c async for c in stream]
    assert rest[-1].finish_reason == "length" and len(released) == 1
    first_try, second_try = engine.seen("/completion")
    assert first_try.body == second_try.body and first_try.body["prompt"] == PROMPT_IDS


def test_a_sent_body_gives_its_bytes_until_released() -> None:
    body = _SentBody(b"abc")
    assert len(body) == 3 and list(body) == [b"abc"] and list(body) == [b"abc"]
    body.release()
    assert len(body) == 0 and list(body) == [b""]


async def test_a_stream_left_open_after_its_final_event_ends_normally(engine: ScriptedEngine) -> None:
    engine.script("/completion", Reply(chunks=sse_events("llamacpp_completion.sse"), hang=True))
    async with LlamaCppUpstream(engine.base, timeouts=Timeouts(first_byte=5.0, idle=0.3)) as up:
        chunks = await collect(up.generate(UpstreamRequest(prompt="p")))
    assert chunks[-1].finish_reason == "length" and text_of(chunks) == ".moves(redisatus"


@pytest.mark.parametrize("exc", [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"),
                                 httpx.RemoteProtocolError("server disconnected")])
async def test_retry_after_transport_failure_before_the_answer(exc: Exception) -> None:
    calls = 0
    ok = body_of("llamacpp_completion.sse")

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise exc
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=ok)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    up = LlamaCppUpstream("http://engine.invalid:1", client=client, retry_backoff=0)
    chunks = await collect(up.generate(UpstreamRequest(prompt="p")))
    await up.aclose()
    assert not client.is_closed  # a client passed in is the caller's
    await client.aclose()
    assert calls == 2 and chunks[-1].finish_reason == "length"


async def test_connect_timeout_maps_to_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("slow")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        up = LlamaCppUpstream("http://engine.invalid:1", client=client, retry_backoff=0)
        err, _ = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.before_first_byte) == ("timeout", True) and "connecting" in err.message


ADAPTERS: dict[str, tuple[str, str, Any]] = {
    "llamacpp": ("/completion", "llamacpp_completion.sse", lambda b: LlamaCppUpstream(b, timeouts=FAST)),
    "openai": ("/v1/completions", "vllm_completions.sse", lambda b: OpenAICompletionsUpstream(b, timeouts=FAST)),
    "sglang": ("/generate", "sglang_cumulative.sse", lambda b: SGLangUpstream(b, timeouts=FAST)),
    "ollama": ("/api/generate", "ollama_generate.ndjson", lambda b: OllamaUpstream(b, model="m", timeouts=FAST)),
    "tgi": ("/generate_stream", "tgi_generate_stream.sse", lambda b: TGIUpstream(b, timeouts=FAST)),
}


@pytest.mark.parametrize("kind", list(ADAPTERS))
async def test_closing_early_closes_the_upstream_response(engine: ScriptedEngine, kind: str) -> None:
    path, transcript, make = ADAPTERS[kind]
    first = ndjson_lines(transcript)[:2] if transcript.endswith(".ndjson") else sse_events(transcript)[:2]
    ctype = "application/x-ndjson" if transcript.endswith(".ndjson") else "text/event-stream"
    engine.script(path, Reply(content_type=ctype, chunks=first, hang=True))
    up = make(engine.base)
    async with aclosing(up.generate(UpstreamRequest(prompt="p"))) as gen:
        async for chunk in gen:
            assert chunk.text
            break
    assert await anyio.to_thread.run_sync(engine.disconnected.wait, 5.0)
    await up.aclose()


async def test_cancelling_the_consumer_closes_the_upstream_response(engine: ScriptedEngine) -> None:
    engine.script("/completion", Reply(chunks=sse_events("llamacpp_completion.sse")[:1], hang=True))
    got: list[TokenChunk] = []
    async with LlamaCppUpstream(engine.base, timeouts=FAST) as up:
        with anyio.move_on_after(0.5):
            async with aclosing(up.generate(UpstreamRequest(prompt="p"))) as gen:
                async for chunk in gen:
                    got.append(chunk)
        assert text_of(got) == ".moves"
        assert await anyio.to_thread.run_sync(engine.disconnected.wait, 5.0)


async def test_a_consumer_holding_the_stream_longer_than_idle_is_not_a_timeout(engine: ScriptedEngine) -> None:
    # Only time spent waiting for the engine counts: here every event is sent at once, then the
    # consumer keeps each chunk for longer than the idle limit.
    engine.script("/completion", Reply(chunks=sse_events("llamacpp_completion.sse")))
    got: list[TokenChunk] = []
    async with LlamaCppUpstream(engine.base, timeouts=Timeouts(first_byte=5.0, idle=0.2)) as up:
        async with aclosing(up.generate(UpstreamRequest(prompt="p"))) as gen:
            async for chunk in gen:
                got.append(chunk)
                await anyio.sleep(0.3)
    assert text_of(got) == ".moves(redisatus" and got[-1].finish_reason == "length"


async def test_events_closer_than_idle_never_time_out_however_long_the_stream(engine: ScriptedEngine) -> None:
    # Each gap (0.15 s) is below the limit (0.4 s), the whole stream (0.6 s) is not: the count restarts
    # at every event (the per-stream timer is re-armed, not fired).
    engine.script("/completion", Reply(chunks=sse_events("llamacpp_completion.sse"), delay=0.15))
    async with LlamaCppUpstream(engine.base, timeouts=Timeouts(first_byte=5.0, idle=0.4)) as up:
        chunks = await collect(up.generate(UpstreamRequest(prompt="p")))
    assert text_of(chunks) == ".moves(redisatus"


async def test_an_event_split_over_reads_counts_as_one_wait(engine: ScriptedEngine) -> None:
    # The idle limit is the time since the last event: bytes of an unfinished event do not reset it.
    first, second = sse_events("llamacpp_completion.sse")[:2]
    trickle = [first] + pieces(second, max(1, len(second) // 4))
    engine.script("/completion", Reply(chunks=trickle, delay=0.12, hang=True))
    async with LlamaCppUpstream(engine.base, timeouts=Timeouts(first_byte=5.0, idle=0.3)) as up:
        err, got = await failure(up.generate(UpstreamRequest(prompt="p")))
    assert (err.kind, err.before_first_byte) == ("timeout", False) and text_of(got) == ".moves"


async def test_streams_spread_over_the_pool_shards(engine: ScriptedEngine) -> None:
    engine.script("/completion", *[Reply(chunks=sse_events("llamacpp_completion.sse")[:1], hang=True)] * 3)
    up = LlamaCppUpstream(engine.base, timeouts=FAST, max_connections=40)
    async with up:
        assert len(up._clients) == 3  # 40 connections over pools of at most 16
        gens = [up.generate(UpstreamRequest(prompt="p")) for _ in range(3)]
        try:
            for gen in gens:
                assert (await gen.__anext__()).text == ".moves"
            assert up._busy == [1, 1, 1]
        finally:
            for gen in gens:
                await gen.aclose()
        assert up._busy == [0, 0, 0]


# -- the registry -------------------------------------------------------------------------------------------------


async def test_make_upstream() -> None:
    assert set(UPSTREAM_KINDS) == {"llamacpp", "openai", "sglang", "ollama", "tgi", "chat"}
    options: dict[str, dict[str, Any]] = {"ollama": {"model": "m"}, "openai": {"flavor": "generic"}}
    for kind, cls in UPSTREAM_KINDS.items():
        up = make_upstream(kind, "http://engine.invalid:8000", api_key=API_KEY, timeouts=FAST, **options.get(kind, {}))
        assert isinstance(up, cls) and isinstance(up, HttpUpstream) and up.kind == kind
        assert isinstance(up.constraint_forms, tuple) and API_KEY not in repr(up)
        await up.aclose()
    assert make_upstream("sglang", "http://e.invalid", incremental=True).incremental is True  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown upstream kind"):
        make_upstream("exllama", "http://e.invalid")
    with pytest.raises(ValueError, match="http"):
        make_upstream("tgi", "ftp://e.invalid")
    with pytest.raises(TypeError):
        make_upstream("tgi", "http://e.invalid", flavor="vllm")


async def test_the_prepared_post_is_what_build_request_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Our own clients send the streaming POST from a URL parsed and headers merged once per URL: the
    # request must be the one httpx's build_request makes, every time.
    up = LlamaCppUpstream("http://127.0.0.1:9", api_key=API_KEY, headers={"x-extra": "1"})
    try:
        url = up.base_url + "/completion"
        client = up._clients[0]
        for content in (b'{"prompt": [1, 2]}', b'{"prompt": "other"}'):  # the second reuses the prepared parts
            want = client.build_request("POST", url, content=content, timeout=up._timeout,
                                        headers={**up._headers, "content-type": "application/json"})
            got = up._post(url, _SentBody(content))
            assert (got.method, got.url, got.headers.raw, await got.aread(), got.extensions) == (
                want.method, want.url, want.headers.raw, want.content, want.extensions)
            assert ("authorization", f"Bearer {API_KEY}") in got.headers.multi_items()
        assert len(up._prepared) == 1
        # An engine's cookie is not kept (so never sent back), and the answer is not even translated for the
        # standard library's cookie jar (a URL parse and two adapter objects per request).
        def translated(*args: object) -> None:
            raise AssertionError("the answer was translated for a cookie jar")

        monkeypatch.setattr(httpx.Cookies, "_CookieCompatRequest", translated)
        answer = httpx.Response(200, headers={"set-cookie": "session=abc"}, request=got)
        client.cookies.extract_cookies(answer)
        client.cookies = {"session": "abc"}  # ignored
        assert not client.cookies
    finally:
        await up.aclose()
