"""Stream == complete for Mistral and pythonic outputs generated from their grammars, on any chunking.

Grammar facts (shared/dialects.md sections 4 and 5, and the declarations in
``deltaflow/parsers/dialects/mistral.py`` and ``llama.py``):

* mistral: content, then blocks ``[TOOL_CALLS]`` + one of: a pre-v11 JSON
  array of ``{"name", "arguments", "id"}`` objects (space after the marker
  optional), a bare object, ``NAME[CALL_ID]ID[ARGS]{...}``,
  ``NAME[ARGS]{...}``, ``NAME{...}``, or a bare ``NAME`` (only right before
  another block or at the end); optionally ``[THINK]...[/THINK]`` first.
* pythonic: an optional ``<|python_start|>`` wrapper (which may follow
  prose), a list ``[f(a=1), g()]`` of calls with Python-literal keyword
  values, an optional ``<|python_end|>``, then any text. A bare list opens a
  block only at the start of the output.

A generated output knows what a correct parser returns: text pieces verbatim
in their channel, reasoning markers consumed, a call to an offered name (or
any name without ``tools``) emitted with its arguments, and a call to another
name surfaced as its raw text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deltaflow import accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.parsers.base import BLANK_RUN_MAX
from deltaflow.testing import feed_chunks, message_key

from .strategies import args_object_src, check_delta_invariants, chunkings, json_string_src, tool_defs

MARKER, ARGS, CALL_ID, THINK, END_THINK = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"
PY_START, PY_END = "<|python_start|>", "<|python_end|>"

V11_NAMES = ("get_weather", "search", "calc.v2", "ns:lookup", "f", "rm-rf", "天气")
PY_NAMES = ("get_weather", "search", "f", "ns.lookup", "naïve", "_private")
WS = st.sampled_from(("", "", "", " ", "\n", "  ", "\t", " \n "))
LOOKALIKES = (
    "[", "]", "{", "}", "(", ")", "'", '"', ",", "=", "[TOOL_CALLS", "TOOL_CALLS]", ARGS, CALL_ID, "[THINK",
    "[/THINK", "<|python_", "|>", "\\", "\n", "None", "f(a=1)",
)
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,!?-_", min_size=1, max_size=10)
FREE_TEXT = st.lists(
    st.one_of(WORDS, WORDS, st.sampled_from(LOOKALIKES), st.sampled_from(("天气", "😀", "é", "\u00a0"))),
    max_size=5,
).map("".join)


def sanitize(text: str, forbidden: tuple[str, ...]) -> str:
    """Break every forbidden marker in ``text``."""
    changed = True
    while changed:
        changed = False
        for m in forbidden:
            if m in text:
                text = text.replace(m, m[:-1] + " " + m[-1])
                changed = True
    return text


@dataclass(frozen=True)
class Call:
    """One generated call: what it must give, and the raw text it accounts for."""

    name: str
    args: Any  # the decoded arguments object
    raw: str
    id: str | None = None  # a model-written id the call must carry


@dataclass(frozen=True)
class Output:
    """A generated output and what a correct parser returns for it."""

    kwargs: dict[str, Any]
    tools: tuple[str, ...] | None
    text: str
    content: str | None
    reasoning: str | None
    calls: tuple[Call, ...]


def build(
    kwargs: dict[str, Any], tools: tuple[str, ...] | None, pieces: list[tuple[str, str | tuple[Call, ...]]]
) -> Output:
    """Join pieces (``("content"|"reasoning"|"marker", text)`` or ``("block", calls)``) into an Output.

    For a dialect whose blanks before a block are framing (``lead_blanks``), the blank run that ends a text
    piece right before a block is raw text of the block's first call.
    """
    if registry.get_tool_dialect(kwargs["tool_parser"]).lead_blanks:
        pieces = list(pieces)
        for i in range(len(pieces) - 1):
            kind, value = pieces[i]
            nxt_kind, nxt = pieces[i + 1]
            if kind in ("content", "reasoning") and nxt_kind == "block" and isinstance(value, str):
                assert isinstance(nxt, tuple)
                core = value.rstrip(" \t\r\n")
                run = value[len(core):]
                if run and len(run) <= BLANK_RUN_MAX:
                    pieces[i] = (kind, core)
                    first = nxt[0]
                    pieces[i + 1] = ("block", (Call(first.name, first.args, run + first.raw, first.id), *nxt[1:]))
    text: list[str] = []
    out: dict[str, list[str]] = {"content": [], "reasoning": []}
    calls: list[Call] = []
    for kind, value in pieces:
        if kind == "block":
            assert isinstance(value, tuple)
            for c in value:
                text.append(c.raw)
                if tools is None or c.name in tools:
                    calls.append(c)
                else:
                    out["content"].append(c.raw)
        else:
            assert isinstance(value, str)
            text.append(value)
            if kind != "marker":
                out[kind].append(value)
    return Output(
        kwargs, tools, "".join(text), "".join(out["content"]) or None, "".join(out["reasoning"]) or None, tuple(calls)
    )


def distinct_ids(gen: Output) -> bool:
    """The model wrote no id twice (real models do not; clients need distinct ids)."""
    ids = [c.id for c in gen.calls if c.id is not None]
    return len(ids) == len(set(ids))


def tools_for(names: tuple[str, ...]) -> st.SearchStrategy[tuple[str, ...] | None]:
    """No tools, or a non-empty subset of the ASCII ``names`` (tool definitions allow no others)."""
    offered = tuple(n for n in names if n.isascii())
    return st.one_of(st.none(), st.lists(st.sampled_from(offered), min_size=1, max_size=4, unique=True).map(tuple))


# -- mistral --------------------------------------------------------------------------------------


@st.composite
def mistral_object(draw: st.DrawFn, name: str) -> tuple[str, Any, str | None]:
    """A pre-v11 call object; returns its source, its decoded arguments and the id the call must carry."""
    form = draw(st.sampled_from(("object", "object", "object", "string", "null", "missing")))
    members: list[tuple[str, str]] = [('"name"', json.dumps(name, ensure_ascii=draw(st.booleans())))]
    args: Any = {}
    if form == "object":
        src = draw(args_object_src)
        args = json.loads(src)
        members.append(('"arguments"', src))
    elif form == "string":
        src = draw(args_object_src)
        args = json.loads(src)
        members.append(('"arguments"', json.dumps(src)))
    elif form == "null":
        members.append(('"arguments"', "null"))
    cid = draw(st.one_of(st.none(), st.text(alphabet="abcdefXYZ0123456789", min_size=9, max_size=9)))
    if cid is not None:
        members.append(('"id"', json.dumps(cid)))
    if draw(st.booleans()):
        members.append(('"type"', '"function"'))
    members = draw(st.permutations(members))
    # The id is the call's only when it comes before the arguments (the name is announced then).
    order = [k for k, _ in members]
    args_at = order.index('"arguments"') if '"arguments"' in order else len(order)
    name_at = order.index('"name"')
    carried = cid if cid is not None and order.index('"id"') < max(args_at, name_at) else None
    body = "".join(
        (draw(WS) + "," if i else "") + draw(WS) + k + draw(WS) + ":" + draw(WS) + v for i, (k, v) in enumerate(members)
    )
    return "{" + body + draw(WS) + "}", args, carried


@st.composite
def mistral_block(draw: st.DrawFn, names: st.SearchStrategy[str], lead: str, last: bool) -> tuple[Call, ...]:
    """One ``[TOOL_CALLS]`` block; ``last``: nothing but another block or the end follows."""
    form = draw(st.sampled_from(("array", "array", "bare", "v11", "v13", "v13_brace", "no_args")))
    if form == "no_args" and not last:
        form = "v13"
    if form in ("array", "bare"):
        head = lead + MARKER + draw(st.sampled_from(("", "", " ")))
        if form == "bare":
            src, args, cid = draw(mistral_object(draw(names)))
            return (Call(json.loads(src)["name"], args, head + src, cid),)
        calls: list[Call] = []
        n = draw(st.integers(1, 3))
        for i in range(n):
            src, args, cid = draw(mistral_object(draw(names)))
            raw = (head + "[" + draw(WS) if i == 0 else draw(WS) + "," + draw(WS)) + src
            if i == n - 1:
                raw += draw(WS) + "]"
            calls.append(Call(json.loads(src)["name"], args, raw, cid))
        return tuple(calls)
    name = draw(st.sampled_from(V11_NAMES))
    if form == "no_args":
        return (Call(name, {}, lead + MARKER + name),)
    src = draw(args_object_src)
    if form == "v11":
        cid = draw(st.text(alphabet="abcdefXYZ0123456789", min_size=9, max_size=9))
        return (Call(name, json.loads(src), lead + MARKER + name + CALL_ID + cid + ARGS + src, cid),)
    sep = ARGS if form == "v13" else ""
    return (Call(name, json.loads(src), lead + MARKER + name + sep + src),)


@st.composite
def mistral_outputs(draw: st.DrawFn) -> Output:
    """A Mistral output: optional reasoning, then content and blocks."""
    reasoning_parser = draw(st.sampled_from(("mistral", None)))
    tools = draw(tools_for(V11_NAMES))
    kwargs = {"tool_parser": "mistral", "reasoning_parser": reasoning_parser, "tools": tool_defs(tools)}
    names = st.sampled_from(V11_NAMES + ("delete_all", "other tool", "naïve"))
    pieces: list[tuple[str, str | tuple[Call, ...]]] = []
    forbidden = (MARKER, THINK, END_THINK)
    if reasoning_parser is not None and draw(st.booleans()):
        pieces.append(("marker", THINK))
        pieces.append(("reasoning", sanitize(draw(FREE_TEXT), forbidden)))
        if not draw(st.booleans()):
            return build(kwargs, tools, pieces)  # reasoning never closed: all of it is reasoning
        pieces.append(("marker", END_THINK))
    nblocks = draw(st.integers(0, 3))
    texts = [sanitize(draw(FREE_TEXT), forbidden) for _ in range(nblocks + 1)]
    for i, text in enumerate(texts):
        lead = ""
        if 0 < i < nblocks and not text.strip(" \t\r\n"):
            lead, text = text, ""  # whitespace between two blocks is raw text of the next call
        if text:
            pieces.append(("content", text))
        if i == nblocks:
            break
        # A bare name is a call only right before another block or at the end (whitespace may follow).
        bare_ok = not texts[i + 1].strip(" \t\r\n")
        pieces.append(("block", draw(mistral_block(names, lead, last=bare_ok))))
    return build(kwargs, tools, pieces)


# -- pythonic -------------------------------------------------------------------------------------

_PY_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)  # no lone surrogates


@st.composite
def py_string(draw: st.DrawFn) -> tuple[str, Any]:
    """A Python string literal in one of several styles, and its value."""
    tricky = ("", "it's", 'say "hi"', "a\\b", "x, y)]", "''", "<|python_end|>")
    value = draw(st.one_of(_PY_TEXT, st.sampled_from(tricky)))
    style = draw(st.sampled_from(("repr", "json", "triple")))
    if style == "json":
        return json.dumps(value, ensure_ascii=draw(st.booleans())), value
    if style == "triple" and not value.endswith('"') and "\r" not in value and "\x00" not in value:
        return '"""' + value.replace("\\", "\\\\").replace('"""', '\\"\\"\\"') + '"""', value
    return repr(value), value


_PY_SCALARS = st.one_of(
    py_string(),
    st.integers(-(10**20), 10**20).map(lambda i: (str(i), i)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: (repr(f), f)),
    st.sampled_from((("True", True), ("False", False), ("None", None))),
)


def _py_list(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    def join(items: list[tuple[str, Any]], tup: bool) -> tuple[str, Any]:
        o, c = ("(", ")") if tup else ("[", "]")
        src = ", ".join(s for s, _ in items)
        if tup and len(items) == 1:
            src += ","
        return o + src + c, [v for _, v in items]

    return st.builds(join, st.lists(children, max_size=3), st.booleans())


def _py_dict(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    def join(items: list[tuple[tuple[str, Any], tuple[str, Any]]]) -> tuple[str, Any]:
        return "{" + ", ".join(f"{k}: {v}" for (k, _), (v, _) in items) + "}", {k: v for (_, k), (_, v) in items}

    return st.builds(join, st.lists(st.tuples(py_string(), children), max_size=3))


py_value: st.SearchStrategy[tuple[str, Any]] = st.recursive(
    _PY_SCALARS, lambda children: st.one_of(_py_list(children), _py_dict(children)), max_leaves=6
)


@st.composite
def py_call(draw: st.DrawFn, names: st.SearchStrategy[str]) -> tuple[str, str, dict[str, Any]]:
    """``NAME(k=v, ...)``; returns its source, name and arguments."""
    name = draw(names)
    keys = draw(st.lists(st.sampled_from(("city", "a", "b", "query", "n", "naïve", "_x")), max_size=4, unique=True))
    kws: list[str] = []
    args: dict[str, Any] = {}
    for k in keys:
        src, value = draw(py_value)
        kws.append(k + draw(st.sampled_from(("=", " = "))) + src)
        args[k] = value
    inner = ("," + draw(WS)).join(kws)
    trailing_comma = draw(st.booleans())
    if kws and trailing_comma:
        inner += ","
    return name + "(" + draw(WS) + inner + draw(WS) + ")", name, args


@st.composite
def pythonic_outputs(draw: st.DrawFn) -> Output:
    """A pythonic output: a call list at the start, a wrapped one after prose, or (with tools) a bare
    one after prose whose first call names an offered tool; then text."""
    dialect = draw(st.sampled_from(("pythonic", "llama4_pythonic")))
    tools = draw(tools_for(PY_NAMES))
    names = st.sampled_from(PY_NAMES + ("delete_all",))
    # [NAME( of an offered tool opens a list anywhere, so prose must not contain one.
    forbidden = (PY_START, PY_END, *(f"[{t}(" for t in tools or ()))
    where = draw(st.sampled_from(("start", "wrapped", "after_prose") if tools else ("start", "wrapped")))
    wrapped = where == "wrapped"
    pieces: list[tuple[str, str | tuple[Call, ...]]] = []
    if where == "start":
        prose = draw(st.sampled_from(("", " ", "\n\n")))
    else:
        prose = sanitize(draw(FREE_TEXT), forbidden)
        if prose.lstrip().startswith("["):
            prose = "x" + prose  # a list at the very start would itself open a block
        if where == "after_prose" and not prose.strip():
            prose = "Let me check: " + prose
    if prose:
        pieces.append(("content", prose))
    head = (PY_START + draw(WS) if wrapped else "") + "["
    calls: list[Call] = []
    n = draw(st.integers(1, 3))
    for i in range(n):
        first_after_prose = i == 0 and where == "after_prose"
        src, name, args = draw(py_call(st.sampled_from(tools) if first_after_prose and tools else names))
        raw = (head + ("" if first_after_prose else draw(WS)) if i == 0 else draw(WS) + "," + draw(WS)) + src
        calls.append(Call(name, args, raw))
    tail = draw(WS) + "]"
    closer = wrapped and draw(st.booleans())
    if closer:
        tail += draw(WS) + PY_END
    last = calls[-1]
    calls[-1] = Call(last.name, last.args, last.raw + tail)
    pieces.append(("block", tuple(calls)))
    after = sanitize(draw(FREE_TEXT), forbidden)
    if after.lstrip().startswith("["):
        after = "x" + after  # a list right after the block would open another block
    if after:
        pieces.append(("content", after))
    return build({"tool_parser": dialect, "tools": tool_defs(tools)}, tools, pieces)


# -- the properties -------------------------------------------------------------------------------


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality where floats compare by value (and -0.0 equals 0.0)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def check(gen: Output, chunks: list[str], ids: bool) -> None:
    """Stream ``chunks``: the delta contract holds, stream == complete, and the generated message comes back."""
    deltas = feed_chunks(chunks, **gen.kwargs)
    got = check_delta_invariants(deltas, gen.tools)
    complete = parse_complete(gen.text, **gen.kwargs)
    assert message_key(accumulate(deltas)) == message_key(complete)
    assert complete.content == gen.content, "content"
    assert complete.reasoning_content == gen.reasoning, "reasoning_content"
    assert [n for n, _ in got] == [c.name for c in gen.calls], "call names"
    for (_, args), call in zip(got, gen.calls, strict=True):
        assert isinstance(json.loads(args), dict)
        assert _same_json(json.loads(args), call.args), (args, call.args)
    if ids:
        for tc, call in zip(complete.tool_calls, gen.calls, strict=True):
            if call.id is not None:
                assert tc.id == call.id


def _run(strategy: st.SearchStrategy[Output], ids: bool) -> Callable[..., None]:
    @settings(max_examples=300)
    @given(gen=strategy, data=st.data())
    def prop(gen: Output, data: st.DataObject) -> None:
        assume(distinct_ids(gen))
        check(gen, data.draw(chunkings(gen.text), label="chunks"), ids)

    return prop


test_mistral_generated_any_chunking = _run(mistral_outputs(), ids=True)
test_mistral_generated_any_chunking.__doc__ = (
    "Generated Mistral outputs parse back to their calls, content and reasoning on any chunking (stream == complete)."
)
test_pythonic_generated_any_chunking = _run(pythonic_outputs(), ids=False)
test_pythonic_generated_any_chunking.__doc__ = (
    "Generated pythonic outputs parse back to their calls and content on any chunking (stream == complete)."
)


@settings(max_examples=300)
@given(gen=st.one_of(mistral_outputs(), pythonic_outputs()), data=st.data())
def test_mutated_outputs_keep_the_contract(gen: Output, data: st.DataObject) -> None:
    """Truncated or corrupted outputs never raise, keep the delta contract, and stream == complete."""
    assume(distinct_ids(gen))
    text = gen.text
    how = data.draw(st.sampled_from(("truncate", "delete", "insert")), label="mutation")
    i = data.draw(st.integers(0, len(text)), label="at")
    if how == "truncate":
        text = text[:i]
    elif how == "delete":
        text = text[:i] + text[i + 1 :]
    else:
        inserted = data.draw(st.sampled_from(LOOKALIKES + (MARKER, PY_START, PY_END, "}", "]")), label="inserted")
        text = text[:i] + inserted + text[i:]
    chunks = data.draw(chunkings(text), label="chunks")
    deltas = feed_chunks(chunks, **gen.kwargs)
    check_delta_invariants(deltas, gen.tools)
    assert message_key(accumulate(deltas)) == message_key(parse_complete(text, **gen.kwargs))


@given(src=json_string_src())
def test_json_strings_are_python_literals_too(src: str) -> None:
    """A JSON string (the generators' double-quoted style) is a Python literal with the same value."""
    from deltaflow.parsers.drivers.pythonic import literal_to_json

    converted = literal_to_json(src)
    assert converted is not None and json.loads(converted) == json.loads(src)
