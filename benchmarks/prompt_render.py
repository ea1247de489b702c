"""``python -m benchmarks.prompt_render``: render + tokenize a prompt, beside transformers' ``apply_chat_template``.

One agent-loop request per model family of ``shared/`` (a tokenizer folder
and a chat template): an OpenAI Chat Completions body with a system prompt
and 19 more messages (3 user turns; 9 assistant turns, of which 7 call a
tool, one at a time, and 3 carry ``reasoning_content``; 7 tool results
holding 30 KB in all, the last message a tool result) and 10 tools with
realistic JSON schemas. A family whose template renders no tools
(``deepseek-v3``'s own) gets the tool-free variant: the same turns, the
calls written as assistant text and the results sent as user messages (the
same 30 KB).

Verify, then measure. Before any time counts, deltaflow's prompt must equal
transformers' ``apply_chat_template(messages, tools=tools,
add_generation_prompt=True, tokenize=False)`` of the same request in the
server form (``shared/templates/README.md``: arguments parsed to objects,
text parts joined, a null assistant content given ``""``), character for
character, and deltaflow's token ids must equal both the tokenizer's
``encode(text, add_special_tokens=False)`` and ``apply_chat_template(...,
tokenize=True)``; the run stops with the first difference otherwise. Every
timed run's result is checked again.

Measured, warm (each compiled template cached, one warm-up run not
counted), ``--runs`` times each, median and p99 (nearest rank; with few
runs it is the slowest):

* (a) ``deltaflow.prompt.render_prompt(body, model=pm)``, end to end: read the
  request, adapt the conversation, render, protect untrusted text, tokenize;
* (b) the same with ``tokens=False`` (read, adapt, render);
* (c) transformers ``apply_chat_template(..., tokenize=False)``;
* (d) transformers ``apply_chat_template(..., tokenize=True)``;
* (e) transformers ``apply_chat_template(..., tokenize=True,
  sanitize_control_tokens=True)``: its own protection of untrusted text, the
  counterpart of what (a) does;
* (ref) ``tokenizers.Tokenizer.encode(text, add_special_tokens=False)`` of
  the final prompt alone: what (d) spends in the Rust tokenizer. It is not
  a floor of (a): deltaflow encodes the pieces between control tokens in one
  ``encode_batch_fast`` call, which is faster than one long ``encode``.

transformers gets the request already in the server form; deltaflow starts
from the body. Ratios are transformers / deltaflow: (c)/(b), (d)/(a),
(e)/(a). The clock is the process CPU time as in the rest of the suite
(``--clock wall``; both are recorded). ``gc.collect()`` runs before every
run, outside the clock, with the objects of the set-up frozen out of it
(``gc.freeze()``: with transformers imported a full collection takes tens
of milliseconds).

Examples::

    python -m benchmarks.prompt_render --quick         # under a minute
    python -m benchmarks.prompt_render --save          # benchmarks/results/<date>-prompt.{json,md}
    python -m benchmarks.prompt_render --families qwen3,llama3 --runs 500
    python -m benchmarks.prompt_render --profile --tool pyinstrument   # where (a)'s time goes

Needs transformers (``pip install 'deltaflow[bench]'``; no torch) and
``shared/`` beside the checkout. Progress goes to stderr, the markdown
report to stdout.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
import gc
import gzip
import io
import json
import math
import pstats
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltaflow.prompt import PromptModel, render_prompt
from deltaflow.testing import shared_dir

from .timing import Policy, Timed, machine_info, measure, set_clock

RESULTS = Path(__file__).resolve().parent / "results"

FULL_RUNS = 200
QUICK_RUNS = 15

# The bytes of tool results in the request, in all (UTF-8; each result overshoots its share by less than one item).
RESULT_BYTES = 30_000


@dataclass(frozen=True)
class Family:
    """A model family: a shared tokenizer folder, a chat template of the shared corpus, the workload's form."""

    key: str
    tokenizer: str
    template: str
    tools: bool = True
    note: str = ""


FAMILIES: dict[str, Family] = {
    f.key: f
    for f in (
        Family("qwen3", "qwen3", "hf-qwen3.jinja"),
        Family("qwen2.5", "qwen2.5", "hf-qwen2.5.jinja"),
        Family("llama3", "llama3", "hf-llama3.jinja"),
        Family(
            "deepseek-v3",
            "deepseek-v3",
            "hf-deepseek-v3.jinja",
            tools=False,
            note="its template renders no tools and no tool calls: the tool-free variant",
        ),
        Family("qwen3+hermes", "qwen3", "vllm-tool_chat_template_hermes.jinja", note="vLLM's Hermes template"),
        Family(
            "deepseek-v3+vllm",
            "deepseek-v3",
            "vllm-tool_chat_template_deepseekv3.jinja",
            note="vLLM's DeepSeek-V3 tool template",
        ),
    )
}


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        sys.exit(
            "benchmarks.prompt_render compares deltaflow with transformers' apply_chat_template, and transformers "
            "is not installed: pip install 'deltaflow[bench]' (or pip install transformers; no torch needed)"
        )
    return transformers


# ----------------------------------------------------------------------------- the workload

_STRING = {"type": "string"}


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def make_tools() -> list[dict[str, Any]]:
    """Ten tools with the kind of JSON schemas agent frameworks send (enums, nested objects, arrays, bounds)."""
    return [
        _fn(
            "web_search",
            "Search the web and return the most relevant pages with a short snippet of each.",
            {
                "query": {"type": "string", "description": "The search query, in natural language or keywords."},
                "num_results": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
                "site": {"type": "string", "description": "Only pages of this domain (e.g. 'docs.python.org')."},
                "freshness": {"type": "string", "enum": ["day", "week", "month", "year", "any"], "default": "any"},
                "safe_search": {"type": "boolean", "default": True},
            },
            ["query"],
        ),
        _fn(
            "read_file",
            "Read a text file of the workspace, optionally a range of its lines.",
            {
                "path": {"type": "string", "description": "Path relative to the workspace root."},
                "start_line": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
                "end_line": {"type": "integer", "minimum": 1, "description": "Last line to read (inclusive)."},
                "encoding": {"type": "string", "enum": ["utf-8", "latin-1", "utf-16"], "default": "utf-8"},
            },
            ["path"],
        ),
        _fn(
            "write_file",
            "Create or overwrite a file of the workspace with the given content.",
            {
                "path": {"type": "string", "description": "Path relative to the workspace root."},
                "content": {"type": "string", "description": "The complete new content of the file."},
                "mode": {"type": "string", "enum": ["overwrite", "append"], "default": "overwrite"},
                "create_dirs": {"type": "boolean", "description": "Create missing parent folders.", "default": False},
            },
            ["path", "content"],
        ),
        _fn(
            "run_shell",
            "Run a shell command in the workspace sandbox and return its exit status, stdout and stderr.",
            {
                "command": {"type": "string", "description": "The command line, run with /bin/sh -c."},
                "cwd": {"type": "string", "description": "Working directory relative to the workspace root."},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 600, "default": 60},
                "env": {
                    "type": "object",
                    "description": "Extra environment variables.",
                    "additionalProperties": {"type": "string"},
                },
            },
            ["command"],
        ),
        _fn(
            "query_database",
            "Run a read-only SQL query against one of the analytics databases.",
            {
                "sql": {"type": "string", "description": "A single SELECT statement; use $1, $2 ... for parameters."},
                "database": {"type": "string", "enum": ["orders", "users", "telemetry", "billing"]},
                "params": {
                    "type": "array",
                    "items": {"type": ["string", "number", "boolean", "null"]},
                    "description": "Values bound to $1, $2 ... in order.",
                },
                "max_rows": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 500},
            },
            ["sql", "database"],
        ),
        _fn(
            "send_email",
            "Send an email on behalf of the user. Ask for confirmation before sending to external addresses.",
            {
                "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
                "cc": {"type": "array", "items": {"type": "string", "format": "email"}},
                "subject": {"type": "string", "maxLength": 200},
                "body": {"type": "string", "description": "Plain-text body; Markdown is rendered by the client."},
                "attachments": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"filename": _STRING, "url": {"type": "string", "format": "uri"}},
                        "required": ["filename", "url"],
                    },
                },
            },
            ["to", "subject", "body"],
        ),
        _fn(
            "create_calendar_event",
            "Create an event in the user's calendar and invite the attendees.",
            {
                "title": {"type": "string"},
                "start": {"type": "string", "format": "date-time", "description": "ISO 8601, with the time zone."},
                "end": {"type": "string", "format": "date-time"},
                "attendees": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"email": {"type": "string", "format": "email"}, "optional": {"type": "boolean"}},
                        "required": ["email"],
                    },
                },
                "location": {"type": "string"},
                "reminders": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "method": {"type": "string", "enum": ["email", "popup"]},
                            "minutes_before": {"type": "integer", "minimum": 0, "maximum": 40320},
                        },
                        "required": ["method", "minutes_before"],
                    },
                },
            },
            ["title", "start", "end"],
        ),
        _fn(
            "http_request",
            "Make an HTTP request to an allow-listed internal service and return the status, headers and body.",
            {
                "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
                "url": {"type": "string", "format": "uri"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "body": {"type": "string", "description": "The request body (JSON text for JSON APIs)."},
                "timeout_s": {"type": "number", "minimum": 1, "maximum": 120, "default": 30},
            },
            ["method", "url"],
        ),
        _fn(
            "search_code",
            "Search the repository's files for a regular expression and return the matching lines.",
            {
                "pattern": {"type": "string", "description": "A regular expression (RE2 syntax)."},
                "path_glob": {"type": "string", "description": "Only files matching this glob, e.g. 'src/**/*.py'."},
                "case_sensitive": {"type": "boolean", "default": True},
                "max_matches": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
            },
            ["pattern"],
        ),
        _fn(
            "get_weather",
            "Get the weather forecast for a place, day by day.",
            {
                "location": {"type": "string", "description": "City and country, e.g. 'München, DE'."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
            },
            ["location"],
        ),
    ]


_WORDS = (
    "latency request worker queue shard replica cache timeout retry deploy config rollout region node "
    "pipeline batch token stream buffer index schema migration release metric alert budget quota p99"
).split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "."


def _grow(make_item: Callable[[int], Any], wrap: Callable[[list[Any]], str], target: int) -> str:
    """``wrap(items)`` with items added until its UTF-8 size reaches ``target``."""
    items: list[Any] = []
    text = wrap(items)
    while len(text.encode()) < target:
        items.append(make_item(len(items)))
        text = wrap(items)
    return text


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)


def _search_result(rng: random.Random, target: int) -> str:
    def item(i: int) -> dict[str, Any]:
        return {
            "title": f"{_sentence(rng, 5)[:-1]} — part {i + 1}",
            "url": f"https://engineering.example.com/blog/{rng.randrange(2019, 2027)}/{rng.choice(_WORDS)}-{i}",
            "snippet": " ".join(_sentence(rng, rng.randrange(8, 16)) for _ in range(2)),
            "published": f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
        }

    return _grow(item, lambda xs: _dumps({"query": "tail latency after cache rollout", "results": xs}), target)


def _file_result(rng: random.Random, target: int) -> str:
    def item(i: int) -> str:
        name = rng.choice(_WORDS)
        return (
            f"{i * 6 + 1:>4}  def {name}_{i}(self, {rng.choice(_WORDS)}: int, *, timeout: float = 30.0) -> dict:\n"
            f"{i * 6 + 2:>4}      \"\"\"{_sentence(rng, 7)}\"\"\"\n"
            f"{i * 6 + 3:>4}      if {name} > self.limits[\"{name}\"]:\n"
            f"{i * 6 + 4:>4}          raise ValueError(f\"{name} {{ {name} }} is over the limit\")\n"
            f"{i * 6 + 5:>4}      return {{\"{name}\": {name}, \"ok\": True, \"path\": \"C:\\\\tmp\\\\{name}\"}}\n"
            f"{i * 6 + 6:>4}\n"
        )

    return _grow(item, lambda xs: "".join(xs), target)


def _table_result(rng: random.Random, target: int) -> str:
    columns = ["region", "day", "requests", "p50_ms", "p99_ms", "errors"]

    def item(i: int) -> list[Any]:
        return [
            rng.choice(["eu-west-1", "us-east-2", "ap-south-1", "sa-east-1"]),
            f"2026-01-{1 + i % 28:02d}",
            rng.randrange(10_000, 900_000),
            round(rng.uniform(3, 40), 2),
            round(rng.uniform(80, 900), 2),
            rng.randrange(0, 500),
        ]

    return _grow(item, lambda xs: json.dumps({"columns": columns, "rows": xs, "row_count": len(xs)}), target)


def _log_result(rng: random.Random, target: int) -> str:
    def item(i: int) -> str:
        level = rng.choice(["INFO", "INFO", "INFO", "WARN", "ERROR"])
        return (
            f"2026-01-15T09:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randrange(1000):03d}Z {level:<5} "
            f"worker-{rng.randrange(8)} {_sentence(rng, rng.randrange(5, 12))} (job={rng.randrange(10**6)}, "
            f"took {rng.randrange(1, 900)} ms)\n"
        )

    return _grow(item, lambda xs: "exit status 0\n--- stdout ---\n" + "".join(xs), target)


def _http_result(rng: random.Random, target: int) -> str:
    def item(i: int) -> dict[str, Any]:
        return {
            "id": f"inc-{4000 + i}",
            "service": rng.choice(_WORDS) + "-svc",
            "severity": rng.choice(["sev1", "sev2", "sev3"]),
            "summary": _sentence(rng, rng.randrange(6, 14)),
            "owners": [f"{rng.choice(['ana', 'jörg', 'li', 'sam', 'zoë'])}@example.com"],
            "resolved": rng.random() < 0.7,
        }

    return _grow(
        item,
        lambda xs: _dumps(
            {"status": 200, "headers": {"content-type": "application/json", "x-request-id": "9f2c7e"}, "body": xs}
        ),
        target,
    )


def _code_result(rng: random.Random, target: int) -> str:
    def item(i: int) -> dict[str, Any]:
        name = rng.choice(_WORDS)
        return {
            "path": f"src/{rng.choice(_WORDS)}/{name}.py",
            "line": rng.randrange(1, 2000),
            "text": f"    retries = self.{name}_retries if {name} else {rng.randrange(1, 9)}  # {_sentence(rng, 4)}",
        }

    return _grow(item, lambda xs: json.dumps({"matches": xs, "truncated": False}, ensure_ascii=False), target)


def _weather_result(rng: random.Random, target: int) -> str:
    def item(i: int) -> dict[str, Any]:
        return {
            "date": f"2026-01-{15 + i % 14:02d}",
            "high_c": rng.randrange(-5, 12),
            "low_c": rng.randrange(-12, 2),
            "conditions": rng.choice(["Schneefall", "bewölkt", "sonnig", "Nebel", "leichter Regen"]),
            "precip_mm": round(rng.uniform(0, 14), 1),
            "wind_kmh": rng.randrange(2, 45),
            "note": "Temperatures in °C; " + _sentence(rng, 6),
        }

    return _grow(item, lambda xs: _dumps({"location": "München, DE", "unit": "celsius", "forecast": xs}), target)


# (tool, arguments, result maker, share of RESULT_BYTES, assistant content, reasoning)
_PHASES: list[tuple[str, list[tuple[str, dict[str, Any], Any, int, str | None, str | None]], str]] = [
    (
        "Our p99 latency doubled after yesterday's cache rollout. Find out what is known about this kind of "
        "regression and look at our cache client.",
        [
            (
                "web_search",
                {"query": "tail latency after cache rollout", "num_results": 8, "freshness": "year"},
                _search_result,
                6,
                None,
                "The user wants background first; search, then read the client code.",
            ),
            ("read_file", {"path": "src/cache/client.py", "start_line": 1, "end_line": 400}, _file_result, 5,
             "Now the client itself.", None),
        ],
        "The likely culprit is the retry loop in `client.py`: it retries on timeouts without a budget, so a slow "
        "shard multiplies its own load. The search results describe the same pattern.",
    ),
    (
        "Check the numbers: how did p99 move per region over the last two weeks, and what do the worker logs say?",
        [
            (
                "query_database",
                {
                    "sql": "SELECT region, day, requests, p50_ms, p99_ms, errors FROM latency_daily "
                    "WHERE day >= $1 ORDER BY day",
                    "database": "telemetry",
                    "params": ["2026-01-01"],
                    "max_rows": 1000,
                },
                _table_result,
                5,
                None,
                None,
            ),
            ("run_shell", {"command": "tail -n 400 /var/log/cache/worker.log", "timeout_s": 20}, _log_result, 5,
             None, None),
        ],
        "p99 rose in every region on the 14th, most in eu-west-1 (x2.3); the logs show retries piling up on "
        "worker-3 and worker-5 from 09:12 on.",
    ),
    (
        "Look up the open incidents for the cache service and the weather for the on-site review in München "
        "before you draft the post-mortem invite.",
        [
            (
                "http_request",
                {"method": "GET", "url": "https://incidents.internal/api/v2/incidents?service=cache&state=open",
                 "headers": {"accept": "application/json"}},
                _http_result,
                4,
                None,
                "Incidents first: the invite should link the open ones. Then the weather, for the travel note.",
            ),
            (
                "search_code",
                {"pattern": "retr(y|ies)\\s*=", "path_glob": "src/**/*.py", "max_matches": 200},
                _code_result,
                4,
                None,
                None,
            ),
            (
                "get_weather",
                {"location": "München, DE", "unit": "celsius", "days": 7},
                _weather_result,
                3,
                "Now the forecast for München.",
                "Two incidents are still open; the review is on site, so check the weather for the travel day.",
            ),
        ],
        "",
    ),
]


def make_body(tools: bool = True, seed: int = 16) -> dict[str, Any]:
    """The request: a Chat Completions body (see the module docstring).

    Args:
        tools: the form with tools and tool calls; False: the tool-free
            variant (calls as assistant text, results as user messages).
        seed: the generator's seed (the text is the same for the same seed).
    """
    rng = random.Random(seed)
    shares = sum(call[3] for _, calls, _ in _PHASES for call in calls)
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are an SRE assistant with access to tools. Think before you act, call one tool at a time, "
            "and cite the tool results you rely on. Today is 2026-01-15.",
        }
    ]
    n = 0
    for user, calls, answer in _PHASES:
        messages.append({"role": "user", "content": user})
        for name, args, result, share, content, reasoning in calls:
            n += 1
            text = result(rng, RESULT_BYTES * share // shares)
            if tools:
                call_id = f"call_{n:02d}{rng.randrange(16**8):08x}"
                msg: dict[str, Any] = {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {"id": call_id, "type": "function",
                         "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
                    ],
                }
                result_msg: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": text}
            else:
                said = f"{content + ' ' if content else ''}Calling {name} with {json.dumps(args, ensure_ascii=False)}."
                msg = {"role": "assistant", "content": said}
                result_msg = {"role": "user", "content": f"Result of {name}:\n{text}"}
            if reasoning is not None:
                msg["reasoning_content"] = reasoning
            messages += [msg, result_msg]
        if answer:
            messages.append({"role": "assistant", "content": answer})
    body: dict[str, Any] = {"model": "bench", "messages": messages}
    if tools:
        body["tools"] = make_tools()
    return body


def server_form(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools as servers hand them to a template (``shared/templates/README.md``), on copies.

    Assistant ``tool_calls[].function.arguments`` parsed into objects, text
    parts joined with ``"\\n"``, a null assistant content given ``""``.
    """
    messages = []
    for raw in body["messages"]:
        m = dict(raw)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
        if m["role"] == "assistant":
            if m.get("content") is None:
                m["content"] = ""
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                    for c in m["tool_calls"]
                ]
        messages.append(m)
    return messages, body.get("tools")


def workload_facts(body: dict[str, Any]) -> dict[str, Any]:
    """Counts of the request: messages by role, tools, tool calls, reasoning fields, tool-result bytes."""
    msgs = body["messages"]
    results = [m["content"] for m in msgs if m["role"] == "tool"] or [
        m["content"].partition("\n")[2] for m in msgs if m["role"] == "user" and m["content"].startswith("Result of ")
    ]
    return {
        "messages": len(msgs),
        "by_role": {r: sum(m["role"] == r for m in msgs) for r in ("system", "user", "assistant", "tool")},
        "tools": len(body.get("tools") or ()),
        "tool_calls": sum(len(m.get("tool_calls") or ()) for m in msgs),
        "reasoning_fields": sum("reasoning_content" in m for m in msgs),
        "result_bytes": sum(len(r.encode()) for r in results),
        "body_bytes": len(json.dumps(body, ensure_ascii=False).encode()),
    }


# ----------------------------------------------------------------------------- set-up and verification


@dataclass
class Setup:
    """One family, loaded: deltaflow's model, transformers' tokenizer, the request and the verified result."""

    family: Family
    pm: PromptModel
    hf: Any  # transformers PreTrainedTokenizerFast
    raw: Any  # tokenizers.Tokenizer (the reference ids, and the (ref) case)
    body: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    text: str = ""
    ids: list[int] | None = None


def _load_tokenizer(folder: Path) -> Any:
    import tokenizers

    path = folder / "tokenizer.json"
    text = path.read_text(encoding="utf-8") if path.is_file() else gzip.decompress(
        (folder / "tokenizer.json.gz").read_bytes()
    ).decode("utf-8")
    return tokenizers.Tokenizer.from_str(text)


def load(family: Family, shared: Path) -> Setup:
    """Load a family: deltaflow's :class:`PromptModel` and transformers' tokenizer with the same template."""
    transformers = _transformers()
    folder = shared / "tokenizers" / family.tokenizer
    template = shared / "templates" / family.template
    for p in (folder, template):
        if not p.exists():
            sys.exit(f"{family.key}: {p} is missing (the shared tokenizers and templates)")
    pm = PromptModel.from_folder(folder, template_file=template)
    if pm.template is None:
        sys.exit(f"{family.key}: no chat template loaded from {template}")
    special = dict(pm.template.special_tokens)  # tokenizer_config.json's, as deltaflow reads them
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=_load_tokenizer(folder), **special)
    hf.chat_template = pm.template.source
    body = make_body(tools=family.tools)
    messages, tools = server_form(body)
    return Setup(family, pm, hf, _load_tokenizer(folder), body, messages, tools)


def _first_difference(got: Any, want: Any) -> str:
    i = next((j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return (
        f"at index {i} (lengths {len(got)} / {len(want)}): deltaflow {got[max(0, i - 40):i + 40]!r} "
        f"vs transformers {want[max(0, i - 40):i + 40]!r}"
    )


def _render_df(s: Setup, tokens: bool = True) -> Any:
    return render_prompt(s.body, model=s.pm, tokens=tokens)


def _render_tf(s: Setup, tokenize: bool, sanitize: bool = False) -> Any:
    kwargs = {"sanitize_control_tokens": True} if sanitize else {}
    out = s.hf.apply_chat_template(s.messages, tools=s.tools, add_generation_prompt=True, tokenize=tokenize, **kwargs)
    return out if not tokenize else list(out["input_ids"])


def verify(s: Setup) -> None:
    """Check deltaflow against transformers on the family's request; exit with the first difference."""
    key = s.family.key
    want = _render_tf(s, tokenize=False)
    got = _render_df(s)
    if got.text != want:
        sys.exit(
            f"FAIL {key}: deltaflow's prompt differs from transformers' apply_chat_template(tokenize=False) "
            f"{_first_difference(got.text, want)}; nothing measured"
        )
    if _render_df(s, tokens=False).text != want:
        sys.exit(f"FAIL {key}: render_prompt(tokens=False) differs from the tokenized render's text")
    if got.plain_spans:
        sys.exit(f"FAIL {key}: the workload has marker text in untrusted values ({len(got.plain_spans)} spans)")
    ref = s.raw.encode(want, add_special_tokens=False).ids
    if got.token_ids != ref:
        sys.exit(
            f"FAIL {key}: deltaflow's ids differ from tokenizer.encode(text, add_special_tokens=False) "
            f"{_first_difference(got.token_ids or [], ref)}"
        )
    tf_ids = _render_tf(s, tokenize=True)
    if tf_ids != ref:
        sys.exit(f"FAIL {key}: deltaflow's ids differ from apply_chat_template(tokenize=True) "
                 f"{_first_difference(ref, tf_ids)}")
    s.text, s.ids = want, ref


# ----------------------------------------------------------------------------- measuring


def _p99(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def _cases(s: Setup) -> list[tuple[str, str, Callable[[], Any], Callable[[Any], str | None]]]:
    text, ids = s.text, s.ids

    def text_is(got: str) -> str | None:
        return None if got == text else "the prompt differs from the verified one"

    def ids_are(got: list[int]) -> str | None:
        return None if got == ids else "the ids differ from the verified ones"

    def df_full(r: Any) -> str | None:
        return text_is(r.text) or ids_are(r.token_ids)

    return [
        ("a", "deltaflow render_prompt (read, render, protect, tokenize)", lambda: _render_df(s), df_full),
        ("b", "deltaflow render_prompt(tokens=False)", lambda: _render_df(s, tokens=False), lambda r: text_is(r.text)),
        ("c", "transformers apply_chat_template(tokenize=False)", lambda: _render_tf(s, False), text_is),
        ("d", "transformers apply_chat_template(tokenize=True)", lambda: _render_tf(s, True), ids_are),
        ("e", "transformers tokenize=True, sanitize_control_tokens=True", lambda: _render_tf(s, True, True), ids_are),
        ("ref", "tokenizers encode(text) alone", lambda: s.raw.encode(text, add_special_tokens=False).ids, ids_are),
    ]


def _row(case: str, what: str, outcome: Timed | str) -> dict[str, Any]:
    if isinstance(outcome, str):
        return {"case": case, "what": what, "status": "FAIL", "error": outcome}
    t = outcome.times
    return {
        "case": case,
        "what": what,
        "status": "OK",
        "runs": len(t),
        "median_s": statistics.median(t),
        "p99_s": _p99(t),
        "min_s": min(t),
        "mean_s": statistics.fmean(t),
        "wall_median_s": outcome.median_wall,
        "wall_p99_s": _p99(outcome.wall),
    }


def _ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    by = {r["case"]: r for r in rows if r["status"] == "OK"}
    out = {}
    for tf, df in (("c", "b"), ("d", "a"), ("e", "a")):
        if tf in by and df in by:
            out[f"{tf}/{df}"] = by[tf]["median_s"] / by[df]["median_s"]
    return out


def run_family(s: Setup, runs: int) -> dict[str, Any]:
    """Measure every case of a verified family."""
    policy = Policy(min_runs=runs, min_time=0.0, max_runs=runs, long_run=math.inf)
    rows = []
    for case, what, run, check in _cases(s):
        row = _row(case, what, measure(run, policy, check))
        rows.append(row)
        if row["status"] == "OK":
            _say(f"  {s.family.key:<17} ({case}) {what:<58} {row['median_s'] * 1e3:8.3f} ms median, "
                 f"{row['p99_s'] * 1e3:8.3f} ms p99")
        else:
            sys.exit(f"FAIL {s.family.key} ({case}) {what}: {row['error']}")
    return {
        "family": s.family.key,
        "tokenizer": s.family.tokenizer,
        "template": s.family.template,
        "tools": s.family.tools,
        "note": s.family.note,
        "workload": workload_facts(s.body),
        "prompt_chars": len(s.text),
        "prompt_bytes": len(s.text.encode()),
        "prompt_tokens": len(s.ids or ()),
        "rows": rows,
        "ratios": _ratios(rows),
    }


# ----------------------------------------------------------------------------- report


def _ms(row: dict[str, Any], key: str) -> str:
    return f"{row[key] * 1e3:.3f}" if row.get("status") == "OK" else "FAIL"


def render_markdown(report: dict[str, Any]) -> str:
    """The report's tables: one per family, then a summary."""
    out = [f"# Prompt render + tokenize, deltaflow vs transformers ({report['date']})", ""]
    m = report["machine"]
    out.append(
        f"`{report['command']}` — {m.get('cpu')}, {m.get('cores')} cores, Python {m.get('python')}, "
        f"transformers {m.get('transformers')}, tokenizers {m.get('tokenizers')}, jinja2 {m.get('jinja2')}, "
        f"deltaflow {m.get('deltaflow_commit')}; clock: {report['config']['clock']}, "
        f"{report['config']['runs']} runs per case (+1 warm-up)."
    )
    out.append("")
    out.append(
        "Every prompt was first checked equal to transformers' (text and ids). (a) and (b) start from the request "
        "body (read and validated); (c)-(e) get the messages already in the server form. p99 is the nearest rank "
        "(with few runs, the slowest run). Ratios: transformers / deltaflow, on the medians."
    )
    out.append("")
    for fam in report["families"]:
        w = fam["workload"]
        note = f"; {fam['note']}" if fam["note"] else ""
        out.append(
            f"## {fam['family']} (`{fam['template']}`, tokenizer `{fam['tokenizer']}`{note})"
        )
        out.append("")
        out.append(
            f"{w['messages']} messages, {w['tools']} tools, {w['tool_calls']} tool calls, "
            f"{w['reasoning_fields']} reasoning_content, {w['result_bytes']:,} B of tool results "
            f"(body {w['body_bytes']:,} B) -> prompt of {fam['prompt_chars']:,} chars, {fam['prompt_tokens']:,} tokens"
        )
        out.append("")
        out.append("| case | median ms | p99 ms | min ms | wall median ms | transformers / deltaflow |")
        out.append("|---|---:|---:|---:|---:|---:|")
        ratio_of = {"c": "c/b", "d": "d/a", "e": "e/a"}
        for r in fam["rows"]:
            key = ratio_of.get(r["case"])
            ratio = fam["ratios"].get(key) if key else None
            shown = f"{ratio:.2f}× ({key})" if ratio is not None else ""
            label = f"({r['case']}) {r['what']}"
            out.append(
                f"| {label} | {_ms(r, 'median_s')} | {_ms(r, 'p99_s')} | {_ms(r, 'min_s')} | "
                f"{_ms(r, 'wall_median_s')} | {shown} |"
            )
        out.append("")
    out.append("## Summary (medians, ms)")
    out.append("")
    out.append("| family | prompt tokens | (a) df e2e | (b) df render | (c) tf text | (d) tf ids | (e) tf sanitized "
               "| (ref) encode | (c)/(b) | (d)/(a) | (e)/(a) |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for fam in report["families"]:
        by = {r["case"]: r for r in fam["rows"]}
        cells = [_ms(by[c], "median_s") if c in by else "" for c in ("a", "b", "c", "d", "e", "ref")]
        ratios = [f"{fam['ratios'][k]:.2f}×" if k in fam["ratios"] else "" for k in ("c/b", "d/a", "e/a")]
        out.append(f"| {fam['family']} | {fam['prompt_tokens']:,} | " + " | ".join(cells + ratios) + " |")
    out.append("")
    return "\n".join(out)


# ----------------------------------------------------------------------------- profiling


def profile(s: Setup, runs: int, tool: str, top: int) -> str:
    """Profile ``runs`` runs of case (a) on a verified family; return the profiler's text."""
    if tool == "pyinstrument":
        try:
            from pyinstrument import Profiler
        except ImportError:
            sys.exit("pyinstrument is not installed: pip install pyinstrument")
        prof = Profiler(interval=0.0002)
        prof.start()
        for _ in range(runs):
            _render_df(s)
        prof.stop()
        return str(prof.output_text(unicode=False, color=False))
    pr = cProfile.Profile(time.process_time)  # CPU time: the machine may be shared
    pr.enable()
    for _ in range(runs):
        _render_df(s)
    pr.disable()
    out = io.StringIO()
    stats = pstats.Stats(pr, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


# ----------------------------------------------------------------------------- command line


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.prompt_render", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} runs per case instead of {FULL_RUNS}")
    ap.add_argument("--families", help=f"comma list from {', '.join(FAMILIES)} (default: all)")
    ap.add_argument("--runs", type=int, help="timed runs per case (overrides --quick)")
    ap.add_argument("--clock", default="cpu", choices=("cpu", "wall"), help="cpu: process CPU time (default); wall")
    ap.add_argument("--json", help="write the report as JSON here")
    ap.add_argument("--markdown", help="write the markdown report here")
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/<date>-prompt[-quick].{json,md}")
    ap.add_argument("--profile", nargs="?", const="", metavar="FAMILY",
                    help="verify, then profile case (a) instead of measuring (default family: the largest prompt)")
    ap.add_argument("--tool", default="cprofile", choices=("cprofile", "pyinstrument"), help="the profiler")
    ap.add_argument("--top", type=int, default=30, help="cProfile: functions shown per listing")
    return ap.parse_args(argv)


def _machine() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    info = machine_info()
    for pkg in ("transformers", "jinja2"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            info[pkg] = None
    return info


def main(argv: list[str] | None = None) -> int:
    """Verify, then measure (or profile) every selected family; print the markdown report."""
    a = _args(argv)
    _transformers()
    shared = shared_dir()
    if shared is None:
        sys.exit("benchmarks.prompt_render needs ../shared (tokenizers and templates) beside the checkout, "
                 "or $DELTAFLOW_SHARED")
    keys = [k.strip() for k in a.families.split(",")] if a.families else list(FAMILIES)
    unknown = [k for k in keys if k not in FAMILIES]
    if unknown:
        sys.exit(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    if a.profile:
        if a.profile not in FAMILIES:
            sys.exit(f"unknown family {a.profile!r}; known: {', '.join(FAMILIES)}")
        keys = [a.profile]
    set_clock(a.clock)
    started = time.perf_counter()
    setups = []
    for key in keys:
        s = load(FAMILIES[key], shared)
        verify(s)
        _say(f"{key}: verified — {len(s.text):,} chars, {len(s.ids or ()):,} tokens, equal to transformers'")
        setups.append(s)
    runs = a.runs or (QUICK_RUNS if a.quick else FULL_RUNS)
    if a.profile is not None:
        largest = max(setups, key=lambda s: len(s.ids or ()))
        _say(f"profiling (a) on {largest.family.key} ({len(largest.ids or ()):,} tokens), {runs} runs, {a.tool}")
        print(profile(largest, runs, a.tool, a.top))
        return 0
    gc.collect()
    gc.freeze()  # the set-up's objects (transformers' modules): out of the collections before each run
    report: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "command": "python -m benchmarks.prompt_render "
        + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
        "machine": _machine(),
        "config": {"quick": a.quick, "runs": runs, "clock": a.clock, "families": keys,
                   "result_bytes_target": RESULT_BYTES},
        "families": [run_family(s, runs) for s in setups],
    }
    report["machine"]["load_avg_at_end"] = machine_info().get("load_avg_at_start")
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    md = render_markdown(report)
    if a.save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stem = f"{report['date']}-prompt" + ("-quick" if a.quick else "")
        a.json = a.json or str(RESULTS / f"{stem}.json")
        a.markdown = a.markdown or str(RESULTS / f"{stem}.md")
    outputs = []
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        outputs.append(f"json: {a.json}")
    if a.markdown:
        Path(a.markdown).write_text(md, encoding="utf-8")
        outputs.append(f"markdown: {a.markdown}")
    print(md)
    for o in outputs:
        _say(o)
    _say(f"elapsed: {report['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
