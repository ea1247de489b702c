"""A scripted engine double that speaks llama.cpp's server protocol (``/completion``), for the agent tests.

It is a double, not a model: no real model can be made to decide to call a given tool, with given
arguments, on cue, and an agent test needs exactly that (list the files, then read one, then answer).
The gateway in front of it cannot tell the difference: it renders the agent's request with the real
Qwen3 chat template and tokenizer, sends the token ids to ``POST /completion`` as it would to
llama.cpp, and parses the streamed text with the real Hermes and Qwen3 parsers.

What it answers, in llama.cpp's shapes (see ``deltaflow/gateway/upstreams/llamacpp.py``):

* ``GET /health`` -> ``{"status": "ok"}``;
* ``GET /props`` -> ``default_generation_settings.n_ctx``, ``total_slots``, ``build_info``,
  ``model_path``, ``bos_token``/``eos_token`` (llama.cpp's shape, so the gateway's probe reads it);
* ``POST /tokenize`` / ``POST /detokenize`` (``content`` -> ``tokens``, ``tokens`` -> ``content``);
* ``POST /completion`` with a ``prompt`` of token ids or text. The prompt is decoded (ids -> text
  with the Qwen3 tokenizer, special tokens kept) and logged with the request body; the reply is
  the first :class:`Rule` of the script whose predicate holds for the prompt text. Streamed
  (``"stream": true``) as ``data: {"content", "tokens", "stop": false}`` events of
  :data:`PIECE` characters, then ``{"content": "", "stop": true, "stop_type": "eos"|"limit",
  "tokens_predicted": N, "tokens_evaluated": M}``; not streamed: one JSON object.
  ``n_predict`` is honoured (a reply longer than it is cut to that many tokens, ``stop_type:
  "limit"``), as llama.cpp does.

The gateway's probe (:meth:`LlamaCppUpstream.probe`) generates one control token under the grammar
``root ::= <[ID]>`` (not streamed) to find out whether control tokens are rendered: the double
answers with that token's text, as llama.cpp started with ``--special`` does; such probes are logged
in :attr:`EngineDouble.probes`, not in :attr:`EngineDouble.prompts`.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

PIECE = 4
"""Characters per streamed event: the markers (``<think>``, ``<tool_call>``) arrive split across events."""

N_CTX = 32768
_PROBE = re.compile(r"^root ::= <\[(\d+)\]>$")


@dataclass(frozen=True)
class Rule:
    """One line of the script: when ``when(prompt_text)`` holds, the reply is ``reply`` (or ``reply(prompt_text)``)."""

    name: str
    when: Callable[[str], bool]
    reply: str | Callable[[str], str]

    def text(self, prompt: str) -> str:
        return self.reply(prompt) if callable(self.reply) else self.reply


@dataclass
class Completion:
    """One ``POST /completion`` the double answered: the decoded prompt, the body, the rule and its reply."""

    prompt: str
    body: dict[str, Any]
    rule: str
    reply: str


@dataclass
class EngineDouble:
    """The scripted llama.cpp double (see the module docstring); start it with :meth:`start` or ``with``.

    Args:
        tokenizer_file: the Qwen3 ``tokenizer.json.gz``.
        script: the rules, tried in order; none matching is a 500 (the test's script is incomplete).
    """

    tokenizer_file: Path
    script: list[Rule] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        from tokenizers import Tokenizer

        with gzip.open(self.tokenizer_file, "rt", encoding="utf-8") as f:
            self.tokenizer = Tokenizer.from_str(f.read())
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # -- what the tests read ------------------------------------------------------------------
    @property
    def prompts(self) -> list[str]:
        """The decoded prompt of every generation request, in order."""
        with self._lock:
            return [c.prompt for c in self.completions]

    def answered(self, rule: str) -> list[Completion]:
        """The completions a given rule answered."""
        with self._lock:
            return [c for c in self.completions if c.rule == rule]

    # -- the protocol -------------------------------------------------------------------------
    def _decode(self, prompt: Any) -> tuple[str, int]:
        if isinstance(prompt, str):
            return prompt, len(self.tokenizer.encode(prompt, add_special_tokens=False).ids)
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return self.tokenizer.decode(prompt, skip_special_tokens=False), len(prompt)
        raise ValueError(f"prompt must be a string or an array of token ids, got {type(prompt).__name__}")

    def _pick(self, prompt: str) -> Rule | None:
        return next((r for r in self.script if r.when(prompt)), None)

    async def _completion(self, request: Request) -> Response:
        body = await request.json()
        try:
            prompt, n_prompt = self._decode(body.get("prompt"))
        except ValueError as exc:
            return JSONResponse({"error": {"code": 400, "message": str(exc), "type": "invalid_request_error"}}, 400)
        grammar = body.get("grammar")
        probe = _PROBE.match(grammar) if isinstance(grammar, str) else None
        if probe is not None and not body.get("stream"):
            token = self.tokenizer.id_to_token(int(probe.group(1))) or ""
            with self._lock:
                self.probes.append(body)
            return JSONResponse({"content": token, "tokens": [int(probe.group(1))], "stop": True,
                                 "stop_type": "limit", "tokens_predicted": 1, "tokens_evaluated": n_prompt})
        rule = self._pick(prompt)
        if rule is None:
            with self._lock:
                self.unmatched.append(prompt)
            return JSONResponse({"error": {"code": 500, "message": "the engine double's script has no rule for "
                                           "this prompt", "type": "server_error"}}, 500)
        reply = rule.text(prompt)
        with self._lock:
            self.completions.append(Completion(prompt=prompt, body=body, rule=rule.name, reply=reply))
        ids = self.tokenizer.encode(reply, add_special_tokens=False).ids
        stop_type = "eos"
        limit = body.get("n_predict")
        if isinstance(limit, int) and 0 <= limit < len(ids):
            ids = ids[:limit]
            reply = self.tokenizer.decode(ids, skip_special_tokens=False)
            stop_type = "limit"
        final = {"content": "", "tokens": [], "stop": True, "stop_type": stop_type,
                 "tokens_predicted": len(ids), "tokens_evaluated": n_prompt,
                 "timings": {"prompt_n": n_prompt, "predicted_n": len(ids)}}
        if not body.get("stream"):
            return JSONResponse({**final, "content": reply, "tokens": ids})

        def events() -> Iterator[bytes]:
            for i in range(0, len(reply), PIECE):
                ev = {"content": reply[i : i + PIECE], "tokens": [], "stop": False}
                yield f"data: {json.dumps(ev)}\n\n".encode()
            yield f"data: {json.dumps(final)}\n\n".encode()

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _tokenize(self, request: Request) -> Response:
        body = await request.json()
        content = body.get("content", "")
        return JSONResponse({"tokens": self.tokenizer.encode(content, add_special_tokens=False).ids})

    async def _detokenize(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"content": self.tokenizer.decode(body.get("tokens", []), skip_special_tokens=False)})

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _props(self, request: Request) -> Response:
        return JSONResponse({
            "default_generation_settings": {"n_ctx": N_CTX, "params": {"n_predict": -1}},
            "total_slots": 1,
            "model_path": "/models/Qwen3-scripted-double.gguf",
            "chat_template": "",
            "bos_token": "",
            "eos_token": "<|im_end|>",
            "build_info": "b0000-engine-double",
            "modalities": {"vision": False, "audio": False},
        })

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/health", self._health, methods=["GET"]),
            Route("/props", self._props, methods=["GET"]),
            Route("/completion", self._completion, methods=["POST"]),
            Route("/completions", self._completion, methods=["POST"]),
            Route("/tokenize", self._tokenize, methods=["POST"]),
            Route("/detokenize", self._detokenize, methods=["POST"]),
        ])

    # -- running ------------------------------------------------------------------------------
    def start(self) -> str:
        """Serve on a free loopback port (uvicorn in a thread); returns the base URL."""
        self._server, self._thread, self.url = start_server(self.app())
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            assert self._thread is not None
            self._thread.join(10)
            self._server = None

    def __enter__(self) -> EngineDouble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(app: Any, *, lifespan: str = "off") -> Any:
    """tests/integration/server/conftest_server.py's ``start_server``, imported by path."""
    path = Path(__file__).resolve().parents[1] / "integration" / "server" / "conftest_server.py"
    spec = importlib.util.spec_from_file_location("deltaflow_agents_tests_conftest_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.start_server(app, lifespan=lifespan)


# -- helpers for scripts: what the Qwen3 template rendered ---------------------------------------

_TOOLS_BLOCK = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.DOTALL)


def rendered_tools(prompt: str) -> list[dict[str, Any]]:
    """The tools the template rendered in the system turn (one JSON object a line), or []."""
    m = _TOOLS_BLOCK.search(prompt)
    if m is None:
        return []
    return [json.loads(line) for line in m.group(1).splitlines() if line.strip()]


def tool_names(prompt: str) -> list[str]:
    """The names of :func:`rendered_tools` (``{"type": "function", "function": {"name": ...}}``)."""
    return [(t.get("function") or t).get("name", "") for t in rendered_tools(prompt)]


def turns(prompt: str) -> list[tuple[str, str]]:
    """The prompt's ``(role, text)`` turns, the open assistant turn at the end included."""
    return [(m.group(1), m.group(2)) for m in _TURN.finditer(prompt)]


def tool_responses(prompt: str) -> list[str]:
    """The texts of every ``<tool_response>`` block the template rendered, in order."""
    return re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.DOTALL)


def first_user_text(prompt: str) -> str:
    """The text of the first user turn that is not a tool response."""
    for role, text in turns(prompt):
        if role == "user" and not text.lstrip().startswith("<tool_response>"):
            return text
    return ""


def hermes_call(name: str, arguments: dict[str, Any], reasoning: str | None = None, text: str = "") -> str:
    """A Qwen3 reply: ``<think>`` reasoning, optional text, then one Hermes ``<tool_call>``."""
    think = f"<think>\n{reasoning}\n</think>\n\n" if reasoning is not None else ""
    call = json.dumps({"name": name, "arguments": arguments})
    return f"{think}{text}<tool_call>\n{call}\n</tool_call>"


def final_answer(text: str, reasoning: str | None = None) -> str:
    """A Qwen3 reply without a call."""
    think = f"<think>\n{reasoning}\n</think>\n\n" if reasoning is not None else ""
    return f"{think}{text}"


def has_tools(prompt: str) -> bool:
    return _TOOLS_BLOCK.search(prompt) is not None


def count_results(prompt: str) -> int:
    return len(tool_responses(prompt))


def names_in(prompt: str, names: Sequence[str]) -> bool:
    got = set(tool_names(prompt))
    return all(n in got for n in names)
