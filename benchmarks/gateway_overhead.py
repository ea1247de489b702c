"""``python -m benchmarks gateway``: what deltaflow's gateway adds between a client and a llama.cpp engine.

Four processes on a two-core machine:

* **the fake upstream** (this file, ``_upstream``): a raw asyncio HTTP/1.1
  server that speaks llama.cpp's ``/completion`` (``/health``, ``/props``
  and the one-token render probe too) and replays a recorded-shaped stream:
  256 tokens of a Qwen3 answer (``<think>`` reasoning, a sentence of
  content, a Hermes ``<tool_call>``), one token per ``data:`` event with the
  real Qwen3 tokenizer's ids, then llama.cpp's final ``stop`` event. Like
  llama.cpp's batched decode, one ticker task writes one token to every
  open stream per step: as fast as the loop goes (``full``), one step every
  ``pace`` seconds (``paced``: a 50 tokens/s engine by default), or the
  first event and then nothing (``stall``: an engine still generating). It
  records when it wrote each token of each stream (``CLOCK_MONOTONIC``,
  shared by the processes), so the client can tell how late every token is.
* **the gateway** (``_gateway``): ``deltaflow.gateway.config.build_engine`` +
  ``deltaflow.server.create_app`` under ``uvicorn`` (one worker, h11,
  asyncio), pinned to core 0. ``max_streams=None`` and the upstream pool at
  2,048 connections: the defaults (256 streams, 100 pooled connections)
  would answer 429 or queue at 1,000 streams. ``DELTAFLOW_BENCH_PROFILE=
  cprofile|pyinstrument`` runs it under a profiler (``--profile``).
* **the load generator** (``_loadgen``): raw asyncio HTTP/1.1 clients (no
  httpx: at 1,000 streams httpx would cost more than the gateway), N
  concurrent streams, each reading and decoding every SSE event, rebuilding
  the message and checking it; it records time to first token, the
  inter-token gaps and each token's delay from the upstream's write.
* **this process**: starts the others (the upstream, the load generator and
  the real engine share core 1), verifies, measures, writes the report.

Verify first: one streamed request per protocol (OpenAI Chat, Anthropic
Messages, OpenAI Responses) through the gateway must give exactly the
reasoning, content and tool call of the replayed stream (reasoning and
content compared after ``strip()``; the call's name, and its arguments'
``json.loads``); otherwise the run stops with the difference. Every stream
of every measured cell is checked the same way; a cell with a wrong or
failed stream is FAIL and reports no figure.

Measured (each figure beside its floor: the same client reading the fake
upstream directly):

* added time to first token, one stream at a time on a kept-alive
  connection: a short chat (three protocols) and a 20-turn agent
  conversation with 10 tools (``benchmarks.prompt_render.make_body``: 30 KB
  of tool results; the template is compiled after the first request);
  median and p99;
* per token at 1, 100 and 1,000 concurrent streams, three protocols, the
  upstream at full speed: the gateway process's CPU time per upstream token
  (``/proc/<pid>/task/*/schedstat``), the client's mean gap between tokens,
  the tokens/s forwarded;
* per-token delay with a paced upstream (50 tokens/s per stream): median and
  p99 of (client read time - upstream write time) of every token;
* memory: the gateway's RSS growth with N idle streams (upstream stalled
  after one event) and with N busy streams, per stream; ``--soak SECONDS``
  (off by default and in --quick; 600 when given without a value) keeps
  streams running with clients leaving at random and reports RSS over time;
* a real llama.cpp (xllamacpp on the tiny random Qwen3 GGUF of
  ``tests/engine``): time to first token through the gateway vs direct.

The machine may be shared: CPU time per token is robust to that (it is the
gateway's own CPU time), wall-clock latencies are not. The report records
the load average and the busiest other processes.

The gateway child runs as ``deltaflow serve`` does: uvicorn's "auto" HTTP
implementation and loop (``GW_HTTP`` / ``GW_LOOP`` override them, e.g.
``h11`` / ``asyncio``) and the server's garbage-collector tuning
(``GW_GC=default`` leaves CPython's collector as it is).

Examples::

    python -m benchmarks gateway --quick               # a couple of minutes
    python -m benchmarks gateway --save                # benchmarks/results/<date>-gateway.{json,md,png}
    python -m benchmarks gateway --soak 600            # the soak (10 minutes) after the rest
    python -m benchmarks gateway --profile             # the worst cell under pyinstrument: where the time goes
    python -m benchmarks gateway --profile --tool cprofile --top 40

Progress goes to stderr, the markdown report to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import gc
import json
import math
import os
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
MODEL = "qwen3"
N_TOKENS = 256
GATEWAY_CORE = 0
OTHER_CORE = 1
PACE_S = 0.02  # the paced upstream: 50 tokens/s per stream
RAMP_S = 2.0  # at 1,000 streams the starts are spread over this many seconds
PROFILE_ENV = "DELTAFLOW_BENCH_PROFILE"
PROFILE_OUT_ENV = "DELTAFLOW_BENCH_PROFILE_OUT"
MARK = "@@bench "  # the prefix of the one JSON line a child process reports on stdout

TARGETS = {
    "ttft_short_ms": 2.0,
    "ttft_agent_ms": 10.0,
    "cpu_us_per_token_100": 30.0,
    "tokens_per_s_1000": 50_000.0,
    "idle_kb_per_stream": 40.0,
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
CALL_ARGS = {"city": "Paris", "unit": "celsius", "days": 3}
CONTENT = "I will look up the current weather in Paris for you."
_REASONING_WORDS = (
    "the user asks about the weather in Paris so I should call the weather tool with the city and a unit "
    "they did not say which unit they want but Paris is in France where people use celsius so celsius is "
    "the sensible default and three days of forecast should cover the question about the coming weekend "
    "I must not invent numbers before the tool answers and I should keep the reply short and friendly"
).split()


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _shared() -> Path:
    from deltaflow.testing import shared_dir

    root = shared_dir()
    if root is None or not (root / "tokenizers" / MODEL / "tokenizer.json.gz").is_file():
        sys.exit("gateway benchmark: ../shared/tokenizers/qwen3 is needed (the model folder and the replayed ids)")
    return root


CORES_ENV = "DELTAFLOW_BENCH_CORES"


def _pin(core: int) -> str:
    """Pin this process to ``core`` of the cores the benchmark started with (not this process's mask, which a
    parent pinned before us may have narrowed) when there are two or more; says what was done."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity)"
    given = os.environ.get(CORES_ENV)
    cores = [int(c) for c in given.split(",")] if given else sorted(os.sched_getaffinity(0))
    os.environ.setdefault(CORES_ENV, ",".join(map(str, cores)))
    if len(cores) < 2:
        return "not pinned (one core)"
    os.sched_setaffinity(0, {cores[core % len(cores)]})
    return f"core {cores[core % len(cores)]}"


def _raise_nofile() -> None:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    except (ImportError, ValueError, OSError):
        pass


# -- the replayed stream --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """The replayed answer: its tokens, what a client must rebuild, and where each token becomes visible.

    Attributes:
        ids: the token ids (one per event).
        pieces: each token's text.
        reasoning: the expected reasoning (stripped).
        content: the expected content (stripped).
        call: the expected call (name, arguments).
        vis: visible characters (reasoning + content + call name + arguments) once token k is parsed,
            by deltaflow's own sync parser.
        first_visible: the index of the first token that makes output visible.
    """

    ids: list[int]
    pieces: list[str]
    reasoning: str
    content: str
    call: tuple[str, dict[str, Any]]
    vis: list[int]
    first_visible: int

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def make_script(n: int = N_TOKENS) -> Script:
    """``n`` tokens of a Qwen3 answer with a Hermes call (ASCII, so every token decodes to whole text)."""
    from deltaflow import ResponseParser
    from deltaflow.testing import load_tokenizer

    tok = load_tokenizer(MODEL)
    if tok is None:
        sys.exit("gateway benchmark: the shared Qwen3 tokenizer is missing")

    def enc(s: str) -> list[int]:
        return list(tok.encode(s, add_special_tokens=False).ids)

    head = enc("<think>\n")
    tail = enc(
        "\n</think>\n\n"
        + CONTENT
        + "\n<tool_call>\n"
        + json.dumps({"name": WEATHER["function"]["name"], "arguments": CALL_ARGS})
        + "\n</tool_call>"
    )
    room = n - len(head) - len(tail)
    rng = random.Random(7)
    words: list[str] = []
    while len(enc(" ".join(words))) < room + 8:
        words.extend(_REASONING_WORDS if not words else rng.sample(_REASONING_WORDS, len(_REASONING_WORDS)))
    body = enc(" ".join(words))[:room]
    ids = head + body + tail
    pieces = [tok.decode([i], skip_special_tokens=False) for i in ids]
    if tok.decode(ids, skip_special_tokens=False) != "".join(pieces) or len(ids) != n:
        sys.exit("gateway benchmark: the replayed tokens do not decode to whole text one by one")
    reasoning = tok.decode(body, skip_special_tokens=False).strip()
    parser = ResponseParser("hermes", "qwen3", tools=[WEATHER], reasoning_starts_open=False)
    vis: list[int] = []
    seen = 0
    for k, piece in enumerate(pieces):
        for d in parser.feed(piece, final=k == n - 1):
            seen += len(d.content or "") + len(d.reasoning_content or "")
            for tc in d.tool_calls:
                seen += len(tc.function.name or "") + len(tc.function.arguments or "")
        vis.append(seen)
    first = next(k for k, v in enumerate(vis) if v > 0)
    return Script(ids, pieces, reasoning, CONTENT, (WEATHER["function"]["name"], CALL_ARGS), vis, first)


# -- the requests ---------------------------------------------------------------------------------------------

PROTOCOLS = ("chat", "messages", "responses")
PATHS = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
    "upstream": "/completion",
}


def short_body(protocol: str, tag: str = "") -> dict[str, Any]:
    """A short chat with one tool, streamed, in ``protocol``; ``tag`` tells the upstream which stream it is."""
    q = "What is the weather in Paris this weekend?" + (f" [stream-{tag}]" if tag else "")
    if protocol == "chat":
        return {
            "model": MODEL,
            "stream": True,
            "max_tokens": 1024,
            "tools": [WEATHER],
            "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": q}],
        }
    fn = WEATHER["function"]
    if protocol == "messages":
        return {
            "model": MODEL,
            "stream": True,
            "max_tokens": 1024,
            "system": "You are a helpful assistant.",
            "tools": [{"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}],
            "messages": [{"role": "user", "content": q}],
        }
    return {
        "model": MODEL,
        "stream": True,
        "max_output_tokens": 1024,
        "instructions": "You are a helpful assistant.",
        "tools": [
            {"type": "function", "name": fn["name"], "description": fn["description"], "parameters": fn["parameters"]}
        ],
        "input": [{"role": "user", "content": q}],
    }


def agent_body(tag: str = "") -> dict[str, Any]:
    """The 20-turn agent conversation with 10 tools of ``benchmarks.prompt_render`` (OpenAI Chat), streamed."""
    from .prompt_render import make_body

    body = dict(make_body(tools=True))
    body.update(model=MODEL, stream=True, max_tokens=1024)
    body["tools"] = (
        [*body["tools"], WEATHER]
        if not any(t["function"]["name"] == "get_weather" for t in body["tools"])
        else body["tools"]
    )
    if tag:
        body["messages"] = [*body["messages"][:-1], {**body["messages"][-1]}]
        body["messages"][-1]["content"] = f"{body['messages'][-1]['content']} [stream-{tag}]"
    return body


def agent_facts(body: dict[str, Any]) -> str:
    msgs = body["messages"]
    tool_bytes = sum(len(str(m.get("content") or "").encode()) for m in msgs if m.get("role") == "tool")
    return f"{len(msgs)} messages, {len(body['tools'])} tools, {tool_bytes:,} B of tool results"


# -- /proc probes ---------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` (schedstat, nanoseconds), in seconds; 0 where /proc is missing."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    except OSError:
        return 0.0
    return total / 1e9


def rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _busiest_others(skip: set[int], n: int = 5) -> list[str]:
    """The processes using the most CPU now (a 1 s sample), ours left out."""

    def sample() -> dict[int, tuple[str, int]]:
        out: dict[int, tuple[str, int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) in skip:
                continue
            try:
                with open(f"/proc/{d}/stat", encoding="utf-8", errors="replace") as f:
                    raw = f.read()
                name = raw[raw.index("(") + 1 : raw.rindex(")")]
                fields = raw[raw.rindex(")") + 2 :].split()
                out[int(d)] = (name, int(fields[11]) + int(fields[12]))
            except (OSError, ValueError, IndexError):
                continue
        return out

    a = sample()
    time.sleep(1.0)
    b = sample()
    tick = os.sysconf("SC_CLK_TCK")
    busy = sorted(((b[p][1] - a[p][1]) / tick, b[p][0]) for p in b if p in a)
    return [f"{name} {share * 100:.0f}%" for share, name in reversed(busy[-n:]) if share >= 0.02]


# -- a tiny HTTP/1.1 layer (both sides) -----------------------------------------------------------------------


def _http_request(path: str, body: bytes, port: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"accept: text/event-stream\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


def _json_response(payload: Any, status: str = "200 OK") -> bytes:
    body = json.dumps(payload).encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


# -- role: the fake llama.cpp ---------------------------------------------------------------------------------


class _UpStream:
    """One streamed /completion on a connection."""

    __slots__ = ("conn", "key", "k", "log")

    def __init__(self, conn: _UpConn, key: int | None, log: list[float] | None) -> None:
        self.conn = conn
        self.key = key
        self.k = 0
        self.log = log


class _FakeLlama:
    def __init__(self, script: Script, tok: Any) -> None:
        self.tok = tok
        n = len(script.ids)
        evs = []
        for k, (tid, piece) in enumerate(zip(script.ids, script.pieces, strict=True)):
            ev = {
                "index": 0,
                "content": piece,
                "tokens": [tid],
                "stop": False,
                "id_slot": -1,
                "tokens_predicted": k + 1,
                "tokens_evaluated": 0,
            }
            evs.append(ev)
        self.n = n
        self.events_json = evs
        self.mode = "full"
        self.pace = PACE_S
        self.logging = False
        self.truncate = 0  # >0: answer with the first `truncate` tokens, then the final event
        self.active: list[_UpStream] = []
        self.stalled: list[_UpStream] = []
        self.sendlog: dict[int, list[float]] = {}
        self.last_body: bytes = b""
        self.served = 0
        self.wake = asyncio.Event()
        self._cache: dict[int, list[bytes]] = {}

    def events(self, evaluated: int) -> list[bytes]:
        """The chunk-framed SSE bytes of every event (``tokens_evaluated`` = the prompt's length), cached."""
        got = self._cache.get(evaluated)
        if got is None:
            got = []
            for ev in self.events_json:
                got.append(
                    _chunk(
                        b"data: "
                        + json.dumps({**ev, "tokens_evaluated": evaluated}, separators=(",", ":")).encode()
                        + b"\n\n"
                    )
                )
            final = {
                "index": 0,
                "content": "",
                "tokens": [],
                "id_slot": 0,
                "stop": True,
                "model": "tiny-qwen3.gguf",
                "tokens_predicted": self.n,
                "tokens_evaluated": evaluated,
                "has_new_line": False,
                "truncated": False,
                "stop_type": "eos",
                "stopping_word": "",
                "tokens_cached": evaluated + self.n,
                "timings": {
                    "cache_n": 0,
                    "prompt_n": evaluated,
                    "prompt_ms": 1.0,
                    "predicted_n": self.n,
                    "predicted_ms": 1.0,
                },
            }
            got.append(_chunk(b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\n") + b"0\r\n\r\n")
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[evaluated] = got
        return got

    def key_of(self, body: dict[str, Any]) -> int | None:
        seed = body.get("seed")
        if isinstance(seed, int):
            return seed
        prompt = body.get("prompt")
        text = prompt if isinstance(prompt, str) else self.tok.decode(prompt[-64:], skip_special_tokens=False)
        m = re.search(r"\[stream-(\d+)\]", text)
        return int(m.group(1)) if m else None

    def start(self, conn: _UpConn, body: dict[str, Any]) -> None:
        prompt = body.get("prompt")
        evaluated = len(prompt) if isinstance(prompt, list) else 1
        conn.evs = self.events(evaluated)
        if self.truncate:
            conn.evs = conn.evs[: self.truncate] + [b"" for _ in range(self.n - self.truncate)] + conn.evs[-1:]
        log: list[float] | None = None
        key = None
        if self.logging:
            key = self.key_of(body)
            if key is not None:
                log = self.sendlog.setdefault(key, [])
        s = _UpStream(conn, key, log)
        conn.stream = s
        conn.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"server: llama.cpp\r\nkeep-alive: timeout=5, max=100000\r\n\r\n"
        )
        self.served += 1
        self.write_one(s, time.monotonic())  # the first token at once (the prefill is free here)
        if s.conn.stream is None:
            return
        if self.mode == "stall":
            self.stalled.append(s)
        else:
            self.active.append(s)
            self.wake.set()

    def write_one(self, s: _UpStream, now: float) -> bool:
        """Write stream ``s``'s next event; True when it ended."""
        conn = s.conn
        if conn.closed:
            return True
        if self.truncate and s.k == self.truncate:
            s.k = self.n  # skip to the final event
        conn.transport.write(conn.evs[s.k])
        if s.log is not None:
            s.log.append(now)
        s.k += 1
        if s.k > self.n:  # the final event went out
            conn.stream = None
            return True
        return False

    async def ticker(self) -> None:
        nxt = time.monotonic()
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
                nxt = time.monotonic()
            now = time.monotonic()
            keep: list[_UpStream] = []
            for s in self.active:
                if s.conn.closed:
                    continue
                if s.conn.transport.get_write_buffer_size() > 65536:  # the reader is behind: wait for it
                    keep.append(s)
                    continue
                if not self.write_one(s, now):
                    keep.append(s)
            self.active = keep
            if self.mode == "paced":
                nxt += self.pace
                await asyncio.sleep(max(0.0, nxt - time.monotonic()))
            else:
                await asyncio.sleep(0)

    def control(self, path: str, body: dict[str, Any]) -> Any:
        if path == "/_bench/mode":
            self.mode = body.get("mode", self.mode)
            self.pace = float(body.get("pace", self.pace))
            self.logging = bool(body.get("log", self.logging))
            self.truncate = int(body.get("truncate", 0))
            if self.mode != "stall" and self.stalled:
                self.active.extend(s for s in self.stalled if not s.conn.closed)
                self.stalled = []
                self.wake.set()
            return {"ok": True}
        if path == "/_bench/stats":
            self.stalled = [s for s in self.stalled if not s.conn.closed]
            return {"active": len(self.active), "stalled": len(self.stalled), "served": self.served}
        if path == "/_bench/last":
            return json.loads(self.last_body or b"{}")
        if path == "/_bench/sendlog":
            out = {str(k): v for k, v in self.sendlog.items()}
            self.sendlog = {}
            return out
        return None


_PROPS = {
    "default_generation_settings": {"params": {"seed": 4294967295, "n_predict": -1}, "n_ctx": 32768},
    "total_slots": 1024,
    "model_alias": "tiny-qwen3.gguf",
    "model_path": "tiny-qwen3.gguf",
    "build_info": "fake llama.cpp (benchmarks.gateway_overhead)",
    "bos_token": "<|endoftext|>",
    "eos_token": "<|im_end|>",
}


class _UpConn(asyncio.Protocol):
    app: _FakeLlama

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: Any = None
        self.stream: _UpStream | None = None
        self.evs: list[bytes] = []
        self.closed = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.stream = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v.strip())
            if len(self.buf) < end + 4 + length:
                return
            raw = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self.handle(method, path, raw)

    def handle(self, method: str, path: str, raw: bytes) -> None:
        app = self.app
        body = json.loads(raw) if raw else {}
        if path == "/health":
            self.transport.write(_json_response({"status": "ok"}))
        elif path == "/props":
            self.transport.write(_json_response(_PROPS))
        elif path.startswith("/_bench/"):
            self.transport.write(_json_response(app.control(path, body)))
        elif path == "/completion" and method == "POST":
            if not body.get("stream"):
                # the gateway's probe: one control token under a grammar; rendered, as with --special
                self.transport.write(
                    _json_response(
                        {
                            "content": "<|im_start|>",
                            "tokens": [151644],
                            "stop": True,
                            "stop_type": "limit",
                            "tokens_predicted": 1,
                        }
                    )
                )
                return
            app.last_body = raw
            app.start(self, body)
        else:
            self.transport.write(_json_response({"error": {"code": 404, "message": "not found"}}, "404 Not Found"))


def _serve_upstream(argv: list[str]) -> int:
    _raise_nofile()
    where = _pin(OTHER_CORE)
    from deltaflow.testing import load_tokenizer

    script = make_script()
    app = _FakeLlama(script, load_tokenizer(MODEL))
    _UpConn.app = app

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_UpConn, "127.0.0.1", 0, backlog=4096)
        port = server.sockets[0].getsockname()[1]
        print(MARK + json.dumps({"port": port, "pinned": where}), flush=True)
        ticker = asyncio.ensure_future(app.ticker())
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.run_in_executor(None, sys.stdin.read).add_done_callback(lambda _: stop.set())
        await stop.wait()
        ticker.cancel()
        server.close()

    asyncio.run(run())
    return 0


# -- role: the gateway ----------------------------------------------------------------------------------------


def _serve_gateway(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gateway_overhead _gateway")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--context", type=int)
    ap.add_argument(
        "--proto0",
        action="store_true",
        help="bind like uvicorn's Config.bind_socket (--workers/--fd/--reload): socket proto 0, so asyncio "
        "sets no TCP_NODELAY on the accepted connections",
    )
    a = ap.parse_args(argv)
    _raise_nofile()
    where = _pin(GATEWAY_CORE)
    import logging

    import anyio
    import structlog

    from deltaflow.gateway.config import ModelConfig, build_engine
    from deltaflow.server import create_app

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    config = ModelConfig(
        name=MODEL,
        upstream=a.upstream,
        upstream_kind="llamacpp",
        model=str(_shared() / "tokenizers" / MODEL),
        tool_parser="hermes",
        reasoning_parser="qwen3",
        context_length=a.context,
        options={"max_connections": 2048},
    )
    engine = anyio.run(build_engine, [config])
    app = create_app(engine, max_streams=None, heartbeat=15.0, tune_gc=_gc_tuned())
    sock, server = _listening_server(app, proto0=a.proto0)
    port = sock.getsockname()[1]
    tool = os.environ.get(PROFILE_ENV, "")
    out = os.environ.get(PROFILE_OUT_ENV, "")
    print(MARK + json.dumps({"port": port, "pinned": where, "profile": tool or None}), flush=True)
    try:
        _run_profiled(server, sock, tool, out)
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    os._exit(0)  # the stdin watcher thread is still blocked in read()


def _listening_server(app: Any, *, proto0: bool) -> tuple[socket.socket, Any]:
    """The loopback socket and the uvicorn server a benchmark child serves ``app`` with (the gateway's settings).

    The socket's proto is IPPROTO_TCP, as uvicorn's own single-process bind (``loop.create_server(host,
    port)``) has it: asyncio sets TCP_NODELAY on accepted connections only then (``proto0``: 0, as
    ``uvicorn --workers`` binds). Also starts the watch that ends the child with its parent.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0 if proto0 else socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    _exit_with_parent()
    cfg = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        # uvicorn's HTTP implementation and loop: "auto", as `deltaflow serve` runs it (httptools and uvloop,
        # which the server extra installs; h11 and asyncio without them), unless
        # GW_HTTP / GW_LOOP say otherwise (e.g. h11 / asyncio)
        http=os.environ.get("GW_HTTP", "auto"),
        loop=os.environ.get("GW_LOOP", "auto"),
        backlog=4096,
        timeout_keep_alive=60,
        timeout_graceful_shutdown=3,
    )
    return sock, uvicorn.Server(cfg)


def _serve_forwarder(argv: list[str]) -> int:
    """A bare forwarder, the reference for the gateway's added TTFT: what any Python proxy on this stack adds.

    A raw ASGI app (no framework) on the gateway's uvicorn (same HTTP implementation, loop, core and
    socket), which posts each request's body unchanged to the upstream's ``/completion`` with aiohttp (the
    gateway's upstream client) and writes every chunk of the answer back as it arrives: no validation,
    template, tokenizer, parsing or framing.
    """
    ap = argparse.ArgumentParser(prog="gateway_overhead _forwarder")
    ap.add_argument("--upstream", required=True)
    a = ap.parse_args(argv)
    _raise_nofile()
    where = _pin(GATEWAY_CORE)
    import aiohttp

    target = a.upstream.rstrip("/") + "/completion"
    state: dict[str, Any] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await state["session"].close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {"content-type": "application/json"}
        async with state["session"].post(target, data=body, headers=headers) as answer:
            await send(
                {
                    "type": "http.response.start",
                    "status": answer.status,
                    "headers": [(b"content-type", answer.headers.get("content-type", "").encode())],
                }
            )
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    sock, server = _listening_server(app, proto0=False)
    print(MARK + json.dumps({"port": sock.getsockname()[1], "pinned": where}), flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    os._exit(0)  # the stdin watcher thread is still blocked in read()


def _run_profiled(server: Any, sock: socket.socket, tool: str, out: str) -> None:
    if tool == "cprofile":
        import cProfile

        prof = cProfile.Profile(time.process_time)
        prof.enable()
        try:
            server.run(sockets=[sock])
        finally:
            prof.disable()
            prof.dump_stats(out)
    elif tool == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0002, async_mode="disabled")
        profiler.start()
        try:
            server.run(sockets=[sock])
        finally:
            session = profiler.stop()
            Path(out).write_text(
                json.dumps(
                    {
                        "categories": _categories(session.root_frame()),
                        "text": profiler.output_text(unicode=False, color=False, show_all=False),
                    }
                ),
                encoding="utf-8",
            )
    else:
        server.run(sockets=[sock])


def _exit_with_parent() -> None:
    """SIGINT this process (uvicorn's graceful exit) when the parent closes our stdin (or dies)."""
    import threading

    def watch() -> None:
        sys.stdin.buffer.read()
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, daemon=True).start()


# Where the gateway's time goes, by the innermost matching frame of the stack (h11 and msgspec belong to
# whoever called them: uvicorn writing, httpcore reading, the decoder).
IDLE = "idle: waiting in epoll (not CPU)"
_CATEGORY_RULES: tuple[tuple[str, str, str], ...] = (
    # (file path part, function name or "", category)
    ("selectors.py", "select", IDLE),
    ("deltaflow/sinks/sse.py", "encode", "SSE encode (SSEEncoder)"),
    ("deltaflow/sinks/sse.py", "write", "SSE write: uvicorn send -> h11 -> socket"),
    ("deltaflow/sinks/sse.py", "emit", "SSE write: uvicorn send -> h11 -> socket"),
    ("uvicorn/protocols/http", "send", "SSE write: uvicorn send -> h11 -> socket"),
    ("uvicorn/protocols/http", "data_received", "uvicorn request reading"),
    ("uvicorn/protocols/http", "", "uvicorn (other)"),
    ("deltaflow/sinks/framing", "", "framing (protocol framers)"),
    ("deltaflow/gateway/upstreams/llamacpp.py", "feed", "upstream JSON decoding (_Decoder.feed, msgspec)"),
    ("deltaflow/gateway/upstreams/_http.py", "decode", "upstream JSON decoding (_Decoder.feed, msgspec)"),
    ("deltaflow/gateway/upstreams/_http.py", "", "upstream reader loop (_http.py, deadlines)"),
    ("deltaflow/gateway/upstreams/_h1.py", "", "upstream reading: _h1 transport / httpx / httpcore / httpx-sse"),
    ("aiohttp/", "", "upstream reading: _h1 transport / httpx / httpcore / httpx-sse"),
    ("httpx_sse", "", "upstream reading: _h1 transport / httpx / httpcore / httpx-sse"),
    ("httpcore", "", "upstream reading: _h1 transport / httpx / httpcore / httpx-sse"),
    ("httpx/", "", "upstream reading: _h1 transport / httpx / httpcore / httpx-sse"),
    ("deltaflow/gateway/engine.py", "generate", "gateway engine: stop-text holding, metrics"),
    ("prometheus_client", "", "gateway engine: stop-text holding, metrics"),
    ("deltaflow/gateway/engine.py", "", "planning: read, render, tokenize"),
    ("deltaflow/prompt", "", "planning: read, render, tokenize"),
    ("deltaflow/constrain", "", "planning: read, render, tokenize"),
    ("deltaflow/server/app.py", "prepare", "planning: read, render, tokenize"),
    ("jinja2", "", "planning: read, render, tokenize"),
    ("deltaflow/pipeline", "", "parsing (pipeline, stages, parsers)"),
    ("deltaflow/stages", "", "parsing (pipeline, stages, parsers)"),
    ("deltaflow/parsers", "", "parsing (pipeline, stages, parsers)"),
    ("deltaflow/_core", "", "parsing (pipeline, stages, parsers)"),
    ("starlette", "", "starlette routing, request"),
    ("anyio", "", "anyio (cancel scopes, task groups, deadlines)"),
    ("asyncio", "", "event loop (asyncio, selectors, sockets)"),
    ("selectors.py", "", "event loop (asyncio, selectors, sockets)"),
)


def _category(path: str, function: str) -> str | None:
    path = path.replace("\\", "/")
    for part, fn, cat in _CATEGORY_RULES:
        if part in path and (not fn or function == fn or function.endswith("." + fn)):
            return cat
    return None


def _categories(root: Any) -> dict[str, float]:
    """Self time of a pyinstrument frame tree, by the category of each frame's innermost categorized ancestor."""
    totals: dict[str, float] = {}
    stack = [(root, "other")]
    while stack:
        frame, cat = stack.pop()
        if frame is None:
            continue
        own = _category(frame.file_path or "", frame.function or "")
        here = own or cat
        totals[here] = totals.get(here, 0.0) + float(
            frame.total_self_time if hasattr(frame, "total_self_time") else frame.self_time
        )
        stack.extend((c, here) for c in frame.children)
    return totals


# -- role: the load generator ---------------------------------------------------------------------------------


class _Acc:
    """Rebuilds a message from one protocol's SSE events; ``feed`` returns the visible characters it added."""

    __slots__ = ("calls", "content", "done", "error", "proto", "reasoning")

    def __init__(self, proto: str) -> None:
        self.proto = proto
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[list[str]] = []
        self.done = False
        self.error: str | None = None

    def feed(self, data: bytes, dec: Callable[[bytes], Any]) -> int:
        p = self.proto
        if p == "chat":
            if data == b"[DONE]":
                self.done = True
                return 0
            obj = dec(data)
            if "error" in obj:
                self.error = str(obj["error"])[:300]
                return 0
            ch = obj.get("choices")
            if not ch:
                return 0
            d = ch[0].get("delta") or {}
            n = 0
            r = d.get("reasoning_content")
            if r:
                self.reasoning.append(r)
                n += len(r)
            c = d.get("content")
            if c:
                self.content.append(c)
                n += len(c)
            for tc in d.get("tool_calls") or ():
                i = tc.get("index", 0)
                while len(self.calls) <= i:
                    self.calls.append(["", ""])
                fn = tc.get("function") or {}
                if fn.get("name"):
                    self.calls[i][0] += fn["name"]
                    n += len(fn["name"])
                if fn.get("arguments"):
                    self.calls[i][1] += fn["arguments"]
                    n += len(fn["arguments"])
            return n
        obj = dec(data)
        if p == "upstream":
            c = obj.get("content") or ""
            if c:
                self.content.append(c)
            if obj.get("error"):
                self.error = str(obj["error"])[:300]
            if obj.get("stop"):
                self.done = True
            return len(c)
        t = obj.get("type")
        if p == "messages":
            if t == "content_block_delta":
                d = obj["delta"]
                dt = d.get("type")
                if dt == "thinking_delta":
                    self.reasoning.append(d["thinking"])
                    return len(d["thinking"])
                if dt == "text_delta":
                    self.content.append(d["text"])
                    return len(d["text"])
                if dt == "input_json_delta":
                    self.calls[-1][1] += d["partial_json"]
                    return len(d["partial_json"])
                return 0
            if t == "content_block_start":
                cb = obj["content_block"]
                if cb.get("type") == "tool_use":
                    self.calls.append([cb["name"], ""])
                    return len(cb["name"])
                return 0
            if t == "message_stop":
                self.done = True
            elif t == "error":
                self.error = str(obj.get("error"))[:300]
            return 0
        # responses
        if t in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self.reasoning.append(obj["delta"])
            return len(obj["delta"])
        if t == "response.output_text.delta":
            self.content.append(obj["delta"])
            return len(obj["delta"])
        if t == "response.function_call_arguments.delta":
            self.calls[-1][1] += obj["delta"]
            return len(obj["delta"])
        if t == "response.output_item.added":
            item = obj.get("item") or {}
            if item.get("type") == "function_call":
                self.calls.append([item.get("name") or "", ""])
                return len(item.get("name") or "")
            return 0
        if t in ("response.completed", "response.incomplete"):
            self.done = True
        elif t in ("response.failed", "error"):
            self.error = str(obj)[:300]
        return 0

    def check(self, script: Script, truncated: int = 0) -> str | None:
        if self.error:
            return f"error event: {self.error}"
        if not self.done:
            return "the stream ended without its final event"
        if truncated:  # the first `truncated` tokens only: the reasoning so far
            want = "".join(script.pieces[:truncated]).removeprefix("<think>")
            got = "".join(self.content if self.proto == "upstream" else self.reasoning)
            got = got.removeprefix("<think>")
            return None if got == want else f"truncated stream: {got!r} != {want!r}"
        if self.proto == "upstream":
            got = "".join(self.content)
            return None if got == script.text else f"upstream text differs ({len(got)} vs {len(script.text)} chars)"
        r, c = "".join(self.reasoning).strip(), "".join(self.content).strip()
        if r != script.reasoning:
            return f"reasoning differs: {r[:60]!r}... ({len(r)} chars, expected {len(script.reasoning)})"
        if c != script.content:
            return f"content differs: {c!r} != {script.content!r}"
        if len(self.calls) != 1:
            return f"{len(self.calls)} tool calls, expected 1: {self.calls!r}"[:300]
        name, raw = self.calls[0]
        try:
            args = json.loads(raw)
        except ValueError:
            return f"call arguments are not JSON: {raw!r}"[:300]
        if (name, args) != script.call:
            return f"call {(name, args)!r} != {script.call!r}"
        return None


class _Result:
    __slots__ = ("acc", "error", "events", "leave", "marks", "status", "t_end", "t_first", "t_sent")

    def __init__(self, acc: _Acc, leave: int | None) -> None:
        self.acc = acc
        self.t_sent = 0.0
        self.t_first = 0.0
        self.t_end = 0.0
        self.marks: list[tuple[float, int]] = []  # (time, visible characters so far) of each output event
        self.events = 0
        self.status = 0
        self.error: str | None = None
        self.leave = leave


class _Client(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection: requests one at a time, chunked SSE responses parsed as they arrive."""

    def __init__(self, dec: Callable[[bytes], Any]) -> None:
        self.dec = dec
        self.transport: Any = None
        self.lost = asyncio.get_running_loop().create_future()
        self.fut: asyncio.Future[_Result] | None = None
        self.res: _Result | None = None
        self.buf = bytearray()
        self.sse = bytearray()
        self.state = 0  # 0 headers, 1 chunk size, 2 chunk data, 3 fixed length body
        self.need = 0
        self.chunked = False
        self.seen = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.fut is not None and not self.fut.done() and self.res is not None:
            self.res.error = self.res.error or "the connection closed mid-response"
            self.fut.set_result(self.res)

    def request(self, raw: bytes, res: _Result) -> asyncio.Future[_Result]:
        self.res = res
        self.fut = asyncio.get_running_loop().create_future()
        self.buf.clear()
        self.sse.clear()
        self.state = 0
        self.seen = 0
        res.t_sent = time.monotonic()
        if self.lost.done():
            res.error = "the connection was closed before the request"
            self.fut.set_result(res)
            return self.fut
        self.transport.write(raw)
        return self.fut

    def _finish(self) -> None:
        res = self.res
        assert res is not None and self.fut is not None
        res.t_end = time.monotonic()
        if not self.fut.done():
            self.fut.set_result(res)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        res = self.res
        if res is None or self.fut is None or self.fut.done():
            return
        buf = self.buf
        buf += data
        while True:
            if self.state == 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buf[:end]).decode("latin-1").lower()
                del buf[: end + 4]
                res.status = int(head.split(" ", 2)[1])
                self.chunked = "transfer-encoding: chunked" in head
                m = re.search(r"content-length: *(\d+)", head)
                if self.chunked:
                    self.state = 1
                else:
                    self.state, self.need = 3, int(m.group(1)) if m else 0
            elif self.state == 1:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b";")[0], 16)
                if size == 0:
                    if len(buf) < end + 4:
                        return
                    del buf[: end + 4]
                    self._events(now, res, final=True)
                    self._finish()
                    return
                del buf[: end + 2]
                self.need = size
                self.state = 2
            elif self.state == 2:
                if len(buf) < self.need + 2:
                    return
                self.sse += buf[: self.need]
                del buf[: self.need + 2]
                self.state = 1
                if self._events(now, res):
                    return
            else:
                if len(buf) < self.need:
                    return
                self.sse += buf[: self.need]
                del buf[: self.need]
                if res.status != 200:
                    res.error = f"HTTP {res.status}: {bytes(self.sse[:300]).decode(errors='replace')}"
                else:
                    self._events(now, res, final=True)
                self._finish()
                return

    def _events(self, now: float, res: _Result, final: bool = False) -> bool:
        """Handle the complete events in the SSE buffer; True when the client left."""
        sse = self.sse
        start = 0
        acc = res.acc
        while True:
            end = sse.find(b"\n\n", start)
            if end < 0:
                break
            block = bytes(sse[start:end])
            start = end + 2
            data = None
            for line in block.split(b"\n"):
                if line.startswith(b"data: "):
                    data = line[6:]
            if data is None:
                continue
            res.events += 1
            try:
                n = acc.feed(data, self.dec)
            except Exception as exc:  # noqa: BLE001 - a malformed event is a failed stream, reported
                res.error = f"undecodable event {data[:120]!r}: {exc!r}"
                n = 0
            if n:
                if not self.seen:
                    res.t_first = now
                self.seen += n
                res.marks.append((now, self.seen))
                if res.leave is not None and len(res.marks) >= res.leave:
                    del sse[:start]
                    self.transport.close()
                    res.t_end = now
                    if self.fut is not None and not self.fut.done():
                        self.fut.set_result(res)
                    return True
        del sse[:start]
        if final and res.status != 200 and res.error is None:
            res.error = f"HTTP {res.status}"
        return False


def _pct(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def _summary(xs: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    if not xs:
        return {}
    return {
        "median": statistics.median(xs) * scale,
        "p99": _pct(xs, 99) * scale,
        "mean": statistics.fmean(xs) * scale,
        "n": len(xs),
    }


async def _open(port: int, dec: Callable[[bytes], Any]) -> _Client:
    loop = asyncio.get_running_loop()
    for attempt in range(20):
        try:
            _, client = await loop.create_connection(lambda: _Client(dec), "127.0.0.1", port)
            return client
        except OSError:
            await asyncio.sleep(0.05 * (attempt + 1))
    raise OSError(f"cannot connect to 127.0.0.1:{port}")


def _bodies(spec: dict[str, Any], count: int) -> list[bytes]:
    """The requests of a job: one per stream, each tagged for the upstream's send log."""
    import msgspec

    proto, port, path = spec["protocol"], spec["port"], PATHS[spec["protocol"]]
    out = []
    if not spec.get("tag", True) and proto != "upstream":
        one = agent_body() if spec.get("prompt") == "agent" else short_body(proto)
        return [_http_request(path, msgspec.json.encode(one), port)] * count
    for i in range(count):
        if proto == "upstream":
            body = dict(spec["upstream_body"])
            body["seed"] = i
        elif spec.get("prompt") == "agent":
            body = agent_body(str(i) if spec.get("tag", True) else "")
        else:
            body = short_body(proto, str(i) if spec.get("tag", True) else "")
        out.append(_http_request(path, msgspec.json.encode(body), port))
    return out


async def _loadgen_streams(spec: dict[str, Any], script: Script) -> dict[str, Any]:
    """N connections, each running its share of ``total`` requests one after another; every stream checked."""
    import msgspec

    dec = msgspec.json.decode
    n, total = spec["concurrency"], spec["total"]
    per = max(1, total // n)
    bodies = _bodies(spec, n * per)
    gw, up = spec.get("gw_pid"), spec.get("up_pid")
    clients = await asyncio.gather(*(_open(spec["port"], dec) for _ in range(n)))
    results: list[_Result] = []
    peak = [rss_of(gw) if gw else 0]
    base_rss = peak[0]
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            if gw:
                peak[0] = max(peak[0], rss_of(gw))
            try:
                await asyncio.wait_for(done.wait(), 0.05)
            except asyncio.TimeoutError:
                pass

    ramp = float(spec.get("ramp", 0.0))

    async def worker(j: int, client: _Client) -> None:
        if ramp:  # stagger the starts: a burst of 1,000 new streams makes the gateway's upstream connects time out
            await asyncio.sleep(ramp * j / n)
        for r in range(per):
            res = _Result(_Acc(spec["protocol"]), None)
            await client.request(bodies[j * per + r], res)
            results.append(res)

    sampler = asyncio.ensure_future(sample())
    gc.collect()
    gc.disable()
    cpu0 = {"gw": cpu_seconds(gw) if gw else 0.0, "up": cpu_seconds(up) if up else 0.0, "lg": time.process_time()}
    w0 = time.monotonic()
    await asyncio.gather(*(worker(j, c) for j, c in enumerate(clients)))
    wall = time.monotonic() - w0
    cpu = {
        "gw": (cpu_seconds(gw) - cpu0["gw"]) if gw else None,
        "up": (cpu_seconds(up) - cpu0["up"]) if up else None,
        "lg": time.process_time() - cpu0["lg"],
    }
    gc.enable()
    done.set()
    await sampler
    for c in clients:
        c.transport.close()
    bad = []
    for r in results:
        problem = (
            r.error or (f"HTTP {r.status}" if r.status != 200 else None) or r.acc.check(script, spec.get("truncate", 0))
        )
        if problem:
            bad.append(problem)
    out: dict[str, Any] = {
        "streams": len(results),
        "concurrency": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "failed": len(bad),
        "first_failure": bad[0] if bad else None,
        "upstream_tokens": len(results) * len(script.ids),
        "rss_base": base_rss,
        "rss_peak": peak[0],
    }
    if bad:
        return out
    # time to first token: from the request's last byte written to the first event with visible output; for the
    # upstream read directly, to the event of the first token that makes output visible (the same token). An
    # answer cut after its first tokens (truncate) has a time to first token, but no gaps to speak of.
    ttft = []
    gaps = []
    truncated = bool(spec.get("truncate"))
    need = sum(len(p) for p in script.pieces[: script.first_visible + 1])
    for r in results:
        if spec["protocol"] == "upstream":
            first = next(t for t, c in r.marks if c >= need)
        else:
            first = r.t_first
        ttft.append(first - r.t_sent)
        if len(r.marks) > 1 and not truncated:
            gaps.append((r.marks[-1][0] - first) / max(1, len(script.ids) - script.first_visible - 1))
    out["ttft"] = _summary(ttft, 1e3)
    out["ttft_all_ms"] = [x * 1e3 for x in ttft] if len(ttft) <= 2000 else None
    out["gap_us"] = _summary(gaps, 1e6)
    if spec.get("sendlog"):
        out["delay_ms"] = await _delays(spec, script, results, dec)
    return out


async def _delays(spec: dict[str, Any], script: Script, results: list[_Result], dec: Any) -> dict[str, Any]:
    """Each token's delay: the client's read time minus the upstream's write time of the token it shows."""
    import bisect

    log = await _get(spec["up_port"], "/_bench/sendlog")
    delays: list[float] = []
    proto = spec["protocol"]
    cum_text = []
    total = 0
    for p in script.pieces:
        total += len(p)
        cum_text.append(total)
    marks_key = cum_text if proto == "upstream" else script.vis
    for i, r in enumerate(results):
        sent = log.get(str(i))
        if not sent or len(sent) < len(script.ids):
            continue
        for t, c in r.marks:
            k = bisect.bisect_left(marks_key, c)
            if k < len(script.ids):
                delays.append(t - sent[k])
    return _summary(delays, 1e3)


async def _get(port: int, path: str, body: Any = None) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = json.dumps(body or {}).encode()
    writer.write(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(raw)}\r\n\r\n".encode() + raw)
    head = await reader.readuntil(b"\r\n\r\n")
    m = re.search(rb"content-length: *(\d+)", head.lower())
    data = await reader.readexactly(int(m.group(1))) if m else b""
    writer.close()
    return json.loads(data) if data else None


async def _stats(port: int) -> dict[str, int]:
    got = await _get(port, "/_bench/stats")
    assert isinstance(got, dict)
    return got


async def _loadgen_idle(spec: dict[str, Any], script: Script) -> dict[str, Any]:
    """N streams held open on a stalled upstream: the gateway's RSS per stream; then they leave."""
    import msgspec

    dec = msgspec.json.decode
    n, gw, up_port = spec["concurrency"], spec["gw_pid"], spec["up_port"]
    await asyncio.sleep(0.5)
    before = rss_of(gw)
    bodies = _bodies(spec, n)
    clients = await asyncio.gather(*(_open(spec["port"], dec) for _ in range(n)))
    results = [_Result(_Acc(spec["protocol"]), None) for _ in range(n)]
    futs = [c.request(b, r) for c, b, r in zip(clients, bodies, results, strict=True)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = await _stats(up_port)
        if st["stalled"] >= n and all(r.status for r in results):
            break
        await asyncio.sleep(0.1)
    else:
        return {"failed": n, "first_failure": f"only {st['stalled']} of {n} streams reached the upstream in 60 s"}
    await asyncio.sleep(1.0)
    opened = rss_of(gw)
    for c in clients:
        c.transport.close()
    await asyncio.gather(*futs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (await _stats(up_port))["stalled"] > 0:
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    after = rss_of(gw)
    return {
        "streams": n,
        "failed": 0,
        "rss_before": before,
        "rss_open": opened,
        "rss_after": after,
        "kb_per_stream": (opened - before) / n / 1024,
    }


async def _loadgen_soak(spec: dict[str, Any], script: Script) -> dict[str, Any]:
    """``seconds`` of ``concurrency`` streams, each client leaving at a random point (or reading to the end)."""
    import msgspec

    dec = msgspec.json.decode
    seconds, n, gw = spec["seconds"], spec["concurrency"], spec["gw_pid"]
    rng = random.Random(11)
    start = time.monotonic()
    series: list[tuple[float, int]] = [(0.0, rss_of(gw))]
    counts = {"finished": 0, "left": 0, "failed": 0}
    first_failure: list[str] = []
    stop_at = start + seconds

    async def worker(j: int) -> None:
        i = j
        while time.monotonic() < stop_at:
            client = await _open(spec["port"], dec)
            leave = None if rng.random() < 0.4 else rng.randint(0, 120)
            res = _Result(_Acc(spec["protocol"]), leave)
            body = short_body(spec["protocol"], str(i))
            i += n
            if leave == 0:  # gone right after the request
                client.transport.write(_http_request(PATHS[spec["protocol"]], msgspec.json.encode(body), spec["port"]))
                await asyncio.sleep(rng.random() * 0.01)
                client.transport.close()
                counts["left"] += 1
                continue
            await client.request(_http_request(PATHS[spec["protocol"]], msgspec.json.encode(body), spec["port"]), res)
            client.transport.close()
            if leave is not None and len(res.marks) >= leave:
                counts["left"] += 1
            else:
                problem = res.error or res.acc.check(script)
                if problem:
                    counts["failed"] += 1
                    if not first_failure:
                        first_failure.append(problem)
                else:
                    counts["finished"] += 1

    async def sample() -> None:
        while time.monotonic() < stop_at:
            await asyncio.sleep(min(1.0, max(0.05, seconds / 60)))
            series.append((time.monotonic() - start, rss_of(gw)))

    await asyncio.gather(sample(), *(worker(j) for j in range(n)))
    await asyncio.sleep(2.0)
    series.append((time.monotonic() - start, rss_of(gw)))
    metrics = await _metrics_in_flight(spec["port"])
    return {
        "seconds": seconds,
        "concurrency": n,
        **counts,
        "first_failure": first_failure[0] if first_failure else None,
        "rss_series": series,
        "in_flight_after": metrics,
    }


async def _metrics_in_flight(port: int) -> float | None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    data = await reader.read()
    writer.close()
    m = re.search(rb"deltaflow_streams_in_flight\{[^}]*\} ([0-9.e+-]+)", data)
    return float(m.group(1)) if m else None


def _loadgen(argv: list[str]) -> int:
    _raise_nofile()
    where = _pin(OTHER_CORE)
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    script = make_script()
    job = {"streams": _loadgen_streams, "idle": _loadgen_idle, "soak": _loadgen_soak}[spec["kind"]]
    out = asyncio.run(job(spec, script))
    out["pinned"] = where
    print(MARK + json.dumps(out), flush=True)
    return 0


# -- the orchestrator -----------------------------------------------------------------------------------------


class Child:
    """A child process of this module (a role), reporting one JSON line on stdout first."""

    def __init__(self, role: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.gateway_overhead", role, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env={**os.environ, **(env or {})},
        )
        self.info = _read_mark(self.proc, timeout)
        self.pid = self.proc.pid

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def _read_mark(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    import selectors

    assert proc.stdout is not None
    buf = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            for line in buf.split(b"\n")[:-1]:
                if line.startswith(MARK.encode()):
                    result: dict[str, Any] = json.loads(line[len(MARK) :])
                    return result
            buf = buf[buf.rfind(b"\n") + 1 :] if b"\n" in buf else buf
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise RuntimeError(f"a benchmark child reported nothing in {timeout:.0f} s")
            if sel.select(timeout=left):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    proc.wait(5)
                    raise RuntimeError(f"a benchmark child exited with code {proc.returncode} before reporting")
                buf += chunk


def run_loadgen(spec: dict[str, Any], timeout: float = 900.0) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(spec, f)
        path = f.name
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.gateway_overhead", "_loadgen", path],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        try:
            return _read_mark(proc, timeout)
        finally:
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()
    finally:
        os.unlink(path)


def control(port: int, path: str, body: Any = None) -> Any:
    return asyncio.run(_get(port, path, body))


@dataclass
class Env:
    script: Script
    up: Child
    gw: Child
    quick: bool
    upstream_bodies: dict[str, Any]

    @property
    def up_port(self) -> int:
        return int(self.up.info["port"])

    @property
    def gw_port(self) -> int:
        return int(self.gw.info["port"])

    def mode(self, mode: str, pace: float = PACE_S, log: bool = False, truncate: int = 0) -> None:
        control(self.up_port, "/_bench/mode", {"mode": mode, "pace": pace, "log": log, "truncate": truncate})

    def streams(
        self,
        target: str,
        protocol: str,
        n: int,
        total: int,
        *,
        prompt: str = "short",
        tag: bool = True,
        sendlog: bool = False,
        truncate: int = 0,
        ramp: float = 0.0,
        via: Child | None = None,
    ) -> dict[str, Any]:
        """Run one cell; ``via``: a server in the gateway's place that speaks the upstream's protocol
        (the forwarder), its CPU counted as the gateway's."""
        gateway = target == "gateway"
        port = self.gw_port if gateway else self.up_port if via is None else int(via.info["port"])
        spec = {
            "kind": "streams",
            "protocol": protocol if gateway else "upstream",
            "port": port,
            "concurrency": n,
            "total": total,
            "prompt": prompt,
            "tag": tag,
            "gw_pid": self.gw.pid if gateway else via.pid if via is not None else None,
            "up_pid": self.up.pid,
            "up_port": self.up_port,
            "sendlog": sendlog,
            "truncate": truncate,
            "ramp": ramp,
            "upstream_body": self.upstream_bodies.get(prompt),
        }
        return run_loadgen(spec)


def verify(env: Env) -> list[dict[str, Any]]:
    """One request per protocol through the gateway must rebuild exactly the replayed answer."""
    env.mode("full")
    rows = []
    for proto in PROTOCOLS:
        r = env.streams("gateway", proto, 1, 1, tag=False)
        if r["failed"]:
            sys.exit(f"gateway benchmark: verification failed for {proto}: {r['first_failure']}")
        rows.append({"protocol": proto, "status": "OK"})
        _say(
            f"  verified {proto}: reasoning {len(env.script.reasoning)} chars, content, 1 call "
            f"{env.script.call[0]}({json.dumps(env.script.call[1])})"
        )
    for prompt in ("short", "agent"):
        r = env.streams("gateway", "chat", 1, 1, prompt=prompt, tag=False)
        if r["failed"]:
            sys.exit(f"gateway benchmark: verification failed for the {prompt} prompt: {r['first_failure']}")
        env.upstream_bodies[prompt] = control(env.up_port, "/_bench/last")
    r = env.streams("upstream", "upstream", 1, 1)
    if r["failed"]:
        sys.exit(f"gateway benchmark: the direct upstream stream is wrong: {r['first_failure']}")
    return rows


def _cell_row(kind: str, target: str, proto: str, n: int, r: dict[str, Any]) -> dict[str, Any]:
    row = {"kind": kind, "target": target, "protocol": proto, "concurrency": n}
    if r.get("failed"):
        row.update(status="FAIL", error=r.get("first_failure"))
        return row
    cpu = r["cpu_s"]
    toks = r["upstream_tokens"]
    row.update(
        status="OK",
        streams=r["streams"],
        wall_s=r["wall_s"],
        tokens=toks,
        tokens_per_s=toks / r["wall_s"] if r["wall_s"] else None,
        gw_cpu_us_per_token=cpu["gw"] / toks * 1e6 if cpu["gw"] is not None else None,
        gw_tokens_per_cpu_s=toks / cpu["gw"] if cpu["gw"] else None,
        gw_cpu_share=cpu["gw"] / r["wall_s"] if cpu["gw"] is not None and r["wall_s"] else None,
        up_cpu_us_per_token=cpu["up"] / toks * 1e6 if cpu["up"] is not None else None,
        lg_cpu_us_per_token=cpu["lg"] / toks * 1e6,
        ttft_ms=r.get("ttft"),
        gap_us=r.get("gap_us"),
        delay_ms=r.get("delay_ms"),
        rss_growth_kb_per_stream=max(0, r["rss_peak"] - r["rss_base"]) / 1024 / n if target == "gateway" else None,
    )
    return row


def measure_ttft(env: Env) -> list[dict[str, Any]]:
    runs = 30 if env.quick else 200
    env.mode("full")
    rows = []
    cases = [("short", p) for p in PROTOCOLS] + [("agent", "chat")]
    floors: dict[str, dict[str, Any]] = {}
    for prompt in ("short", "agent"):
        r = env.streams("upstream", "upstream", 1, runs, prompt=prompt)
        floors[prompt] = _cell_row("ttft", "upstream", "upstream", 1, r) | {"prompt": prompt}
        rows.append(floors[prompt])
        _say(f"  ttft floor {prompt}: {_fmt_ms(floors[prompt].get('ttft_ms'))}")
    # The reference: a bare forwarder on the same stack and core (see _serve_forwarder), the short prompt's body.
    fwd = Child("_forwarder", "--upstream", f"http://127.0.0.1:{env.up_port}")
    try:
        r = env.streams("forwarder", "upstream", 1, runs, via=fwd)
    finally:
        fwd.stop()
    row = _ttft_added(_cell_row("ttft", "forwarder", "upstream", 1, r) | {"prompt": "short"}, floors["short"])
    rows.append(row)
    _say(f"  ttft short through a bare forwarder: {_fmt_ms(row.get('ttft_ms'))} added {row.get('added_ms')}")
    for prompt, proto in cases:
        # the same body every time (one conversation, repeated): the template is compiled once, then cached
        r = env.streams("gateway", proto, 1, runs, prompt=prompt, tag=False)
        row = _ttft_added(_cell_row("ttft", "gateway", proto, 1, r) | {"prompt": prompt}, floors[prompt])
        rows.append(row)
        _say(f"  ttft {prompt} {proto}: {_fmt_ms(row.get('ttft_ms'))} added {row.get('added_ms')}")
    # Answers cut right after the first tokens that show output (the upstream sends them, then its final event):
    # the gateway's CPU time to its first token, robust on a shared machine (CPU per request, all of it), and
    # the time to first token without the rest of the answer. At full speed the upstream writes the other 250
    # tokens as fast as they are read, on the core it shares with the load generator, which then reads the
    # first token late: a faster gateway made that figure worse while its own first write came no later
    # (measured with timestamps in the gateway). Cut, nothing runs after the first tokens but their delivery.
    k = env.script.first_visible + 3
    env.mode("full", truncate=k)
    cut_floors = {}
    for prompt in ("short", "agent"):
        r = env.streams("upstream", "upstream", 1, runs, prompt=prompt, truncate=k)
        cut_floors[prompt] = _cell_row("ttft", "upstream", "upstream", 1, r)
        _cut_into(floors[prompt], cut_floors[prompt], None)
        _say(f"  ttft floor {prompt}, cut after {k} tokens: {_fmt_ms(cut_floors[prompt].get('ttft_ms'))}")
    fwd = Child("_forwarder", "--upstream", f"http://127.0.0.1:{env.up_port}")
    try:
        r = env.streams("forwarder", "upstream", 1, runs, via=fwd, truncate=k)
    finally:
        fwd.stop()
    for row in rows:
        if row["target"] == "forwarder":
            _cut_into(row, _cell_row("ttft", "forwarder", "upstream", 1, r), cut_floors["short"])
            _say(f"  ttft short through a bare forwarder, cut: {_fmt_ms(row.get('cut_ttft_ms'))}"
                 f" added {row.get('cut_added_ms')}")
    for prompt, proto in cases:
        r = env.streams("gateway", proto, 1, runs, prompt=prompt, tag=False, truncate=k)
        cpu = r["cpu_s"]["gw"]
        for row in rows:
            if row["target"] == "gateway" and row["prompt"] == prompt and row["protocol"] == proto:
                row["first_token_cpu_ms"] = cpu / r["streams"] * 1e3 if not r["failed"] else None
                row["first_token_tokens"] = k
                if r["failed"]:
                    row["first_token_error"] = r["first_failure"]
                _cut_into(row, _cell_row("ttft", "gateway", proto, 1, r), cut_floors[prompt])
                _say(f"  ttft {prompt} {proto}, cut: {_fmt_ms(row.get('cut_ttft_ms'))} added"
                     f" {row.get('cut_added_ms')}; CPU {row['first_token_cpu_ms']} ms per request ({k} tokens)")
    env.mode("full")
    # uvicorn --workers / --fd / --reload bind with Config.bind_socket(): proto 0, no TCP_NODELAY (a separate gateway)
    gw0 = Child("_gateway", "--upstream", f"http://127.0.0.1:{env.up_port}", "--proto0")
    try:
        alt = Env(env.script, env.up, gw0, env.quick, env.upstream_bodies)
        r = alt.streams("gateway", "chat", 1, runs, tag=False)
        row = _cell_row("ttft", "gateway", "chat", 1, r) | {"prompt": "short", "variant": "proto0"}
        rows.append(_ttft_added(row, floors["short"]))
        _say(f"  ttft short chat, socket as uvicorn --workers binds it: {_fmt_ms(row.get('ttft_ms'))}")
    finally:
        gw0.stop()
    return rows


def _cut_into(row: dict[str, Any], cut: dict[str, Any], floor: dict[str, Any] | None) -> None:
    """Put the TTFT of the same cell with answers cut after their first tokens into ``row`` (``cut_ttft_ms``),
    and, given the cut floor, what it adds (``cut_added_ms``)."""
    if floor is not None:
        _ttft_added(cut, floor)
    row["cut_ttft_ms"] = cut.get("ttft_ms") if cut.get("status") == "OK" else None
    row["cut_added_ms"], row["cut_ratio"] = cut.get("added_ms"), cut.get("ratio")


def _ttft_added(row: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its TTFT added to the floor's (median and p99) and their ratio, when both cells passed."""
    if row["status"] == "OK" and floor["status"] == "OK":
        row["added_ms"] = {q: row["ttft_ms"][q] - floor["ttft_ms"][q] for q in ("median", "p99")}
        row["ratio"] = row["ttft_ms"]["median"] / floor["ttft_ms"]["median"]
    return row


def _fmt_ms(s: dict[str, float] | None) -> str:
    return "-" if not s else f"median {s['median']:.3f} ms, p99 {s['p99']:.3f} ms"


def measure_scale(env: Env, ns: Sequence[int], paced: bool) -> list[dict[str, Any]]:
    rows = []
    env.mode("paced" if paced else "full", log=paced)
    kind = "paced" if paced else "full"
    # At full speed, also the bare forwarder (the reference: see _serve_forwarder) in the gateway's place.
    fwd = None if paced else Child("_forwarder", "--upstream", f"http://127.0.0.1:{env.up_port}")
    try:
        for n in ns:
            rows += _scale_cells(env, n, kind, fwd)
    finally:
        if fwd is not None:
            fwd.stop()
    env.mode("full", log=False)
    return rows


def _scale_cells(env: Env, n: int, kind: str, fwd: Child | None) -> list[dict[str, Any]]:
    """The cells of one concurrency: the floor, the forwarder (when given), the gateway in each protocol."""
    paced = kind == "paced"
    rows = []
    # one wave of n streams (256 tokens each); one stream at a time: 20 (--quick) or 100 in a row
    total = n if n > 1 or paced else (20 if env.quick else 100)
    ramp = RAMP_S if n >= 1000 else 0.0
    r = env.streams("upstream", "upstream", n, total, sendlog=paced, ramp=ramp)
    floor = _cell_row(kind, "upstream", "upstream", n, r) | {"ramp_s": ramp}
    rows.append(floor)
    _say(f"  {kind} floor n={n}: {_brief(floor)}")
    if fwd is not None:
        r = env.streams("forwarder", "upstream", n, total, ramp=ramp, via=fwd)
        row = _cell_row(kind, "forwarder", "upstream", n, r) | {"ramp_s": ramp}
        rows.append(row)
        _say(f"  {kind} bare forwarder n={n}: {_brief(row)}")
    for proto in PROTOCOLS:
        r = env.streams("gateway", proto, n, total, sendlog=paced, ramp=ramp)
        row = _cell_row(kind, "gateway", proto, n, r) | {"ramp_s": ramp}
        if row["status"] == "OK" and floor["status"] == "OK":
            if paced and row.get("delay_ms") and floor.get("delay_ms"):
                row["added_delay_ms"] = {q: row["delay_ms"][q] - floor["delay_ms"][q] for q in ("median", "p99")}
            if not paced and row.get("gap_us") and floor.get("gap_us"):
                row["added_gap_us"] = row["gap_us"]["median"] - floor["gap_us"]["median"]
        rows.append(row)
        _say(f"  {kind} {proto} n={n}: {_brief(row)}")
    return rows


def _brief(row: dict[str, Any]) -> str:
    if row["status"] != "OK":
        return f"FAIL {row.get('error')}"
    parts = [f"{row['tokens_per_s']:,.0f} tok/s wall"]
    if row.get("gw_cpu_us_per_token") is not None:
        parts.append(f"gateway {row['gw_cpu_us_per_token']:.1f} us CPU/token ({row['gw_cpu_share'] * 100:.0f}% core)")
    parts.append(f"upstream {row['up_cpu_us_per_token']:.1f} + loadgen {row['lg_cpu_us_per_token']:.1f} us CPU/token")
    if row.get("gap_us"):
        parts.append(f"gap {row['gap_us']['median']:.1f} us")
    if row.get("delay_ms"):
        parts.append(f"delay median {row['delay_ms']['median']:.3f} p99 {row['delay_ms']['p99']:.3f} ms")
    return ", ".join(parts)


def measure_memory(env: Env, n: int) -> list[dict[str, Any]]:
    """On a fresh gateway process (warmed by three requests): a used one reuses the memory its earlier streams freed."""
    fresh = Child("_gateway", "--upstream", f"http://127.0.0.1:{env.up_port}")
    try:
        env = Env(env.script, env.up, fresh, env.quick, env.upstream_bodies)
        env.mode("full")
        env.streams("gateway", "chat", 1, 3, tag=False)
        return _idle_rows(env, n)
    finally:
        fresh.stop()


def _idle_rows(env: Env, n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    env.mode("stall")
    r = run_loadgen(
        {
            "kind": "idle",
            "protocol": "chat",
            "port": env.gw_port,
            "concurrency": n,
            "gw_pid": env.gw.pid,
            "up_port": env.up_port,
            "tag": True,
            "prompt": "short",
        }
    )
    env.mode("full")
    rows.append(
        {"kind": "memory", "what": "idle", "concurrency": n, **r, "status": "FAIL" if r.get("failed") else "OK"}
    )
    _say(
        f"  idle streams n={n}: {r.get('kb_per_stream', float('nan')):.1f} KB/stream RSS "
        f"({r.get('rss_before', 0) / 2**20:.1f} -> {r.get('rss_open', 0) / 2**20:.1f} -> "
        f"{r.get('rss_after', 0) / 2**20:.1f} MB)"
    )
    return rows


def measure_soak(env: Env, seconds: float, concurrency: int) -> dict[str, Any]:
    env.mode("paced", pace=0.002)
    r = run_loadgen(
        {
            "kind": "soak",
            "protocol": "chat",
            "port": env.gw_port,
            "concurrency": concurrency,
            "gw_pid": env.gw.pid,
            "up_port": env.up_port,
            "seconds": seconds,
        },
        timeout=seconds + 300,
    )
    env.mode("full")
    series = r["rss_series"]
    half = [p for p in series if p[0] >= seconds / 2]
    slope = None
    if len(half) >= 3:
        xs, ys = [p[0] for p in half], [p[1] for p in half]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 60 / 2**20 if var else None
    r["slope_mb_per_min_second_half"] = slope
    _say(
        f"  soak {seconds:.0f} s: {r['finished']} finished, {r['left']} left early, {r['failed']} failed; "
        f"RSS {series[0][1] / 2**20:.1f} -> {series[-1][1] / 2**20:.1f} MB, second-half slope "
        f"{slope if slope is None else round(slope, 3)} MB/min, in flight after: {r['in_flight_after']}"
    )
    return r


# -- the real engine ------------------------------------------------------------------------------------------


def measure_engine(env: Env, quick: bool) -> dict[str, Any]:
    """TTFT through the gateway vs direct, against llama.cpp (xllamacpp) on the tiny random Qwen3 model."""
    import importlib.util

    missing = [m for m in ("xllamacpp", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        return {"skipped": f"not installed: {', '.join(missing)} (pip install -e '.[engine]')"}
    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    try:
        from gguf_models import write_tiny_gguf
        from llamacpp import LlamaCppServer
    finally:
        sys.path.pop(0)
    runs = 20 if quick else 100
    body_chat = {
        "model": MODEL,
        "stream": True,
        "max_tokens": 16,
        "temperature": 0.0,
        "seed": 1,
        "chat_template_kwargs": {"enable_thinking": False},
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the weather in Paris this weekend?"},
        ],
    }
    with tempfile.TemporaryDirectory(prefix="gw-bench-") as tmp:
        model = write_tiny_gguf(MODEL, Path(tmp) / "tiny-qwen3.gguf", shared=_shared())
        with LlamaCppServer(model, n_ctx=4096, n_parallel=1, threads=1) as server:
            engine_pid = server.pid
            gw = Child("_gateway", "--upstream", server.base_url)
            try:
                # the direct floor sends what the gateway sends: record it from the fake upstream's gateway
                import msgspec

                port = env.gw_port
                raw = _http_request(PATHS["chat"], msgspec.json.encode(body_chat), port)
                asyncio.run(_raw_once(port, raw))
                upstream_body = control(env.up_port, "/_bench/last")
                url = server.base_url
                eport = int(url.rsplit(":", 1)[1])
                direct = asyncio.run(_engine_ttft(eport, "/completion", upstream_body, runs, direct=True))
                through = asyncio.run(_engine_ttft(int(gw.info["port"]), PATHS["chat"], body_chat, runs, direct=False))
                gw_cpu = cpu_seconds(gw.pid)
            finally:
                gw.stop()
            del engine_pid
    out = {
        "model": "tiny random Qwen3 GGUF (2 layers, 64 hidden; tests/engine/gguf_models.py), 1 thread, core 1",
        "runs": runs,
        "direct_ms": _summary(direct, 1e3),
        "gateway_ms": _summary(through, 1e3),
        "gateway_cpu_s_total": gw_cpu,
    }
    out["added_ms"] = {q: out["gateway_ms"][q] - out["direct_ms"][q] for q in ("median", "p99")}
    out["ratio"] = out["gateway_ms"]["median"] / out["direct_ms"]["median"]
    _say(f"  real engine: direct {_fmt_ms(out['direct_ms'])}, gateway {_fmt_ms(out['gateway_ms'])}")
    return out


async def _raw_once(port: int, raw: bytes) -> None:
    import msgspec

    c = await _open(port, msgspec.json.decode)
    await c.request(raw, _Result(_Acc("chat"), None))
    c.transport.close()


async def _engine_ttft(port: int, path: str, body: dict[str, Any], runs: int, direct: bool) -> list[float]:
    """Sequential streamed requests on one kept-alive connection: seconds to the first non-empty text."""
    import msgspec

    c = await _open(port, msgspec.json.decode)
    raw = _http_request(path, msgspec.json.encode(body), port)
    out = []
    for i in range(runs + 1):
        for attempt in range(2):
            if c.lost.done():  # llama.cpp closes a connection after 100 requests (keep-alive max=100)
                c = await _open(port, msgspec.json.decode)
            res = await c.request(raw, _Result(_Acc("upstream" if direct else "chat"), None))
            if not (res.error and res.events == 0 and attempt == 0):
                break
        if res.error or res.status != 200 or not res.marks:
            raise RuntimeError(
                f"real engine request {i} ({'direct' if direct else 'through the gateway'}) failed: "
                f"{res.error or res.status}, HTTP {res.status}, {res.events} events, "
                f"{len(res.marks)} with output"
            )
        if i:
            out.append(res.t_first - res.t_sent)
    c.transport.close()
    return out


# -- profile --------------------------------------------------------------------------------------------------


def profile_cell(script: Script, protocol: str, n: int, tool: str, top: int, quick: bool) -> dict[str, Any]:
    """Run one full-speed cell with the gateway under a profiler; return its top functions and categories."""
    out_path = tempfile.mktemp(prefix="gw-profile-", suffix=".json" if tool == "pyinstrument" else ".pstats")
    up = Child("_upstream")
    gw = Child(
        "_gateway",
        "--upstream",
        f"http://127.0.0.1:{up.info['port']}",
        env={PROFILE_ENV: tool, PROFILE_OUT_ENV: out_path},
    )
    try:
        env = Env(script, up, gw, quick, {})
        env.mode("full")
        # warm up (template compiled, pools open), then the cell
        env.streams("gateway", protocol, 1, 3, tag=False)
        r = env.streams("gateway", protocol, n, n * (1 if n >= 1000 else 3))
        row = _cell_row("profile", "gateway", protocol, n, r)
    finally:
        gw.stop(timeout=60)
        up.stop()
    result: dict[str, Any] = {"protocol": protocol, "concurrency": n, "tool": tool, "cell": row}
    if tool == "pyinstrument":
        data = json.loads(Path(out_path).read_text(encoding="utf-8"))
        cats = data["categories"]
        total = sum(cats.values()) or 1.0
        idle = cats.pop(IDLE, 0.0)
        total = sum(cats.values()) or 1.0
        result["idle_share_of_wall"] = idle / (idle + total)
        result["categories"] = sorted(((k, v / total) for k, v in cats.items()), key=lambda kv: -kv[1])
        result["text"] = data["text"]
    else:
        import io
        import pstats

        st = pstats.Stats(out_path)
        buf = io.StringIO()
        st.stream = buf
        st.sort_stats("tottime").print_stats(top)
        result["text"] = buf.getvalue()
        cats: dict[str, float] = {}
        for (path, _line, fn), (_cc, _nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
            cat = _category(path, fn) or ("h11 (reading and writing)" if "/h11/" in path else "other")
            cats[cat] = cats.get(cat, 0.0) + tt
        total = sum(cats.values()) or 1.0
        result["categories"] = sorted(((k, v / total) for k, v in cats.items()), key=lambda kv: -kv[1])
    keep = os.environ.get("DELTAFLOW_BENCH_KEEP_PROFILE")
    if keep:  # the raw profile, for a closer look (pstats or pyinstrument's JSON)
        os.replace(out_path, keep)
    else:
        os.unlink(out_path)
    return result


# -- report ---------------------------------------------------------------------------------------------------


def _f(x: Any, fmt: str = ".2f", none: str = "-") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return none
    return format(x, fmt)


def _verdict(value: float | None, target: float, higher_is_better: bool = False) -> str:
    if value is None:
        return "-"
    ok = value >= target if higher_is_better else value <= target
    return "meets" if ok else "misses"


def _upstream_transport(report: dict[str, Any]) -> str:
    """The gateway's upstream transport in a report: deltaflow's own HTTP/1.1 client (httptools' parser) since
    commit 168491d, aiohttp's client before (the reports made then name its version only)."""
    versions = report["versions"]
    if "upstream_transport" in report:
        return str(report["upstream_transport"])
    return f"aiohttp {versions.get('aiohttp')}"


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"# Gateway overhead — {report['date']}", ""]
    lines.append(
        f"`{report['command']}` — {m['cpu']}, {m['cores']} cores, Python {m['python']}, "
        f"deltaflow {m.get('deltaflow_commit')}; uvicorn {report['versions'].get('uvicorn')} "
        f"({report.get('server_stack', 'h11, asyncio loop')}), httpx {report['versions'].get('httpx')} over "
        f"{_upstream_transport(report)} to the upstream."
    )
    lines.append("")
    lines.append(
        f"**Shared machine**: load average {m.get('load_avg_at_start')} at the start and "
        f"{m.get('load_avg_at_end')} at the end; busiest other processes at the start: "
        f"{', '.join(report.get('others') or []) or 'none above 2%'}. Wall-clock figures (TTFT, gaps, "
        "delays, tokens/s) are inflated by them; CPU time per token is the gateway's own. "
        f"Placement: gateway {report['placement']['gateway']}; upstream, load generator and real engine "
        f"{report['placement']['upstream']}."
    )
    lines.append("")
    lines.append(
        f"Replayed stream: {N_TOKENS} Qwen3 tokens per response ({report['script']['reasoning_chars']} "
        f"chars of reasoning, {report['script']['content_chars']} of content, one Hermes call), one token "
        "per llama.cpp event. Verified first in the three protocols, and every stream of every cell is "
        "checked (reasoning, content, the call)."
    )
    lines.append("")
    s = report.get("summary") or {}
    lines += [
        "## Against the issue's targets",
        "",
        "| figure | floor (client reading the upstream directly) | through the gateway | added | ratio | target | |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for item in s.get("rows", []):
        lines.append(
            f"| {item['figure']} | {item['floor']} | {item['gateway']} | {item['added']} | {item['ratio']} "
            f"| {item['target']} | {item['verdict']} |"
        )
    lines.append("")
    ttft = report.get("ttft") or []
    if ttft:
        lines += [
            "## Time to first token (one stream at a time, kept-alive connection)",
            "",
            f"{report['agent_facts']}. The same body each time: the template is compiled on the first "
            "request and cached. TTFT: from the request's last byte to the first event carrying output "
            "(for the upstream read directly: the event of the same token, the first that shows output).",
            "",
            "Two ways: with the whole 256-token answer following at full speed, and with the answer cut after "
            "its first tokens that show output (the figure the target is judged on; see below).",
            "",
            "| prompt | protocol | runs | cut: floor median / p99 ms | cut: gateway median / p99 ms "
            "| cut: added median / p99 ms | full answer: floor median / p99 ms | full answer: gateway median / p99 ms "
            "| full answer: added median / p99 ms | gateway CPU to first token ms "
            "| gateway CPU per 256-token request ms |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]

        def pair(d: dict[str, Any] | None) -> str:
            return f"{_f((d or {}).get('median'), '.3f')} / {_f((d or {}).get('p99'), '.3f')}"

        floors = {r["prompt"]: r for r in ttft if r["target"] == "upstream"}
        for r in ttft:
            if r["target"] not in ("gateway", "forwarder"):
                continue
            f = floors.get(r["prompt"], {})
            if r["status"] != "OK":
                lines.append(f"| {r['prompt']} | {r['protocol']} | | | FAIL: {r.get('error')} | | | |")
                continue
            cpu_req = (r["gw_cpu_us_per_token"] * N_TOKENS / 1e3) if r.get("gw_cpu_us_per_token") else None
            label = r["prompt"] + (
                " (socket bound as by uvicorn --workers: no TCP_NODELAY)" if r.get("variant") else ""
            )
            if r["target"] == "forwarder":
                label += ", reference: a bare forwarder (no gateway)"
            lines.append(
                f"| {label} | {r['protocol']} | {r['streams']} | {pair(f.get('cut_ttft_ms'))} "
                f"| {pair(r.get('cut_ttft_ms'))} | {pair(r.get('cut_added_ms'))} | {pair(f.get('ttft_ms'))} "
                f"| {pair(r.get('ttft_ms'))} | {pair(r.get('added_ms'))} "
                f"| {_f(r.get('first_token_cpu_ms'), '.2f')} | {_f(cpu_req, '.2f')} |"
            )
        lines += [
            "",
            "Gateway CPU to first token: the gateway process's CPU time per request when the upstream "
            f"answers with the first {N_TOKENS and (report['script']['first_visible_token'] + 3)} tokens only "
            "(accept, plan, call the upstream, parse, frame and write the first events, finish): what the "
            "first token costs the gateway, robust on a shared machine. Per 256-token request: the whole "
            "stream.",
            "",
            "Why the cut answer: the upstream, the load generator and the real engine share the second core. "
            "With the whole answer following at full speed, the upstream writes the remaining tokens as fast as "
            "the gateway reads them, on the load generator's core, while the load generator waits for the first "
            "one: the faster the gateway reads, the later the first token is read. Timestamps inside the "
            "gateway showed its first token's write at the same time for two upstream transports whose "
            "full-answer TTFT differed by 1 ms. Cut after its first tokens, the answer leaves nothing running "
            "but the first token's delivery; the full-answer figures stay in the table.",
            "",
            "The bare forwarder (reference, not the gateway) is a raw ASGI app on the gateway's uvicorn, loop "
            "and core that posts the short prompt's upstream body to the upstream with aiohttp and writes each "
            "chunk of the answer back as it comes: no validation, template, tokenizer, parsing or framing. What "
            "it adds is what any Python proxy on this stack adds on this machine; the rest of the gateway's "
            "added time is deltaflow's work.",
            "",
        ]
    for kind, title in (
        ("full", "Per token, upstream at full speed"),
        ("paced", f"Per-token delay, upstream paced at {1 / PACE_S:.0f} tokens/s per stream"),
    ):
        rows = [r for r in report.get("scale") or [] if r["kind"] == kind]
        if not rows:
            continue
        lines += [f"## {title}", ""]
        if kind == "full":
            lines += [
                "Gateway CPU per token: the gateway process's CPU time (all threads) over the cell / upstream "
                "tokens forwarded. Gap: a stream's mean time between output events at the client. The floor "
                "rows are the load generator reading the fake upstream directly: their CPU columns are what "
                "the load generator and the upstream cost alone. The bare forwarder rows (a reference, not the "
                "gateway: see the time-to-first-token section) put a proxy that does no work in the gateway's "
                "place: its CPU is in the gateway columns.",
                "",
                "| streams | target | protocol | tokens | wall tok/s | gateway CPU µs/token | gateway tokens per "
                "CPU-s | gateway core busy | gap µs (floor) | added gap µs | TTFT median / p99 ms "
                "| upstream CPU µs/token | load gen CPU µs/token | RSS growth KB/stream |",
                "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
        else:
            lines += [
                "Delay: the client's read time minus the upstream's write time of the token an event shows "
                "(every token of every stream; the same clock in both processes). At 1,000 streams the "
                f"paced upstream emits {1000 / PACE_S:,.0f} tokens/s in all.",
                "",
                "| streams | target | protocol | tokens | wall tok/s | gateway CPU µs/token | gateway core busy "
                "| delay median / p99 ms | added median / p99 ms | TTFT median / p99 ms |",
                "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
        for r in rows:
            tgt = {"upstream": "upstream", "forwarder": "bare forwarder (reference)"}.get(r["target"], "gateway")
            if r["status"] != "OK":
                lines.append(f"| {r['concurrency']} | {tgt} | {r['protocol']} | FAIL: {r.get('error')} |")
                continue
            t = r.get("ttft_ms") or {}
            ttft_s = f"{_f(t.get('median'), '.2f')} / {_f(t.get('p99'), '.2f')}"
            if kind == "full":
                lines.append(
                    f"| {r['concurrency']} | {tgt} | {r['protocol']} | {r['tokens']:,} | {r['tokens_per_s']:,.0f} | "
                    f"{_f(r.get('gw_cpu_us_per_token'), '.1f')} | {_f(r.get('gw_tokens_per_cpu_s'), ',.0f')} | "
                    f"{_f(r['gw_cpu_share'] * 100 if r.get('gw_cpu_share') is not None else None, '.0f')}% | "
                    f"{_f((r.get('gap_us') or {}).get('median'), '.1f')} | {_f(r.get('added_gap_us'), '.1f')} | "
                    f"{ttft_s} | {_f(r.get('up_cpu_us_per_token'), '.1f')} | "
                    f"{_f(r.get('lg_cpu_us_per_token'), '.1f')} | "
                    f"{_f(r.get('rss_growth_kb_per_stream'), '.1f')} |"
                )
            else:
                d = r.get("delay_ms") or {}
                a = r.get("added_delay_ms") or {}
                lines.append(
                    f"| {r['concurrency']} | {tgt} | {r['protocol']} | {r['tokens']:,} | {r['tokens_per_s']:,.0f} | "
                    f"{_f(r.get('gw_cpu_us_per_token'), '.1f')} | "
                    f"{_f(r['gw_cpu_share'] * 100 if r.get('gw_cpu_share') is not None else None, '.0f')}% | "
                    f"{_f(d.get('median'), '.3f')} / {_f(d.get('p99'), '.3f')} | "
                    f"{_f(a.get('median'), '.3f')} / {_f(a.get('p99'), '.3f')} | {ttft_s} |"
                )
        lines.append("")
    mem = report.get("memory") or []
    if mem:
        lines += [
            "## Memory per open stream (gateway RSS)",
            "",
            "| what | streams | RSS before MB | RSS open MB | RSS after they left MB | KB per stream | target |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in mem:
            if r["status"] != "OK":
                lines.append(f"| {r['what']} | {r['concurrency']} | FAIL: {r.get('first_failure')} |")
                continue
            lines.append(
                f"| idle (upstream stalled after its first event) | {r['streams']} | "
                f"{r['rss_before'] / 2**20:.1f} | {r['rss_open'] / 2**20:.1f} | {r['rss_after'] / 2**20:.1f} | "
                f"{r['kb_per_stream']:.1f} | ≤ {TARGETS['idle_kb_per_stream']:.0f} |"
            )
        busy = [
            r
            for r in report.get("scale") or []
            if r["kind"] == "full" and r["target"] == "gateway" and r["status"] == "OK" and r["concurrency"] >= 100
        ]
        for r in busy:
            lines.append(
                f"| streaming ({r['protocol']}, peak RSS growth during the cell) | {r['concurrency']} | | | | "
                f"{_f(r.get('rss_growth_kb_per_stream'), '.1f')} | |"
            )
        lines.append("")
    soak = report.get("soak")
    if soak:
        ser = soak["rss_series"]
        pick = [ser[0]] + [ser[min(len(ser) - 1, round(len(ser) * q))] for q in (0.25, 0.5, 0.75)] + [ser[-1]]
        lines += [
            "## Soak",
            "",
            f"{soak['seconds']:.0f} s, {soak['concurrency']} concurrent clients (chat), upstream paced at 2 ms per "
            f"token; 60% of the clients leave at a random event (some right after the request): "
            f"{soak['finished']} streams read to the end and checked, {soak['left']} left early, "
            f"{soak['failed']} failed{' (' + str(soak['first_failure']) + ')' if soak['failed'] else ''}; "
            f"streams in flight after (the gateway's gauge): {soak['in_flight_after']}.",
            "",
            "| t s | " + " | ".join(f"{p[0]:.0f}" for p in pick) + " |",
            "|---|" + "---:|" * len(pick),
            "| RSS MB | " + " | ".join(f"{p[1] / 2**20:.1f}" for p in pick) + " |",
            "",
            f"Second-half slope: {_f(soak.get('slope_mb_per_min_second_half'), '.3f')} MB/min.",
            "",
        ]
    eng = report.get("engine")
    if eng:
        lines += ["## Real engine (llama.cpp via xllamacpp)", ""]
        if "skipped" in eng:
            lines += [f"Skipped: {eng['skipped']}", ""]
        elif "error" in eng:
            lines += [f"Failed: {eng['error']}", ""]
        else:
            lines += [
                f"{eng['model']}; a short chat, thinking off, 16 tokens, {eng['runs']} sequential requests on a "
                "kept-alive connection; direct: the same /completion body the gateway sends.",
                "",
                "| | median ms | p99 ms |",
                "|---|---:|---:|",
                f"| direct (the engine's own time: prefill + first token) | {eng['direct_ms']['median']:.3f} | "
                f"{eng['direct_ms']['p99']:.3f} |",
                f"| through the gateway | {eng['gateway_ms']['median']:.3f} | {eng['gateway_ms']['p99']:.3f} |",
                f"| added | {eng['added_ms']['median']:.3f} | {eng['added_ms']['p99']:.3f} |",
                f"| ratio gateway / direct | {eng['ratio']:.2f}x | |",
                "",
            ]
    prof = report.get("profile")
    if prof:
        lines += [
            f"## Profile: {prof['protocol']} at {prof['concurrency']} streams ({prof['tool']})",
            "",
            "| where | share of the gateway's profiled time |",
            "|---|---:|",
        ]
        for cat, share in prof["categories"]:
            if share >= 0.005:
                lines.append(f"| {cat} | {share * 100:.1f}% |")
        lines += ["", "```", prof["text"][:12000].rstrip(), "```", ""]
    lines.append(f"Elapsed: {report.get('elapsed_s')} s.")
    return "\n".join(lines) + "\n"


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    rows: list[dict[str, str]] = []

    def ttft_row(prompt: str, proto: str, label: str, target: float) -> None:
        g = next(
            (
                r
                for r in report.get("ttft") or []
                if r["target"] == "gateway"
                and r["prompt"] == prompt
                and r["protocol"] == proto
                and r["status"] == "OK"
                and not r.get("variant")
            ),
            None,
        )
        f = next(
            (
                r
                for r in report.get("ttft") or []
                if r["target"] == "upstream" and r["prompt"] == prompt and r["status"] == "OK"
            ),
            None,
        )
        if g is None or f is None:
            return
        if not g.get("cut_added_ms") or not f.get("cut_ttft_ms"):
            return
        rows.append(
            {
                "figure": label + " (answer cut after its first tokens)",
                "floor": f"{f['cut_ttft_ms']['median']:.3f} ms",
                "gateway": f"{g['cut_ttft_ms']['median']:.3f} ms (p99 {g['cut_ttft_ms']['p99']:.3f})",
                "added": f"{g['cut_added_ms']['median']:.3f} ms (p99 {g['cut_added_ms']['p99']:.3f}); "
                f"whole answer at full speed: {g['added_ms']['median']:.3f} ms",
                "ratio": f"{g['cut_ratio']:.1f}x",
                "target": f"≤ {target:g} ms added",
                "verdict": _verdict(g["cut_added_ms"]["median"], target),
            }
        )

    ttft_row("short", "chat", "TTFT, short chat (OpenAI Chat), median", TARGETS["ttft_short_ms"])
    ttft_row("agent", "chat", "TTFT, 20-turn agent + 10 tools, template cached, median", TARGETS["ttft_agent_ms"])
    full = [r for r in report.get("scale") or [] if r["kind"] == "full" and r["status"] == "OK"]
    for proto in PROTOCOLS:
        g = next(
            (r for r in full if r["target"] == "gateway" and r["protocol"] == proto and r["concurrency"] == 100), None
        )
        f = next((r for r in full if r["target"] == "upstream" and r["concurrency"] == 100), None)
        if g and f:
            rows.append(
                {
                    "figure": f"gateway CPU per token, 100 streams ({proto})",
                    "floor": f"{f['up_cpu_us_per_token']:.1f} µs (the upstream's own)",
                    "gateway": f"{g['gw_cpu_us_per_token']:.1f} µs",
                    "added": f"{g['gw_cpu_us_per_token']:.1f} µs",
                    "ratio": f"{g['gw_cpu_us_per_token'] / f['up_cpu_us_per_token']:.1f}x the upstream",
                    "target": f"≤ {TARGETS['cpu_us_per_token_100']:g} µs",
                    "verdict": _verdict(g["gw_cpu_us_per_token"], TARGETS["cpu_us_per_token_100"]),
                }
            )
    for proto in PROTOCOLS:
        g = next(
            (r for r in full if r["target"] == "gateway" and r["protocol"] == proto and r["concurrency"] == 1000), None
        )
        f = next((r for r in full if r["target"] == "upstream" and r["concurrency"] == 1000), None)
        if g and f:
            rows.append(
                {
                    "figure": f"tokens/s forwarded per gateway core, 1,000 streams ({proto})",
                    "floor": f"{f['tokens_per_s']:,.0f} tok/s wall (direct)",
                    "gateway": f"{g['gw_tokens_per_cpu_s']:,.0f} per CPU-s ({g['tokens_per_s']:,.0f} wall, core "
                    f"{g['gw_cpu_share'] * 100:.0f}% busy)",
                    "added": "-",
                    "ratio": f"{f['tokens_per_s'] / g['tokens_per_s']:.1f}x slower (wall)",
                    "target": f"≥ {TARGETS['tokens_per_s_1000']:,.0f}",
                    "verdict": _verdict(g["gw_tokens_per_cpu_s"], TARGETS["tokens_per_s_1000"], True),
                }
            )
    fwd = next((r for r in full if r["target"] == "forwarder" and r["concurrency"] == 1000), None)
    if fwd is not None and fwd.get("gw_tokens_per_cpu_s"):
        rows.append(
            {
                "figure": "reference: a bare forwarder (no gateway), 1,000 streams",
                "floor": "-",
                "gateway": f"{fwd['gw_tokens_per_cpu_s']:,.0f} per CPU-s "
                f"({fwd['gw_cpu_us_per_token']:.1f} µs per token)",
                "added": "-",
                "ratio": "-",
                "target": "-",
                "verdict": "-",
            }
        )
    for r in report.get("memory") or []:
        if r["status"] == "OK":
            rows.append(
                {
                    "figure": f"RSS per idle stream ({r['streams']} streams)",
                    "floor": "-",
                    "gateway": f"{r['kb_per_stream']:.1f} KB",
                    "added": f"{r['kb_per_stream']:.1f} KB",
                    "ratio": "-",
                    "target": f"≤ {TARGETS['idle_kb_per_stream']:g} KB",
                    "verdict": _verdict(r["kb_per_stream"], TARGETS["idle_kb_per_stream"]),
                }
            )
    eng = report.get("engine") or {}
    if "ratio" in eng:
        rows.append(
            {
                "figure": "TTFT against a real llama.cpp (tiny Qwen3), median",
                "floor": f"{eng['direct_ms']['median']:.3f} ms",
                "gateway": f"{eng['gateway_ms']['median']:.3f} ms",
                "added": f"{eng['added_ms']['median']:.3f} ms",
                "ratio": f"{eng['ratio']:.2f}x",
                "target": "-",
                "verdict": "-",
            }
        )
    return {"rows": rows}


def plot(report: dict[str, Any], path: Path) -> Path | None:
    """Per-token overhead against concurrency: the gateway's CPU µs per token and the added gap, per protocol."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    full = [r for r in report.get("scale") or [] if r["kind"] == "full" and r["status"] == "OK"]
    if not full:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"chat": "tab:blue", "messages": "tab:orange", "responses": "tab:green", "upstream": "grey"}
    for proto in PROTOCOLS:
        pts = sorted(
            (r["concurrency"], r["gw_cpu_us_per_token"])
            for r in full
            if r["target"] == "gateway" and r["protocol"] == proto
        )
        if pts:
            a1.plot(*zip(*pts, strict=True), marker="o", color=colors[proto], label=f"gateway CPU, {proto}")
        pts = sorted(
            (r["concurrency"], r["gap_us"]["median"])
            for r in full
            if r["target"] == "gateway" and r["protocol"] == proto and r.get("gap_us")
        )
        if pts:
            a2.plot(*zip(*pts, strict=True), marker="o", color=colors[proto], label=f"through the gateway, {proto}")
    pts = sorted(
        (r["concurrency"], r["up_cpu_us_per_token"] + r["lg_cpu_us_per_token"])
        for r in full
        if r["target"] == "upstream"
    )
    if pts:
        a1.plot(
            *zip(*pts, strict=True),
            marker=".",
            linestyle=":",
            color="grey",
            label="floor: upstream + load generator CPU",
        )
    pts = sorted(
        (r["concurrency"], r["gap_us"]["median"]) for r in full if r["target"] == "upstream" and r.get("gap_us")
    )
    if pts:
        a2.plot(*zip(*pts, strict=True), marker=".", linestyle=":", color="grey", label="floor: upstream directly")
    a1.axhline(
        TARGETS["cpu_us_per_token_100"], color="red", linewidth=0.8, linestyle="--", label="target at 100 streams"
    )
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_xlabel("concurrent streams")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    a2.set_yscale("log")
    a1.set_ylabel("CPU µs per upstream token (gateway process)")
    a2.set_ylabel("client gap between tokens, µs (median stream)")
    a1.set_title("gateway CPU per token", fontsize=9)
    a2.set_title("per-token latency at full upstream speed", fontsize=9)
    fig.suptitle(
        f"deltaflow gateway, per-token overhead vs concurrency — {report['date']}, {report['machine']['cpu']}, "
        f"load avg {report['machine'].get('load_avg_at_start')}",
        fontsize=8,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- main -----------------------------------------------------------------------------------------------------


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks gateway", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs, streams up to 100 (1,000 for memory), no soak")
    ap.add_argument("--streams", help="comma list of concurrent stream counts (default 1,100,1000; --quick 1,100)")
    ap.add_argument("--idle", type=int, help="idle streams for memory per stream (default 1000; 0 skips)")
    ap.add_argument(
        "--soak",
        type=float,
        nargs="?",
        const=600.0,
        default=None,
        metavar="SECONDS",
        help="also run the soak (600 s when no value is given; off by default)",
    )
    ap.add_argument("--soak-clients", type=int, default=200, help="concurrent clients in the soak (default 200)")
    ap.add_argument("--no-paced", action="store_true", help="skip the paced (per-token delay) cells")
    ap.add_argument("--no-engine", action="store_true", help="skip the real llama.cpp engine")
    ap.add_argument("--no-ttft", action="store_true", help="skip the time-to-first-token cells")
    ap.add_argument(
        "--profile",
        nargs="?",
        const="auto",
        metavar="PROTO:N",
        help="profile a cell (default: the worst full-speed cell, or chat:100 alone) and add it",
    )
    ap.add_argument("--profile-only", action="store_true", help="only profile (with --profile PROTO:N)")
    ap.add_argument("--tool", default="pyinstrument", choices=("pyinstrument", "cprofile"))
    ap.add_argument("--top", type=int, default=30, help="cProfile: functions listed")
    ap.add_argument("--json", help="write the report as JSON here")
    ap.add_argument("--markdown", help="write the markdown report here")
    ap.add_argument("--plot", help="write the per-token overhead PNG here")
    ap.add_argument(
        "--save",
        action="store_true",
        help="write benchmarks/results/<date>-gateway[-quick].{json,md} and gateway_overhead.png",
    )
    return ap.parse_args(argv)


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for pkg in (
        "uvicorn", "h11", "httptools", "uvloop", "httpx", "httpcore", "httpx-sse", "aiohttp", "starlette", "xllamacpp"
    ):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _server_stack() -> str:
    """uvicorn's HTTP implementation and loop in the gateway child, as its "auto" resolves them (or as set)."""
    import importlib.util

    http = os.environ.get("GW_HTTP", "auto")
    loop = os.environ.get("GW_LOOP", "auto")
    if http == "auto":
        http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    if loop == "auto":
        loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    gc = "collector tuned" if _gc_tuned() else "default collector"
    return f"{http}, {loop} loop, {gc}"


def _gc_tuned() -> bool:
    """Whether the gateway child tunes its garbage collector as ``deltaflow serve`` does (``GW_GC=default``: no)."""
    return os.environ.get("GW_GC", "tuned") == "tuned"


def _worst(report: dict[str, Any]) -> tuple[str, int]:
    full = [
        r
        for r in report.get("scale") or []
        if r["kind"] == "full" and r["target"] == "gateway" and r["status"] == "OK" and r.get("gw_cpu_us_per_token")
    ]
    if not full:
        return "chat", 100
    w = max(full, key=lambda r: r["gw_cpu_us_per_token"])
    return w["protocol"], w["concurrency"]


def main(argv: list[str] | None = None) -> int:
    if argv and argv[0].startswith("_"):
        role = {
            "_upstream": _serve_upstream,
            "_gateway": _serve_gateway,
            "_forwarder": _serve_forwarder,
            "_loadgen": _loadgen,
        }[argv[0]]
        return role(argv[1:])
    a = _args(argv)
    from .timing import machine_info

    _shared()
    _raise_nofile()
    started = time.perf_counter()
    placement = {"gateway": "not pinned", "upstream": _pin(OTHER_CORE)}
    report: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "command": "python -m benchmarks gateway "
        + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
        "machine": machine_info(),
        "versions": _versions(),
        "server_stack": _server_stack(),
        "upstream_transport": f"deltaflow's HTTP/1.1 transport (httptools {_versions().get('httptools')})",
        "config": {"quick": a.quick, "tokens_per_stream": N_TOKENS, "pace_s": PACE_S},
        "targets": TARGETS,
    }
    _say("replayed stream: building from the Qwen3 tokenizer")
    script = make_script()
    report["script"] = {
        "tokens": len(script.ids),
        "reasoning_chars": len(script.reasoning),
        "content_chars": len(script.content),
        "call": list(script.call),
        "first_visible_token": script.first_visible,
    }
    if a.profile_only:
        proto, n = a.profile.split(":") if a.profile and a.profile != "auto" else ("chat", "100")
        report["profile"] = profile_cell(script, proto, int(n), a.tool, a.top, a.quick)
        report["placement"] = placement
        report["others"] = []
        report["machine"]["load_avg_at_end"] = machine_info().get("load_avg_at_start")
        report["elapsed_s"] = round(time.perf_counter() - started, 1)
        print(render(report))
        return 0
    up = Child("_upstream")
    gw = Child("_gateway", "--upstream", f"http://127.0.0.1:{up.info['port']}")
    placement["gateway"] = gw.info.get("pinned", "?")
    placement["upstream"] = up.info.get("pinned", "?")
    report["placement"] = placement
    report["others"] = _busiest_others({os.getpid(), up.pid, gw.pid})
    _say(
        f"gateway pid {gw.pid} ({placement['gateway']}), upstream pid {up.pid} ({placement['upstream']}); "
        f"busy others: {report['others']}"
    )
    env = Env(script, up, gw, a.quick, {})
    failed = False
    try:
        _say("verify")
        report["verify"] = verify(env)
        report["agent_facts"] = agent_facts(agent_body())
        if not a.no_ttft:
            _say("time to first token")
            report["ttft"] = measure_ttft(env)
        ns = [int(x) for x in a.streams.split(",")] if a.streams else ([1, 100] if a.quick else [1, 100, 1000])
        _say("per token, full speed")
        report["scale"] = measure_scale(env, ns, paced=False)
        if not a.no_paced:
            _say("per-token delay, paced")
            # paced at 1,000 streams would ask 50,000 tokens/s of the gateway: the full-speed cells show it cannot
            report["scale"] += measure_scale(env, [n for n in ns if n <= 100], paced=True)
        idle = 1000 if a.idle is None else a.idle
        if idle:
            _say("memory")
            report["memory"] = measure_memory(env, idle)
        if a.soak:
            _say(f"soak {a.soak:.0f} s")
            report["soak"] = measure_soak(env, a.soak, a.soak_clients)
        if not a.no_engine:
            _say("real engine")
            try:
                report["engine"] = measure_engine(env, a.quick)
            except Exception as exc:  # noqa: BLE001 - reported, the rest of the report stands
                report["engine"] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    finally:
        gw.stop()
        up.stop()
    if a.profile:
        proto, n = _worst(report) if a.profile == "auto" else (a.profile.split(":")[0], int(a.profile.split(":")[1]))
        _say(f"profile {proto} at {n} streams ({a.tool})")
        report["profile"] = profile_cell(script, proto, int(n), a.tool, a.top, a.quick)
    report["machine"]["load_avg_at_end"] = machine_info().get("load_avg_at_start")
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["summary"] = summarize(report)
    failed = any(r.get("status") == "FAIL" for key in ("ttft", "scale", "memory") for r in report.get(key) or [])
    md = render(report)
    outputs = []
    if a.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stem = report["date"] + "-gateway" + ("-quick" if a.quick else "")
        a.json = a.json or str(RESULTS / f"{stem}.json")
        a.markdown = a.markdown or str(RESULTS / f"{stem}.md")
        a.plot = a.plot or str(RESULTS / ("gateway_overhead-quick.png" if a.quick else "gateway_overhead.png"))
    if a.plot:
        png = plot(report, Path(a.plot))
        outputs.append(f"plot: {png}" if png else "plot: skipped (matplotlib missing: pip install -e .[bench])")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        outputs.append(f"json: {a.json}")
    if a.markdown:
        Path(a.markdown).write_text(md, encoding="utf-8")
        outputs.append(f"markdown: {a.markdown}")
    print(md)
    for o in outputs:
        print(o, file=sys.stderr)
    print(f"elapsed: {report['elapsed_s']} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
