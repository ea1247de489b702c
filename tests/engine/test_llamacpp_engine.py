"""What the gateway relies on from llama.cpp, asserted against the real server.

The server is llama.cpp's own (``xllamacpp`` 2026.10.11549) on tiny random-weight
models that carry real tokenizers (``gguf_models.py``). Asserted here:

* ``/tokenize`` gives the ids HF ``tokenizers`` gives, for Qwen3, Llama 3,
  DeepSeek-V3 and gpt-oss, on the template corpus's prompts
  (``shared/templates/expected.jsonl``), so a gateway can tokenize prompts
  itself and send ids. One known exception: llama.cpp retypes a few
  "control-looking" vocabulary entries as control tokens at load time, and
  Qwen3's ordinary BPE entry ``</s>`` (128247) is one of them, so text
  containing ``</s>`` tokenizes differently when special tokens are parsed.
* ``/apply-template`` (llama.cpp's own Jinja engine) renders the Qwen3, Llama 3
  and DeepSeek-V3 templates byte for byte as transformers 5.24 did, on all
  9 conversations x ``add_generation_prompt``, except that it drops the
  template's leading BOS when the model adds one itself.
* A GBNF grammar from :func:`deltaflow.prepare_request` (``tool_choice
  "required"``, Hermes markers written as token references ``<[ID]>``)
  forces a Qwen3 tool call that :func:`deltaflow.parse_complete` parses and
  whose arguments validate against the tool's schema; streaming and not.
* The ``/completion`` stream: one ``data:`` event per token, ``stop: true``
  and ``stop_type`` only on the last one (``limit`` at ``n_predict``, ``eos``
  at the end-of-generation token, whose text is in ``content`` because the
  server renders special tokens); a client that closes the stream frees
  its slot at once.

Also seen while writing these, and not asserted because they are races or
numerics rather than contracts: a request sent on a keep-alive connection right after a stream ended
on it is often dropped ("Server disconnected without sending a response"), so
streams here go on a connection of their own; and with ``cache_prompt`` on,
a repeated prompt can sample differently from a fresh one (the cached prefix
changes the numerics), so the stream/non-stream comparison turns it off.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import closing
from functools import cache
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.shared, pytest.mark.engine]

pytest.importorskip("xllamacpp", reason="the llama.cpp engine tests need xllamacpp==2026.10.11549")
pytest.importorskip("gguf", reason="the llama.cpp engine tests need gguf==0.19.0 to write the tiny models")
httpx = pytest.importorskip("httpx", reason="the llama.cpp engine tests talk to the server with httpx")
tokenizers = pytest.importorskip("tokenizers", reason="the llama.cpp engine tests compare ids with HF tokenizers")

from gateway_support import SCHEMA  # noqa: E402
from llamacpp import LlamaCppServer, LlamaCppServerError  # noqa: E402

from deltaflow import parse_complete, prepare_request  # noqa: E402
from deltaflow.testing import shared_dir  # noqa: E402

ServerFor = Callable[[str], LlamaCppServer]

_SHARED = shared_dir()
TEMPLATES = _SHARED / "templates" if _SHARED is not None else None

# The family's chat template in the corpus (gpt-oss has none there: its prompts come from HARMONY_PROMPTS).
FAMILY_TEMPLATE = {
    "qwen3": "hf-qwen3.jinja",
    "llama3": "hf-llama3.jinja",
    "deepseek-v3": "hf-deepseek-v3.jinja",
    "gpt-oss": None,
}
# The BOS a family's model adds itself (add_bos_token): llama.cpp's /apply-template leaves it out of the text.
ADDED_BOS = {"llama3": "<|begin_of_text|>", "deepseek-v3": "<｜begin▁of▁sentence｜>"}

# Vocabulary entries llama.cpp retypes as control tokens at load ("control-looking token ... its type will be
# overridden"), that HF tokenizers treat as ordinary BPE text: with parse_special they become one token.
RETYPED_TEXT = {"qwen3": ("</s>",)}

# /apply-template cases known to differ from transformers, with the first differing offset, as
# (template, conversation, add_generation_prompt) -> note. On this llama.cpp every Qwen3, Llama 3 and
# DeepSeek-V3 case matches (after the leading BOS above), so the list is empty; a case added here is skipped
# with its note while it still differs, and every other case must match.
KNOWN_TEMPLATE_DIVERGENCES: dict[tuple[str, str, bool], str] = {}

# Harmony text (gpt-oss): the corpus has no gpt-oss template, so these are written out.
HARMONY_PROMPTS = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2026-01-15\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
    "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
    "// Current weather for a city.\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n}"
    " // namespace functions<|end|><|start|>user<|message|>Weather in Zürich?<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>Call the tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Zürich"}<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>'
    '{"temp": 21, "sky": "sunny ☀"}<|end|><|start|>assistant',
    "<|start|>assistant<|channel|>final<|message|>It is 21 °C — sunny.<|return|>",
)

SEEDS = (1, 2, 3)
N_PREDICT = 256

WEATHER_SCHEMA = SCHEMA  # bounded: a random model under its constraint finishes a call quickly
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Current weather for a city.", "parameters": WEATHER_SCHEMA},
    }
]


# --- the corpus -----------------------------------------------------------------------------------


@cache
def _cases() -> tuple[dict[str, Any], ...]:
    if TEMPLATES is None or not (TEMPLATES / "expected.jsonl").is_file():
        return ()
    lines = (TEMPLATES / "expected.jsonl").read_text(encoding="utf-8").splitlines()
    return tuple(json.loads(line) for line in lines if line.strip())


@cache
def _conversations() -> dict[str, dict[str, Any]]:
    if TEMPLATES is None or not (TEMPLATES / "conversations.json").is_file():
        return {}
    return {c["id"]: c for c in json.loads((TEMPLATES / "conversations.json").read_text(encoding="utf-8"))}


@cache
def _hf_tokenizer(family: str) -> Any:
    assert _SHARED is not None
    path = _SHARED / "tokenizers" / family / "tokenizer.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return tokenizers.Tokenizer.from_str(f.read())


def _own_prompts(family: str) -> list[str]:
    """The corpus prompts of the family's template (Harmony text for gpt-oss)."""
    name = FAMILY_TEMPLATE[family]
    if name is None:
        return list(HARMONY_PROMPTS)
    return [c["prompt"] for c in _cases() if c["template"] == name and "prompt" in c]


def _other_prompts() -> list[str]:
    """The longest prompt of every template in the corpus: other families' markers and scripts as plain text."""
    longest: dict[str, str] = {}
    for c in _cases():
        p = c.get("prompt")
        if p is not None and len(p) > len(longest.get(c["template"], "")):
            longest[c["template"]] = p
    return [longest[t] for t in sorted(longest)]


def _template_cases() -> list[Any]:
    if not _cases():
        return [pytest.param(None, None, marks=pytest.mark.skip(reason="../shared/templates/expected.jsonl is absent"))]
    out = []
    for c in _cases():
        family = next((f for f, t in FAMILY_TEMPLATE.items() if t == c["template"]), None)
        if family is None or "prompt" not in c:
            continue
        cid = f"{family}-{c['conversation']}-{'gen' if c['add_generation_prompt'] else 'nogen'}"
        out.append(pytest.param(family, c, id=cid))
    return out


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


# --- talking to the server ------------------------------------------------------------------------


def _tokenize(client: Any, text: str, *, parse_special: bool = True) -> list[int]:
    r = client.post("/tokenize", json={"content": text, "with_pieces": False, "parse_special": parse_special})
    r.raise_for_status()
    ids: list[int] = r.json()["tokens"]
    return ids


def _stream(server: LlamaCppServer, body: Mapping[str, Any]) -> Generator[dict[str, Any], None, None]:
    """POST ``/completion`` with ``stream: true``; yield each ``data:`` event.

    A connection of its own (``Connection: close``): a request sent on a
    keep-alive connection right after a stream ended on it is often dropped.
    """
    with httpx.Client(base_url=server.base_url, timeout=60.0, headers={"Connection": "close"}) as client:
        with client.stream("POST", "/completion", json={**body, "stream": True}) as r:
            r.raise_for_status()
            assert r.headers["content-type"].startswith("text/event-stream")
            for line in r.iter_lines():
                if line.startswith("data: "):
                    yield json.loads(line[len("data: ") :])
                else:
                    assert line == "", f"unexpected SSE line {line!r}"


def _slots_busy(client: Any) -> list[bool]:
    r = client.get("/slots")
    r.raise_for_status()
    return [bool(s["is_processing"]) for s in r.json()]


def _wait_idle(client: Any, timeout: float) -> float:
    """Seconds until no slot is processing; fails after ``timeout``."""
    began = time.monotonic()
    while any(_slots_busy(client)):
        if time.monotonic() - began > timeout:
            pytest.fail(f"a slot is still processing {timeout} s later: {client.get('/slots').text[:500]}")
        time.sleep(0.02)
    return time.monotonic() - began


def _metric(client: Any, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"/metrics has no {name}")


# --- checking a tool call -------------------------------------------------------------------------


def _schema_errors(schema: Mapping[str, Any], value: Any, where: str = "$") -> list[str]:
    """Violations of the small JSON-Schema subset the test schema uses (object/string, enum, maxLength, ...)."""
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        props: Mapping[str, Any] = schema.get("properties", {})
        errors = [f"{where}: missing {k!r}" for k in schema.get("required", ()) if k not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{where}: unexpected key {k!r}" for k in value if k not in props]
        for k, sub in props.items():
            if k in value:
                errors += _schema_errors(sub, value[k], f"{where}.{k}")
        return errors
    if kind == "string":
        if not isinstance(value, str):
            return [f"{where}: not a string"]
        errors = []
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: {len(value)} characters > maxLength {schema['maxLength']}")
        if "enum" in schema and value not in schema["enum"]:
            errors.append(f"{where}: {value!r} not in {schema['enum']}")
        return errors
    raise NotImplementedError(f"schema type {kind!r}")


@pytest.fixture(scope="module")
def tool_request(shared: Path) -> dict[str, Any]:
    """The Qwen3 prompt (thinking off) as token ids, and the grammar that forces one ``get_weather`` call."""
    tok = _hf_tokenizer("qwen3")
    prepared = prepare_request(TOOLS, "required", tool_parser="hermes", parallel_tool_calls=False)
    assert prepared.constraint is not None
    grammar = prepared.constraint.gbnf_grammar(tok)
    # The Hermes markers are Qwen3 tokens: the grammar names them by id, so text cannot imitate them.
    assert f"<[{tok.token_to_id('<tool_call>')}]>" in grammar
    assert f"<[{tok.token_to_id('</tool_call>')}]>" in grammar
    source = (shared / "templates" / "hf-qwen3.jinja").read_text(encoding="utf-8")
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    try:
        from deltaflow.prompt.template import ChatTemplate
    except ImportError:  # the renderer is not there: plain Jinja in transformers' environment settings
        import jinja2.sandbox

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
        prompt = env.from_string(source).render(
            messages=messages, tools=TOOLS, add_generation_prompt=True, enable_thinking=False
        )
    else:
        prompt = ChatTemplate.from_string(source).render(messages, tools=TOOLS, enable_thinking=False)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    return {
        "prompt_ids": tok.encode(prompt, add_special_tokens=False).ids,
        "grammar": grammar,
        "parse_tools": prepared.parse_tools,
    }


def _check_forced_call(server: LlamaCppServer, text: str, parse_tools: Any) -> None:
    """``text`` is one valid ``get_weather`` call, blanks before it and the end-of-generation token after it."""
    message = parse_complete(
        text, tool_parser="hermes", reasoning_parser="qwen3", tools=parse_tools, enable_thinking=False
    )
    assert message.reasoning_content is None
    assert message.tool_calls is not None and len(message.tool_calls) == 1, text
    call = message.tool_calls[0]
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert _schema_errors(WEATHER_SCHEMA, args) == [], (text, args)
    # Content keeps what the grammar allows around the call: at most 8 blanks before it, and the end-of-generation
    # token after it (in the text, as the server renders special tokens): one token, nothing else.
    rest = (message.content or "").strip(" \t\r\n")
    with httpx.Client(base_url=server.base_url, timeout=10.0) as client:
        assert len(_tokenize(client, rest)) == 1, f"content besides the call: {message.content!r}"
    assert text.endswith(rest)


# --- tokenization ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILY_TEMPLATE))
def test_tokenize_matches_hf_tokenizers(family: str, llamacpp_server: ServerFor) -> None:
    """/tokenize (special tokens parsed, none added) == HF ``encode(add_special_tokens=False)``.

    On the family's own template prompts (Harmony text for gpt-oss) and on one
    long prompt of every other template in the corpus.
    """
    tok = _hf_tokenizer(family)
    server = llamacpp_server(family)
    own, other = _own_prompts(family), _other_prompts()
    assert own and other, "the template corpus has no prompts for this family"
    retyped = RETYPED_TEXT.get(family, ())
    checked = 0
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        for prompt in own + other:
            if any(t in prompt for t in retyped):
                continue  # see test_retyped_control_looking_text
            got = _tokenize(client, prompt)
            want = tok.encode(prompt, add_special_tokens=False).ids
            i = _first_difference(got, want)
            assert got == want, (
                f"{family}: first difference at token {i}: llama.cpp {got[i : i + 4]} vs HF {want[i : i + 4]} "
                f"({tok.decode(want[max(0, i - 3) : i + 4], skip_special_tokens=False)!r})"
            )
            checked += 1
    assert checked >= len(own)


def test_retyped_control_looking_text(llamacpp_qwen3: LlamaCppServer) -> None:
    """Qwen3's ordinary entry ``</s>`` becomes a control token in llama.cpp (HF keeps it BPE text).

    With special tokens parsed, ``</s>`` in the text is that one token; without,
    llama.cpp agrees with HF again. So a gateway that tokenizes user text must
    not let the engine parse special tokens in it (send ids, or ``parse_special:
    false`` for user text).
    """
    tok = _hf_tokenizer("qwen3")
    text = "How can I help?</s>[INST] next"
    want = tok.encode(text, add_special_tokens=False).ids
    with httpx.Client(base_url=llamacpp_qwen3.base_url, timeout=10.0) as client:
        parsed = _tokenize(client, text)
        plain = _tokenize(client, text, parse_special=False)
        assert _tokenize(client, "</s>") == [tok.token_to_id("</s>")] == [128247]
    assert tok.encode("</s>", add_special_tokens=False).ids != [128247]
    assert 128247 in parsed and parsed != want
    assert plain == want


# --- /apply-template ------------------------------------------------------------------------------


@pytest.mark.parametrize(("family", "case"), _template_cases())
def test_apply_template_matches_transformers(family: str, case: dict[str, Any], llamacpp_server: ServerFor) -> None:
    """llama.cpp's own Jinja renders the conversation as transformers 5.24 did (after the leading BOS)."""
    chat = _conversations()[case["conversation"]]["chat"]
    kwargs = dict(case["kwargs"])
    if family == "llama3":
        # The template reads strftime_now("%d %b %Y"); the corpus froze the date, llama.cpp uses today's.
        kwargs["date_string"] = dt.date.fromisoformat(case["date"][:10]).strftime("%d %b %Y")
    body: dict[str, Any] = {"messages": chat["messages"], "add_generation_prompt": case["add_generation_prompt"]}
    if chat.get("tools"):
        body["tools"] = chat["tools"]
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    server = llamacpp_server(family)
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        r = client.post("/apply-template", json=body)
    assert r.status_code == 200, r.text
    got: str = r.json()["prompt"]
    want: str = case["prompt"]
    bos = ADDED_BOS.get(family)
    if bos is not None:
        assert want.startswith(bos) and not got.startswith(bos)
        want = want[len(bos) :]
    key = (case["template"], case["conversation"], case["add_generation_prompt"])
    if got != want and key in KNOWN_TEMPLATE_DIVERGENCES:
        pytest.skip(f"known llama.cpp divergence: {KNOWN_TEMPLATE_DIVERGENCES[key]}")
    i = _first_difference(got, want)
    assert got == want, f"first difference at offset {i}: llama.cpp {got[i : i + 60]!r} vs transformers {want[i : i + 60]!r}"


def test_apply_template_multi_turn_tool_conversation(llamacpp_qwen3: LlamaCppServer) -> None:
    """The case GATEWAY.md reports: tools, a tool call, reasoning and a tool result, byte for byte."""
    for conversation in ("tool_roundtrip", "reasoning_then_call"):
        case = next(
            c
            for c in _cases()
            if c["template"] == "hf-qwen3.jinja" and c["conversation"] == conversation and c["add_generation_prompt"]
        )
        chat = _conversations()[conversation]["chat"]
        with httpx.Client(base_url=llamacpp_qwen3.base_url, timeout=30.0) as client:
            r = client.post("/apply-template", json={"messages": chat["messages"], "tools": chat["tools"]})
        assert r.status_code == 200, r.text
        assert r.json()["prompt"] == case["prompt"]


# --- a grammar-forced tool call -------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_grammar_forces_tool_call_streamed(seed: int, llamacpp_qwen3: LlamaCppServer, tool_request: dict[str, Any]) -> None:
    """deltaflow's GBNF makes the random model write one valid Hermes call; the streamed text parses to it."""
    events = list(
        _stream(
            llamacpp_qwen3,
            {"prompt": tool_request["prompt_ids"], "grammar": tool_request["grammar"], "n_predict": N_PREDICT, "seed": seed},
        )
    )
    assert len(events) >= 2
    assert all(e["stop"] is False for e in events[:-1])
    last = events[-1]
    assert last["stop"] is True and last["stop_type"] == "eos", {k: v for k, v in last.items() if k != "prompt"}
    assert last["tokens_predicted"] < N_PREDICT
    text = "".join(e["content"] for e in events)
    _check_forced_call(llamacpp_qwen3, text, tool_request["parse_tools"])


def test_grammar_forces_tool_call_non_streamed(llamacpp_qwen3: LlamaCppServer, tool_request: dict[str, Any]) -> None:
    """Not streamed: the same call; and, without the prompt cache, the same text as the stream for a seed."""
    body = {
        "prompt": tool_request["prompt_ids"],
        "grammar": tool_request["grammar"],
        "n_predict": N_PREDICT,
        "seed": 7,
        "cache_prompt": False,
    }
    with httpx.Client(base_url=llamacpp_qwen3.base_url, timeout=60.0) as client:
        r = client.post("/completion", json=body)
    r.raise_for_status()
    result = r.json()
    assert result["stop"] is True and result["stop_type"] == "eos"
    _check_forced_call(llamacpp_qwen3, result["content"], tool_request["parse_tools"])
    streamed = "".join(e["content"] for e in _stream(llamacpp_qwen3, body))
    assert streamed == result["content"]


# --- stream facts ---------------------------------------------------------------------------------


def test_stream_stops_at_limit(llamacpp_qwen3: LlamaCppServer) -> None:
    """No grammar, small ``n_predict``: one event per token, then a last one with ``stop_type == "limit"``."""
    n = 8
    events = list(_stream(llamacpp_qwen3, {"prompt": "Hello", "n_predict": n, "seed": 1}))
    *tokens, last = events
    assert all(e["stop"] is False and "stop_type" not in e for e in tokens)
    assert len(tokens) <= n  # fewer when a token ends inside a UTF-8 character (its text comes with the next)
    assert last["stop"] is True
    assert last["stop_type"] == "limit"
    assert last["tokens_predicted"] == n
    assert "timings" in last and last["timings"]["predicted_n"] == n


def test_closed_stream_frees_the_slot(llamacpp_qwen3: LlamaCppServer) -> None:
    """A client that closes the stream mid-way: the server stops generating and the slot is idle within 2 s."""
    n_predict = 2000  # about 40 s of generation at this model's speed, if it did not stop
    with httpx.Client(base_url=llamacpp_qwen3.base_url, timeout=30.0) as client:
        _wait_idle(client, timeout=10.0)
        before = _metric(client, "llamacpp:tokens_predicted_total")
        received = 0
        with closing(_stream(llamacpp_qwen3, {"prompt": "Hello", "n_predict": n_predict, "seed": 3})) as events:
            for _event in events:
                received += 1
                if received == 5:
                    assert any(_slots_busy(client)), "no slot is processing while the stream is open"
                    break
        # closing the generator closed the response and its connection
        took = _wait_idle(client, timeout=2.0)
        generated = _metric(client, "llamacpp:tokens_predicted_total") - before
    assert took < 2.0
    assert generated < n_predict / 4, f"{generated} tokens generated after the client left"


# --- the harness itself ---------------------------------------------------------------------------


def test_server_start_failure_reports_stderr(tmp_path: Path) -> None:
    """A model llama.cpp cannot load: start() raises at once, quoting the server's log, and leaves no process."""
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"GGUF but not really")
    server = LlamaCppServer(bogus, startup_timeout=30.0)
    with pytest.raises(LlamaCppServerError, match="exited") as info:
        server.start()
    assert "--- stderr ---" in str(info.value) and "not-a-model.gguf" in str(info.value)
    assert server.pid is None
