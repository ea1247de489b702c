"""Stream == complete for XML-like, function-first outputs generated from each dialect's grammar.

The generator writes outputs of ``qwen3_coder``, ``glm45``, ``glm47``,
``minimax_m2``, ``seed_oss`` and ``deepseek_v32`` (shared/dialects.md
sections 6, 7, 8c, 10, 12) with typed parameter values drawn from the tools'
JSON schemas, optional reasoning before them, prose around the blocks, and
calls to tools that were not offered. A well-formed output must parse back to
what was generated, on any chunking; a mutated one must still stream exactly
what ``parse_complete`` returns, with arguments that are JSON objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow import accumulate, parse_complete
from deltaflow._core.jsonscan import JsonScanner
from deltaflow.parsers import registry
from deltaflow.testing import feed_chunks, message_key

from .strategies import check_delta_invariants, chunkings

DIALECTS = ("qwen3_coder", "glm45", "glm47", "minimax_m2", "seed_oss", "deepseek_v32")
REASONING = {
    "qwen3_coder": ("qwen3", "</think>", None),
    "glm45": ("glm45", "</think>", None),
    "glm47": ("glm45", "</think>", None),
    "minimax_m2": ("minimax_m2", "</think>", None),
    "seed_oss": ("seed_oss", "</seed:think>", None),
    "deepseek_v32": ("deepseek_v3", "</think>", True),
}

# Parameter kinds and the schemas that declare them.
SCHEMAS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "object": {"type": "object"},
    "array": {"type": "array", "items": {"type": "integer"}},
    "nullable_int": {"type": ["integer", "null"]},
    "nullable_str": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "str_or_obj": {"type": ["string", "object"]},
}
TOOLS: dict[str, dict[str, str]] = {
    "get_weather": {"city": "string", "days": "integer", "unit": "nullable_str"},
    "search": {"query": "string", "limit": "nullable_int", "exact": "boolean", "filters": "object", "ids": "array"},
    "calc.v2": {"ratio": "number", "expr": "str_or_obj"},
    "f": {},
}
UNOFFERED = "delete_all"
KEYS = ("city", "days", "unit", "query", "limit", "exact", "filters", "ids", "ratio", "expr", "note", "x")

SAFE_TEXT = "abcxyz ABC0123.,!?-_'()=+*/é😀天\n\t<>\"\\{}[]:"


def tool_defs() -> list[dict[str, Any]]:
    """The offered tools in OpenAI format."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": {k: SCHEMAS[kind] for k, kind in props.items()}},
            },
        }
        for name, props in TOOLS.items()
    ]


FORBIDDEN: dict[str, tuple[str, ...]] = {
    "qwen3_coder": ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>"),
    "seed_oss": ("<seed:tool_call>", "</seed:tool_call>", "<function=", "</function>", "<parameter=", "</parameter>"),
    "glm45": ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    "glm47": ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    "minimax_m2": ("<minimax:tool_call>", "</minimax:tool_call>", "<invoke", "</invoke>", "<parameter", "</parameter>"),
    "deepseek_v32": ("<｜DSML｜", "</｜DSML｜"),
}
THINK = ("<think>", "</think>", "<seed:think>", "</seed:think>")


def clean(text: str, dialect: str) -> bool:
    """True if ``text`` holds none of the dialect's tags (nor reasoning tags)."""
    return not any(m in text for m in FORBIDDEN[dialect] + THINK)


@dataclass
class GenCall:
    """One generated call: its name, (key, value) pairs and the raw text it accounts for."""

    name: str
    pairs: list[tuple[str, Any]]
    raw: str = ""


@dataclass
class Generated:
    """A generated output and what it must parse to."""

    dialect: str
    text: str
    tools: list[dict[str, Any]] | None
    reasoning_parser: str | None
    enable_thinking: bool | None
    content: str | None
    reasoning: str | None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def kwargs(self) -> dict[str, Any]:
        """Arguments for parse_complete / ResponseParser."""
        return {
            "tool_parser": self.dialect,
            "reasoning_parser": self.reasoning_parser,
            "tools": self.tools,
            "enable_thinking": self.enable_thinking,
        }


# -- values ----------------------------------------------------------------------------------


@st.composite
def plain_string(draw: st.DrawFn, dialect: str, typed_looking: bool) -> str:
    """A string value that holds no tag; with ``typed_looking`` False it cannot read as a typed value."""
    s = draw(st.text(alphabet=SAFE_TEXT, max_size=20).filter(lambda t: clean(t, dialect)))
    if not typed_looking:
        s = "x" + s
    return s


@st.composite
def typed_value(draw: st.DrawFn, kind: str, dialect: str) -> tuple[str, Any]:
    """(text, value) for a parameter of ``kind``."""
    pad = draw(st.sampled_from(("", "", " ", "  "))) if dialect in ("glm45", "glm47", "minimax_m2") else ""
    if kind == "string":
        s = draw(plain_string(dialect, True))
        return s, s
    if kind in ("integer", "nullable_int") and (kind == "integer" or draw(st.booleans())):
        n = draw(st.integers(-(10**12), 10**12))
        return pad + str(n) + pad, n
    if kind == "nullable_int":
        word = draw(st.sampled_from(("null", "None", "NULL")))
        return word, None
    if kind == "number":
        x = draw(st.floats(allow_nan=False, allow_infinity=False, width=32))
        return pad + json.dumps(x) + pad, x
    if kind == "boolean":
        word = draw(st.sampled_from(("true", "false", "True", "FALSE")))
        return pad + word + pad, word.lower() == "true"
    if kind == "nullable_str":
        if draw(st.booleans()):
            return "null", None
        s = draw(plain_string(dialect, False))
        return s, s
    if kind in ("object", "str_or_obj") and (kind == "object" or draw(st.booleans())):
        obj = draw(st.dictionaries(st.sampled_from("abc"), st.one_of(st.integers(0, 9), st.booleans(), st.none()), max_size=3))
        return pad + json.dumps(obj) + pad, obj
    if kind == "str_or_obj":
        s = draw(plain_string(dialect, False))
        return s, s
    if kind == "array":
        arr = draw(st.lists(st.integers(-5, 5), max_size=4))
        return pad + json.dumps(arr) + pad, arr
    raise AssertionError(kind)  # pragma: no cover


# -- rendering -------------------------------------------------------------------------------


@st.composite
def render_param(draw: st.DrawFn, dialect: str, key: str, text: str, typed: bool) -> str:
    """One parameter in the dialect's syntax."""
    if dialect in ("qwen3_coder", "seed_oss"):
        inline_ok = not text.startswith("\n") and (dialect == "seed_oss" or not text.endswith("\n"))
        if inline_ok and draw(st.booleans()):
            return f"<parameter={key}>{text}</parameter>\n"
        return f"<parameter={key}>\n{text}\n</parameter>\n"
    if dialect == "glm45":
        return f"<arg_key>{key}</arg_key>\n<arg_value>{text}</arg_value>\n"
    if dialect == "glm47":
        return f"<arg_key>{key}</arg_key><arg_value>{text}</arg_value>"
    if dialect == "minimax_m2":
        return f'<parameter name="{key}">{text}</parameter>\n'
    flag = "false" if typed else "true"
    return f'<｜DSML｜parameter name="{key}" string="{flag}">{text}</｜DSML｜parameter>\n'


@st.composite
def gen_call(draw: st.DrawFn, dialect: str, offered: bool) -> tuple[GenCall, list[str]]:
    """A call and its parameters' rendered texts."""
    names = list(TOOLS) + ([UNOFFERED] if offered else [])
    name = draw(st.sampled_from(names))
    schema = TOOLS.get(name, {}) if offered else {}
    keys = draw(st.lists(st.sampled_from(KEYS), max_size=4))
    pairs: list[tuple[str, Any]] = []
    params: list[str] = []
    for key in keys:
        kind = schema.get(key)
        if kind is None:
            # No schema: a string; DSML's string="false" makes it a JSON value.
            if dialect == "deepseek_v32" and draw(st.booleans()):
                n = draw(st.integers(-99, 99))
                pairs.append((key, n))
                params.append(draw(render_param(dialect, key, str(n), True)))
                continue
            s = draw(plain_string(dialect, True))
            pairs.append((key, s))
            params.append(draw(render_param(dialect, key, s, False)))
            continue
        text, value = draw(typed_value(kind, dialect))
        pairs.append((key, value))
        params.append(draw(render_param(dialect, key, text, kind != "string")))
    return GenCall(name, pairs), params


@st.composite
def gen_block(draw: st.DrawFn, dialect: str, offered: bool, lead: str) -> list[GenCall]:
    """A block of calls, with each call's raw text set (``lead``: whitespace before the block)."""
    multi = dialect in ("minimax_m2", "deepseek_v32")
    n = draw(st.integers(1, 3)) if multi else 1
    made = [draw(gen_call(dialect, offered)) for _ in range(n)]
    calls = [c for c, _ in made]
    if dialect in ("qwen3_coder", "seed_oss"):
        call, params = made[0]
        body = f"<function={call.name}>\n" + "".join(params) + "</function>"
        if dialect == "qwen3_coder" and draw(st.booleans()):
            call.raw = lead + body + draw(st.sampled_from(("", "\n</tool_call>")))
        else:
            wrap = ("<tool_call>", "</tool_call>") if dialect == "qwen3_coder" else ("<seed:tool_call>", "</seed:tool_call>")
            call.raw = lead + wrap[0] + "\n" + body + "\n" + wrap[1]
    elif dialect in ("glm45", "glm47"):
        call, params = made[0]
        sep = "\n" if dialect == "glm45" else ""
        call.raw = lead + "<tool_call>" + call.name + sep + "".join(params) + "</tool_call>"
    else:
        if dialect == "minimax_m2":
            bopen, bclose, inv, iclose = "<minimax:tool_call>", "</minimax:tool_call>", "<invoke", "</invoke>"
        else:
            bopen, bclose, inv, iclose = "<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜invoke", "</｜DSML｜invoke>"
        for i, (call, params) in enumerate(made):
            head = lead + bopen if i == 0 else ""
            call.raw = head + "\n" + f'{inv} name="{call.name}">\n' + "".join(params) + iclose
        calls[-1].raw += "\n" + bclose
    return calls


@st.composite
def generated(draw: st.DrawFn) -> Generated:
    """A well-formed output of one dialect, with what it must parse to."""
    dialect = draw(st.sampled_from(DIALECTS))
    offered = draw(st.booleans())
    tools = tool_defs() if offered else None
    reasoning_parser: str | None = None
    enable_thinking: bool | None = None
    parts: list[str] = []
    content: list[str] = []
    reasoning: str | None = None
    if draw(st.booleans()):
        reasoning_parser, end, enable_thinking = REASONING[dialect]
        r = draw(st.text(alphabet="abc xyz.\n", max_size=15))
        parts.append(r + end)
        reasoning = r or None
    expected: list[tuple[str, dict[str, Any]]] = []
    after_block = False
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()) or not after_block:
            prose = draw(st.text(alphabet=SAFE_TEXT, max_size=12).filter(lambda t: clean(t, dialect)))
            if after_block and prose.strip() == "":
                prose = ""
            if prose:
                parts.append(prose)
                content.append(prose)
                after_block = False
        lead = draw(st.sampled_from(("", "\n", " \n"))) if after_block else ""
        # Prose that ends in a piece of an opener would join the block's tag.
        if parts and any(parts[-1].endswith(m[:k]) for m in FORBIDDEN[dialect] for k in range(1, len(m))):
            parts.append(" ")
            content.append(" ")
        for call in draw(gen_block(dialect, offered, lead)):
            parts.append(call.raw)
            if tools is None or call.name in TOOLS:
                expected.append((call.name, dict(call.pairs)))
            else:
                content.append(call.raw)
        after_block = True
    return Generated(
        dialect=dialect,
        text="".join(parts),
        tools=tools,
        reasoning_parser=reasoning_parser,
        enable_thinking=enable_thinking,
        content="".join(content) or None,
        reasoning=reasoning,
        calls=expected,
    )


def check_prefixes(deltas: list[Any]) -> None:
    """Every prefix of each call's arguments is a prefix of one JSON object (never invalid on the way)."""
    scanners: dict[int, tuple[JsonScanner, str]] = {}
    for d in deltas:
        for tc in d.tool_calls:
            frag = tc.function.arguments or ""
            if not frag:
                continue
            scan, tail = scanners.get(tc.index) or (JsonScanner(), "")
            assert not scan.done, f"arguments of call {tc.index} go on after the object closed: {frag!r}"
            buf = tail + frag
            consumed, _ = scan.scan(buf, 0, False)
            assert not scan.error, f"arguments of call {tc.index} became invalid at {frag!r}"
            scanners[tc.index] = (scan, buf[consumed:])


def stream(gen: Generated, chunks: list[str]) -> tuple[list[Any], Any]:
    """Stream ``chunks`` (checking the delta contract) and parse the whole text."""
    kwargs = gen.kwargs()
    deltas = feed_chunks(chunks, **kwargs)
    names = tuple(TOOLS) if gen.tools is not None else None
    check_delta_invariants(deltas, names)
    check_prefixes(deltas)
    return deltas, parse_complete(gen.text, **kwargs)


@settings(max_examples=300)
@given(gen=generated(), data=st.data())
def test_well_formed_parses_as_generated(gen: Generated, data: st.DataObject) -> None:
    """A well-formed generated output parses to the generated calls, content and reasoning, on any chunking."""
    chunks = data.draw(chunkings(gen.text), label="chunks")
    deltas, complete = stream(gen, chunks)
    content, reasoning, calls = message_key(complete)
    assert content == gen.content, "content"
    assert reasoning == gen.reasoning, "reasoning_content"
    assert [(name, json.loads(args)) for _, name, args in calls] == gen.calls, "tool calls"
    assert message_key(accumulate(deltas)) == message_key(complete)


_NOISE = st.sampled_from(("<", ">", "/", '"', "\n", "=", "{", "}", "｜", "\\", "n", " ", "<parameter", "</"))


@st.composite
def mutated(draw: st.DrawFn) -> Generated:
    """A generated output cut short, with a piece removed or noise inserted."""
    gen = draw(generated())
    text = gen.text
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(("cut", "drop", "insert")))
        i = draw(st.integers(0, len(text)))
        if how == "cut":
            text = text[:i]
        elif how == "drop":
            text = text[:i] + text[i + draw(st.integers(1, 8)) :]
        else:
            text = text[:i] + draw(_NOISE) + text[i:]
    gen.text = text
    return gen


@settings(max_examples=300)
@given(gen=mutated(), data=st.data())
def test_mutated_any_chunking(gen: Generated, data: st.DataObject) -> None:
    """For mutated outputs and any chunking: no exception, the delta contract holds, and stream == complete."""
    chunks = data.draw(chunkings(gen.text), label="chunks")
    deltas, complete = stream(gen, chunks)
    assert message_key(accumulate(deltas)) == message_key(complete)


def test_generator_covers_registered_dialects() -> None:
    """Every dialect the generator writes is registered, with the reasoning parser it pairs with."""
    for dialect in DIALECTS:
        assert registry.get_tool_dialect(dialect).openers
        assert registry.get_reasoning_dialect(REASONING[dialect][0]).end == REASONING[dialect][1]


# Pieces of each dialect's grammar (tags, header parts, value bits), for outputs in any order.
SOUP: dict[str, tuple[str, ...]] = {
    "qwen3_coder": ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", "f>",
                    "get_weather>", "days>", "city>", "<tool_", "</param", "<function=get_weather"),
    "glm45": ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "get_weather",
              "days", "city", "\\n", "\\", "</arg_"),
    "minimax_m2": ("<minimax:tool_call>", "</minimax:tool_call>", "<invoke", ' name="get_weather">', "</invoke>",
                   "<parameter", ' name="days">', ' name="city">', "</parameter>", "</inv", ' name="'),
    "seed_oss": ("<seed:tool_call>", "</seed:tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
                 "f>", "days>", "<seed:tool"),
    "deepseek_v32": ("<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜invoke", ' name="get_weather">',
                     "</｜DSML｜invoke>", "<｜DSML｜parameter", ' name="days" string="false">',
                     ' name="arguments" string="true">', "</｜DSML｜parameter>", '{"city": "x"}', "<｜DSM", "<｜DSML｜"),
}
_BITS = ("\n", " ", "x", "12", "true", "null", "{", "}", '"', "<", ">", "</", "[1]", "</think>", "<think>", "</seed:think>")


@st.composite
def soups(draw: st.DrawFn) -> Generated:
    """An output made of the dialect's grammar pieces in any order (mostly malformed)."""
    dialect = draw(st.sampled_from(DIALECTS))
    pieces = SOUP["glm45" if dialect == "glm47" else dialect] + _BITS
    text = "".join(draw(st.lists(st.sampled_from(pieces), max_size=25)))
    parser, _, thinking = REASONING[dialect]
    with_reasoning = draw(st.booleans())
    return Generated(
        dialect=dialect,
        text=text,
        tools=tool_defs() if draw(st.booleans()) else None,
        reasoning_parser=parser if with_reasoning else None,
        enable_thinking=draw(st.sampled_from((None, True, False))) if with_reasoning else thinking,
        content=None,
        reasoning=None,
    )


@settings(max_examples=400)
@given(gen=soups(), data=st.data())
def test_tag_soup_any_chunking(gen: Generated, data: st.DataObject) -> None:
    """For the dialect's tags in any order and any chunking: no exception, the delta contract holds, and stream == complete."""
    chunks = data.draw(chunkings(gen.text), label="chunks")
    deltas, complete = stream(gen, chunks)
    assert message_key(accumulate(deltas)) == message_key(complete)
