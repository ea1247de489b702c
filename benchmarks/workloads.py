"""Workloads generated in code: model outputs, the parsers they need, and the expected result.

Every workload carries the exact message a correct parser must rebuild
(calls with their decoded arguments, content, reasoning), so each run is
verified before its time is reported. The keys of the workloads that the
peer harness also measures (``W1-1k``, ``W1-16k``, ``W1-64k``,
``W2-2000str``, ``W3-think+3calls``, ``W4-glm47-16k``,
``W4-qwen3coder-16k``) match its keys and sizes, so results can be put side
by side; the texts are generated here, independently.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = (
    "Call",
    "Workload",
    "build",
    "code_like",
    "registry_names",
    "text_chunks",
    "token_text_chunks",
    "WORKLOADS",
)

Call = tuple[str, dict[str, Any]]

# Lines of code-like text: double and single quotes, backslashes, tabs, '<' and
# '{' (which are tags or JSON in other contexts), and CJK, so the JSON encoding
# of the text is dense with escapes and the XML form contains '<' that is no tag.
_LINES = (
    'def f_{n}(x, sep="\\t", label="标签"):',
    '    return {{"id": {n}, "path": "C:\\\\tmp\\\\f{n}.txt", \'ok\': True}}',
    '    s = "a \\"quoted\\" word" + \'it\\\'s\'  # 注释 {n}',
    '    if x < {n} and x > -1: print(f"值={{x!r}}\\n")',
    '    rx = re.compile(r"^\\s*(\\w+)\\\\$")',
    '    template<typename T> T max_{n}(T a, T b) {{ return a > b ? a : b; }}',
    '    """Docstring: ‘curly’ quotes, 中文说明, emoji-free."""',
    '    SQL = "SELECT name FROM users WHERE id = {n} AND tag = \'新\'"',
    "",
    "class C{n}:",
    '\tbuf = "line1\\nline2\\r\\n\\ttabbed"',
)


def code_like(n_chars: int, seed: int = 7) -> str:
    """Deterministic code-like text of exactly ``n_chars`` characters (see ``_LINES``)."""
    rnd = random.Random(seed)
    parts: list[str] = []
    total = 0
    n = 0
    while total < n_chars:
        line = rnd.choice(_LINES).format(n=n) + "\n"
        parts.append(line)
        total += len(line)
        n += 1
    return "".join(parts)[:n_chars]


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


WRITE_FILE = _tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}})
STORE_ITEMS = _tool("store_items", {"items": {"type": "array", "items": {"type": "string"}}})
W3_TOOLS = [
    _tool("get_weather", {"city": {"type": "string"}, "unit": {"type": "string"}}),
    _tool("search_docs", {"query": {"type": "string"}, "limit": {"type": "integer"}}),
    _tool("read_file", {"path": {"type": "string"}}),
]


@dataclass
class Workload:
    """One model output and what parsing it must give.

    Attributes:
        key: the name used in reports and on the command line.
        group: W1 ... W6.
        text: the raw model output.
        tool_parser: the registered tool parser it needs.
        reasoning_parser: the registered reasoning parser, if any.
        tools: the request's tools.
        calls: expected ``(name, arguments)`` in order.
        content: expected content, compared after ``strip()`` (None: no content).
        reasoning: expected reasoning, compared after ``strip()`` (None: none).
        arg_chars: characters of the largest argument value (for plots).
        token_source: feed token ids through the detokenizer (W6).
        note: one line for the report.
    """

    key: str
    group: str
    text: str
    tool_parser: str
    reasoning_parser: str | None
    tools: list[dict[str, Any]]
    calls: list[Call]
    content: str | None = None
    reasoning: str | None = None
    arg_chars: int = 0
    token_source: bool = False
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def chars(self) -> int:
        """Characters of the output."""
        return len(self.text)

    @property
    def utf8_bytes(self) -> int:
        """UTF-8 bytes of the output (MB/s is computed from these)."""
        return len(self.text.encode("utf-8"))


def _hermes(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def make_w1(n_chars: int, label: str) -> Workload:
    """W1: one hermes ``write_file`` call whose ``content`` is ``n_chars`` of code-like text."""
    args = {"path": "src/app.py", "content": code_like(n_chars, seed=n_chars)}
    return Workload(
        key=f"W1-{label}", group="W1", text=_hermes("write_file", args), tool_parser="hermes",
        reasoning_parser=None, tools=[WRITE_FILE], calls=[("write_file", args)], arg_chars=n_chars,
        note=f"hermes, one write_file call, content {label} of code-like text",
    )


def make_w2(n_items: int = 2000) -> Workload:
    """W2: one call whose arguments hold an array of ``n_items`` short strings."""
    rnd = random.Random(2)
    words = ("alpha", "beta", "δέλτα", "数据", 'q"t', "b\\s", "tab\t", "ok", "<x>")
    args = {"items": [f"{rnd.choice(words)}-{i}" for i in range(n_items)]}
    return Workload(
        key="W2-2000str", group="W2", text=_hermes("store_items", args), tool_parser="hermes",
        reasoning_parser=None, tools=[STORE_ITEMS], calls=[("store_items", args)],
        arg_chars=len(json.dumps(args, ensure_ascii=False)),
        note=f"hermes, one call, array of {n_items} short strings",
    )


_THOUGHTS = (
    "The user asks for the weather and some documentation, so two tools are needed.",
    'The "unit" argument defaults to celsius; I should pass it explicitly.',
    "Edge cases: an empty query, a path with \\ backslashes, a < b comparisons.",
    "用户想知道天气，还需要查文档。",
    "Reading C:\\repo\\README.md gives the project context.",
)
W3_CALLS: list[Call] = [
    ("get_weather", {"city": "San Francisco", "unit": "celsius"}),
    ("search_docs", {"query": 'streaming "tool" parser 解析', "limit": 5}),
    ("read_file", {"path": "C:\\repo\\README.md"}),
]
W3_CONTENT = "I'll look these up in parallel."


def reasoning_text(n_chars: int, seed: int = 3) -> str:
    """Deterministic reasoning prose of about ``n_chars`` characters (stripped)."""
    rnd = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < n_chars:
        s = rnd.choice(_THOUGHTS) + (" " if rnd.random() < 0.8 else "\n")
        parts.append(s)
        total += len(s)
    return "".join(parts)[:n_chars].strip()


def make_w3(reasoning_chars: int = 4096, key: str = "W3-think+3calls") -> Workload:
    """W3: Qwen3 output, ``<think>`` reasoning, one line of content, 3 parallel hermes calls."""
    reasoning = reasoning_text(reasoning_chars)
    text = (
        "<think>\n" + reasoning + "\n</think>\n\n" + W3_CONTENT + "\n"
        + "\n".join(_hermes(n, a) for n, a in W3_CALLS)
    )
    return Workload(
        key=key, group="W3", text=text, tool_parser="hermes", reasoning_parser="qwen3", tools=W3_TOOLS,
        calls=list(W3_CALLS), content=W3_CONTENT, reasoning=reasoning, arg_chars=reasoning_chars,
        note=f"Qwen3: <think> {reasoning_chars} chars </think>, short content, 3 parallel calls",
    )


def make_w4_qwen3_coder(n_chars: int = 16384) -> Workload:
    """W4: Qwen3-Coder XML, one ``write_file`` call with an ``n_chars`` string parameter."""
    content = code_like(n_chars, seed=5)
    text = (
        "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/app.py\n</parameter>\n"
        "<parameter=content>\n" + content + "\n</parameter>\n</function>\n</tool_call>"
    )
    args = {"path": "src/app.py", "content": content}
    return Workload(
        key="W4-qwen3coder-16k", group="W4", text=text, tool_parser="qwen3_coder", reasoning_parser=None,
        tools=[WRITE_FILE], calls=[("write_file", args)], arg_chars=n_chars,
        note="Qwen3-Coder XML, 16 KB string parameter",
    )


def make_w4_glm47(n_chars: int = 16384) -> Workload:
    """W4: GLM-4.7 XML (``<arg_key>``/``<arg_value>``), one call with an ``n_chars`` string value."""
    content = code_like(n_chars, seed=4)
    text = (
        "<tool_call>write_file<arg_key>path</arg_key><arg_value>src/app.py</arg_value>"
        "<arg_key>content</arg_key><arg_value>" + content + "</arg_value></tool_call>"
    )
    args = {"path": "src/app.py", "content": content}
    return Workload(
        key="W4-glm47-16k", group="W4", text=text, tool_parser="glm47", reasoning_parser=None,
        tools=[WRITE_FILE], calls=[("write_file", args)], arg_chars=n_chars,
        note="GLM-4.7 XML, 16 KB string value (enable_thinking=False)", meta={"enable_thinking": False},
    )


def make_w5_harmony(reasoning_chars: int = 4096, n_chars: int = 16384) -> Workload:
    """W5: gpt-oss Harmony: an analysis message, then one commentary call with a 16 KB argument."""
    reasoning = reasoning_text(reasoning_chars, seed=11)
    args = {"path": "src/app.py", "content": code_like(n_chars, seed=6)}
    text = (
        "<|channel|>analysis<|message|>" + reasoning + "<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>"
        + json.dumps(args, ensure_ascii=False) + "<|call|>"
    )
    return Workload(
        key="W5-harmony-16k", group="W5", text=text, tool_parser="openai", reasoning_parser="openai_gptoss",
        tools=[WRITE_FILE], calls=[("write_file", args)], reasoning=reasoning, arg_chars=n_chars,
        note="gpt-oss Harmony: 4 KB analysis, one commentary call with a 16 KB argument",
    )


def make_w6(base: Callable[[], Workload], key: str) -> Workload:
    """W6: the same output as ``base()``, given as token ids (decoded by the detokenize stage)."""
    wl = base()
    wl.key = key
    wl.group = "W6"
    wl.token_source = True
    wl.note = "token ids (real Qwen3 tokenizer) -> detokenize -> " + wl.note
    return wl


# Builders by key; W4/W5 need parsers that other work registers (checked at run time).
WORKLOADS: dict[str, Callable[[], Workload]] = {
    "W1-1k": lambda: make_w1(1024, "1k"),
    "W1-16k": lambda: make_w1(16 * 1024, "16k"),
    "W1-64k": lambda: make_w1(64 * 1024, "64k"),
    "W1-1m": lambda: make_w1(1024 * 1024, "1m"),
    "W2-2000str": make_w2,
    "W3-think+3calls": make_w3,
    "W4-qwen3coder-16k": make_w4_qwen3_coder,
    "W4-glm47-16k": make_w4_glm47,
    "W5-harmony-16k": make_w5_harmony,
    "W6-qwen3-W3": lambda: make_w6(make_w3, "W6-qwen3-W3"),
    "W6-qwen3-W1-16k": lambda: make_w6(lambda: make_w1(16 * 1024, "16k"), "W6-qwen3-W1-16k"),
}


def build(key: str) -> Workload:
    """Build the workload named ``key``.

    Raises:
        KeyError: an unknown key (the message lists the known ones).
    """
    try:
        return WORKLOADS[key]()
    except KeyError:
        raise KeyError(f"unknown workload {key!r}; known: {', '.join(WORKLOADS)}") from None


def registry_names() -> tuple[frozenset[str], frozenset[str]]:
    """The tool and reasoning parser names registered right now."""
    from deltaflow.parsers import registry

    return frozenset(registry.tool_dialect_names()), frozenset(registry.reasoning_dialect_names())


def missing_parsers(wl: Workload) -> str | None:
    """Why ``wl`` cannot run with the parsers registered now (None when it can)."""
    tools, reasoning = registry_names()
    if wl.tool_parser not in tools:
        return f"tool parser {wl.tool_parser!r} is not registered (registered: {', '.join(sorted(tools))})"
    if wl.reasoning_parser is not None and wl.reasoning_parser not in reasoning:
        return (
            f"reasoning parser {wl.reasoning_parser!r} is not registered "
            f"(registered: {', '.join(sorted(reasoning))})"
        )
    return None


def text_chunks(text: str, k: int) -> list[str]:
    """Split ``text`` into chunks of exactly ``k`` characters (the last may be shorter).

    Chunk ends fall anywhere, inside markers too (deltaflow's default
    ``chunking="any"`` must handle that).
    """
    return [text[i : i + k] for i in range(0, len(text), k)] or [""]


def token_text_chunks(text: str, tokenizer: Any) -> list[str]:
    """Split ``text`` where a real tokenizer's tokens end (one chunk per token, roughly).

    Byte-level tokens that split a character share its offsets, so such
    tokens merge into one chunk (the text a detokenizer would release).
    """
    enc = tokenizer.encode(text, add_special_tokens=False)
    cuts = sorted({end for _, end in enc.offsets if 0 < end < len(text)})
    out: list[str] = []
    prev = 0
    for c in cuts:
        out.append(text[prev:c])
        prev = c
    out.append(text[prev:])
    assert "".join(out) == text
    return out


def token_id_chunks(text: str, tokenizer: Any, per_item: int = 1) -> list[list[int]]:
    """Token ids of ``text``, ``per_item`` ids per source item.

    Raises:
        ValueError: the tokenizer does not round-trip ``text``.
    """
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    if tokenizer.decode(ids, skip_special_tokens=False) != text:
        raise ValueError("the tokenizer does not round-trip this text")
    return [ids[i : i + per_item] for i in range(0, len(ids), per_item)]
