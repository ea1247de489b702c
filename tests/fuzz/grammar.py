"""Renderers of every registered tool dialect's grammar, for the fuzz suite.

A rendered output is a list of :class:`Seg` pieces, each with a role:

* ``must``: text a correct parser surfaces (content or reasoning) — free
  text, and the raw text of a call it rejects;
* ``gone``: framing a correct parser consumes (reasoning markers, Harmony
  headers and terminators);
* ``opt``: framing that may be consumed or surfaced (section wrappers, call
  separators), depending on whether the calls around it were accepted;
* ``call``: the raw text of one call (``call`` is its index); it is consumed
  when the call's name is offered, surfaced (``must``) otherwise.

The facts come from the declarations in ``deltaflow/parsers/dialects``.
"""

from __future__ import annotations

import json
import os
import re
import string
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from deltaflow.parsers import registry

# Inputs that trigger the bugs recorded in test_known_bugs.py are left out of the generated cases
# unless DELTAFLOW_FUZZ_KNOWN_BUGS=1 (then the fuzz tests find them again).
KNOWN_BUGS = os.environ.get("DELTAFLOW_FUZZ_KNOWN_BUGS") == "1"
_TRAILING_ESCAPE = re.compile(r"(?:\\\\)*\\(?:u[0-9a-fA-F]{0,4}|.)?\Z", re.S)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

# -- names ----------------------------------------------------------------------------------------

LONG_OFFERED = "t" * 128  # the longest name a tool definition may have (deltaflow/tools.py)
LONG_OTHER = "u" + "v" * 2500
# Dialects whose one block holds several calls, driven by the XML driver (bug 5, fixed: an
# over-long name there is surfaced and the block goes on).
_XML_SHARED_BLOCK = frozenset({"step3", "deepseek_v4", "minimax_m2", "deepseek_v32"})
OFFERED = ("get_weather", "search", "f", "run_query_2", LONG_OFFERED)
NOT_OFFERED = ("delete_all", "rm_rf", "other_tool", "get_weather2", LONG_OTHER)

# Every parameter a generated call may pass, with its schema type (the XML dialects convert by schema).
PARAMS: dict[str, str] = {
    "city": "string",
    "query": "string",
    "content": "string",
    "n": "integer",
    "x": "number",
    "flag": "boolean",
    "obj": "object",
    "arr": "array",
}


def tool_defs(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """OpenAI-format tool definitions with the :data:`PARAMS` schema."""
    props = {k: {"type": t} for k, t in PARAMS.items()}
    return [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": props}}}
        for n in names
    ]


# -- markers of each dialect (for sanitizing free text and for the mutations) ------------------------

# Texts a dialect's parser reacts to that are not declared markers: the bare starts of pythonic and
# JSON forms, Llama 3's call separator, the request-defined tags of xml_tools, MiniCPM5's CDATA
# wrapper, MiniMax-M3's tags without their marker prefix.
_UNDECLARED: dict[str, tuple[str, ...]] = {
    "lfm2": ("[", "("),
    "olmo3": ("(",),
    "llama3_json": (";",),
    "pythonic": ("(",),
    "llama4_pythonic": ("(",),
    "xml_tools": tuple(f"<{n}>" for n in OFFERED[:4]) + tuple(f"</{n}>" for n in OFFERED[:4])
    + ("<city>", "</city>", "<content>", "</content>"),
    "minicpm5": ("<![CDATA[", "]]>"),
    "minimax_m3": ("<tool_call>", "</tool_call>", "<invoke", "</invoke>"),
}


def _markers(name: str) -> tuple[str, ...]:
    """The dialect's markers as its declaration states them (openers, markers, framing), and the
    undeclared texts its parser reacts to."""
    d = registry.get_tool_dialect(name)
    declared = (*d.openers, *d.start_openers, *d.markers, *d.framing, *d.restart_after)
    return tuple(m for m in dict.fromkeys((*declared, *_UNDECLARED.get(name, ()))) if m)


TOOL_MARKERS: dict[str, tuple[str, ...]] = {name: _markers(name) for name in registry.tool_dialect_names()}
"""Every registered dialect's markers, read from its declaration (never restated here)."""

# The reasoning parsers each tool dialect is fuzzed with (None: no reasoning parser).
REASONING_FOR: dict[str, tuple[str | None, ...]] = {
    # JSON-array family
    "granite": (None,),
    "granite4": (None, "qwen3"),
    "granite-20b-fc": (None,),
    "hunyuan_a13b": (None, "qwen3", "hunyuan_a13b"),
    "ernie45": (None, "qwen3", "ernie45"),
    "xlam": (None, "deepseek_r1"),
    "jamba": (None,),
    "apriel": (None,),
    "nemotron": (None, "qwen3"),
    "phi4_mini_json": (None,),
    "firefunction_v2": (None,),
    "apertus": (None,),
    "command_r7b": (None, "command_r7b"),
    "longcat": (None,),
    "gigachat3": (None,),
    "lfm2": (None, "qwen3"),
    "olmo3": (None,),
    "step3": (None,),
    "step3p5": (None,),
    "ling3": (None, "glm45"),
    "deepseek_v4": (None, "deepseek_v3"),
    "hermes": (None, "qwen3"),
    "internlm": (None, "qwen3"),
    "llama3_json": (None, "deepseek_r1"),
    "mistral": (None, "mistral"),
    "pythonic": (None,),
    "llama4_pythonic": (None,),
    "deepseek_v3": (None, "deepseek_r1"),
    "deepseek_v31": (None, "deepseek_v3"),
    "kimi_k2": (None, "kimi_k2"),
    "deepseek_v32": (None, "deepseek_v3"),
    "qwen3_coder": (None, "qwen3"),
    "glm45": (None, "glm45"),
    "glm47": (None, "glm45"),
    "minimax_m2": (None, "minimax_m2"),
    "seed_oss": (None, "seed_oss"),
    "openai": (None, "openai_gptoss"),
    "xml_tools": (None, "qwen3", "deepseek_r1"),
    "kimi_k3": (None, "kimi_k3"),
    "gemma4": (None, "gemma4"),
    "minicpm5": (None, "qwen3"),
    "minimax_m3": (None, "minimax_m3"),
    "functionary_v3_1": (None,),
    "command_r_plus": (None,),
    "functionary_v3_2": (None,),
}


def reasoning_markers(name: str | None) -> tuple[str, ...]:
    if name is None:
        return ()
    spec = registry.get_reasoning_dialect(name)
    labels = tuple(lab for lab in spec.start_labels if lab.strip())  # a blank label is never lost text
    return (spec.start, spec.end, *spec.implicit_end, *spec.turn_markers, *labels, *(spec.content_wrap or ()))


# -- segments -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seg:
    text: str
    role: str  # "must" | "gone" | "opt" | "call"
    call: int = -1


@dataclass
class Rendered:
    """A rendered output: its parser options, segments, call names, and the mutation applied."""

    tool_parser: str
    reasoning_parser: str | None
    enable_thinking: bool | None
    tools: tuple[str, ...]
    segs: list[Seg]
    names: list[str]
    mutation: str | None = None
    text: str = ""
    notes: list[str] = field(default_factory=list)

    def kwargs(self) -> dict[str, Any]:
        return {
            "tool_parser": self.tool_parser,
            "reasoning_parser": self.reasoning_parser,
            "tools": tool_defs(self.tools),
            "enable_thinking": self.enable_thinking,
        }

    def source(self) -> str:
        return "".join(s.text for s in self.segs)


# -- values --------------------------------------------------------------------------------------------

_TRICKY = ('"', "\\", "\n", "\r\n", "\t", "'", "\\n", "\\u", "é", "天气", "😀", "\u2028", "\u00a0", "‮", "\x00", "\x1f")
_TEXT_CHARS = st.characters(blacklist_categories=("Cs",))
_STR = st.lists(
    st.one_of(st.text(string.ascii_letters + " ", min_size=1, max_size=8), st.sampled_from(_TRICKY),
              st.text(_TEXT_CHARS, max_size=4)),
    max_size=5,
).map("".join)


@st.composite
def json_str_value(draw: st.DrawFn) -> str:
    """A Python str for a JSON string value; sometimes with a lone surrogate (written escaped: ``\\ud800``)."""
    s = draw(_STR)
    if draw(st.integers(0, 5)) == 0:
        i = draw(st.integers(0, len(s)))
        s = s[:i] + draw(st.sampled_from(("\ud800", "\udfff", "\udc00x", "\ud83d"))) + s[i:]
    return s


_SCALAR_OF = {
    "string": json_str_value(),
    "integer": st.integers(-(10**18), 10**18),
    "number": st.floats(allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
}
_JSON_LEAF = st.one_of(json_str_value(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                       st.booleans(), st.none())
_JSON_ANY = st.recursive(
    _JSON_LEAF,
    lambda ch: st.one_of(st.lists(ch, max_size=3), st.dictionaries(json_str_value(), ch, max_size=3)),
    max_leaves=6,
)
_VALUE_OF = {**_SCALAR_OF, "object": st.dictionaries(json_str_value(), _JSON_ANY, max_size=3),
             "array": st.lists(_JSON_ANY, max_size=3)}


@st.composite
def arguments(draw: st.DrawFn, extra_keys: bool = True) -> dict[str, Any]:
    """Arguments keyed by :data:`PARAMS` (typed by the schema), plus free keys for JSON dialects."""
    keys = draw(st.lists(st.sampled_from(list(PARAMS)), max_size=4, unique=True))
    args: dict[str, Any] = {k: draw(_VALUE_OF[PARAMS[k]]) for k in keys}
    if extra_keys:
        for k in draw(st.lists(json_str_value(), max_size=2)):
            args.setdefault(k, draw(_JSON_ANY))
    return args


def dumps(draw: st.DrawFn, value: Any) -> str:
    """JSON source text, escaped or raw non-ASCII (lone surrogates always escaped), compact or spaced."""
    text = json.dumps(value, ensure_ascii=True)
    if not draw(st.booleans()):
        raw = json.dumps(value, ensure_ascii=False)
        if not any("\ud800" <= c <= "\udfff" for c in raw):
            text = raw
    if draw(st.booleans()):
        text = json.dumps(json.loads(text), ensure_ascii="\\u" in text, indent=draw(st.sampled_from((None, 1))),
                          separators=draw(st.sampled_from(((",", ":"), (", ", ": ")))))
    return text


def xml_text(draw: st.DrawFn, value: Any, ptype: str) -> str:
    """An XML-dialect value for a parameter of ``ptype``: strings raw (no ``<``), others as JSON."""
    if ptype == "string":
        s = "".join(c for c in value if c != "<" and not ("\ud800" <= c <= "\udfff"))
        return s
    return json.dumps(value)  # lone surrogates escaped (a raw one is bug 2)


# -- free text --------------------------------------------------------------------------------------------

_FREE_ALPHABET = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="<>[]{}|｜;:()=\\\"'`"
)
FREE_TEXT = st.lists(
    st.one_of(st.text(string.ascii_letters + " .,!?-", min_size=1, max_size=10), st.text(_FREE_ALPHABET, max_size=5),
              st.sampled_from(("\n", " ", "  ", "é", "天气", "😀", "👍🏽"))),
    max_size=4,
).map("".join)


def sanitize(text: str, forbidden: tuple[str, ...]) -> str:
    changed = True
    while changed:
        changed = False
        for m in forbidden:
            if m and m in text:
                text = text.replace(m, " ")
                changed = True
    return text


# -- per-dialect block renderers ------------------------------------------------------------------------
# Each returns the segments of one tool block holding ``names`` (1-3 calls); ``first`` is the call index
# of the first; ``at_start``: nothing but whitespace precedes the block in its channel.


def _json_envelope(draw: st.DrawFn, name: str, fields: tuple[str, ...]) -> str:
    args = draw(arguments())
    obj: dict[str, Any] = {"name": name, draw(st.sampled_from(fields)): args}
    if draw(st.booleans()):
        obj = dict(reversed(list(obj.items())))
    return dumps(draw, obj)


def block_hermes(draw, names, first, at_start):
    return [Seg("<tool_call>" + draw(st.sampled_from(("", "\n"))) + _json_envelope(draw, n, ("arguments", "parameters"))
                + draw(st.sampled_from(("", "\n"))) + "</tool_call>", "call", first + i)
            for i, n in enumerate(names)]


def block_internlm(draw, names, first, at_start):
    return [Seg("<|action_start|>" + draw(st.sampled_from(("", " ", "\n"))) + "<|plugin|>"
                + _json_envelope(draw, n, ("parameters", "arguments")) + "<|action_end|>", "call", first + i)
            for i, n in enumerate(names)]


def block_llama3_json(draw, names, first, at_start):
    segs = []
    for i, n in enumerate(names):
        if i:
            segs.append(Seg(draw(st.sampled_from((";", "; ", " ; "))), "opt"))
        segs.append(Seg(("<|python_tag|>" if i == 0 else "") + _json_envelope(draw, n, ("parameters", "arguments")),
                        "call", first + i))
    return segs


def block_mistral(draw, names, first, at_start):
    form = draw(st.sampled_from(("v13", "v11", "array")))
    if form == "array":
        objs = []
        for n in names:
            o: dict[str, Any] = {"name": n, "arguments": draw(arguments())}
            if draw(st.booleans()):
                o["id"] = draw(st.text("abcdefghiXYZ0123456789", min_size=9, max_size=9))
            objs.append(dumps(draw, o))
        segs = [Seg("[TOOL_CALLS][", "opt")]
        for i, o in enumerate(objs):
            if i:
                segs.append(Seg(", ", "opt"))
            segs.append(Seg(o, "call", first + i))
        return segs + [Seg("]", "opt")]
    segs = []
    for i, n in enumerate(names):
        cid = "[CALL_ID]" + draw(st.text("abcdefghiXYZ0123456789", min_size=9, max_size=9)) if form == "v11" else ""
        segs.append(Seg("[TOOL_CALLS]" + n + cid + "[ARGS]" + dumps(draw, draw(arguments())), "call", first + i))
    return segs


def _py_literal(draw: st.DrawFn, value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(_py_literal(draw, k) + ": " + _py_literal(draw, v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_py_literal(draw, v) for v in value) + "]"
    return repr(value)


def block_pythonic(draw, names, first, at_start):
    wrapped = not at_start or draw(st.booleans())
    segs = [Seg(("<|python_start|>" if wrapped else "") + "[", "opt")]
    for i, n in enumerate(names):
        if i:
            segs.append(Seg(draw(st.sampled_from((", ", ",", ",\n "))), "opt"))
        args = draw(arguments(extra_keys=False))
        segs.append(Seg(n + "(" + ", ".join(f"{k}={_py_literal(draw, v)}" for k, v in args.items()) + ")",
                        "call", first + i))
    return segs + [Seg("]" + ("<|python_end|>" if wrapped else ""), "opt")]


def block_deepseek_v3(draw, names, first, at_start):
    segs = [Seg("<｜tool▁calls▁begin｜>", "opt")]
    for i, n in enumerate(names):
        if i:
            segs.append(Seg("\n", "opt"))
        segs.append(Seg("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + n + "\n```json\n" + dumps(draw, draw(arguments()))
                        + "\n```<｜tool▁call▁end｜>", "call", first + i))
    return segs + [Seg("<｜tool▁calls▁end｜>", "opt")]


def block_deepseek_v31(draw, names, first, at_start):
    segs = [Seg("<｜tool▁calls▁begin｜>", "opt")]
    for i, n in enumerate(names):
        segs.append(Seg("<｜tool▁call▁begin｜>" + n + "<｜tool▁sep｜>" + dumps(draw, draw(arguments()))
                        + "<｜tool▁call▁end｜>", "call", first + i))
    return segs + [Seg("<｜tool▁calls▁end｜>", "opt")]


def block_kimi_k2(draw, names, first, at_start):
    sec = draw(st.sampled_from((0, 1)))
    begin = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")[sec]
    end = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")[sec]
    segs = [Seg(begin, "opt")]
    for i, n in enumerate(names):
        prefix = draw(st.sampled_from(("functions.", "functions.", "")))
        segs.append(Seg(f"<|tool_call_begin|>{prefix}{n}:{first + i}<|tool_call_argument_begin|>"
                        + dumps(draw, draw(arguments())) + "<|tool_call_end|>", "call", first + i))
    return segs + [Seg(end, "opt")]


_K3_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean",
             "object": "object", "array": "array"}


def block_kimi_k3(draw, names, first, at_start):
    segs = [Seg("<|open|>tools<|sep|>", "opt")]
    for i, n in enumerate(names):
        args = draw(arguments(extra_keys=False))
        if draw(st.booleans()) or not args:
            body = "".join(f'<|open|>argument key="{k}" type="{_K3_TYPES[PARAMS[k]]}"<|sep|>'
                           f"{xml_text(draw, v, PARAMS[k])}<|close|>argument<|sep|>" for k, v in args.items())
        else:
            body = '<|open|>json type="object"<|sep|>' + dumps(draw, args) + "<|close|>json<|sep|>"
        segs.append(Seg(f'<|open|>call tool="{n}" index="{first + i + 1}"<|sep|>{body}<|close|>call<|sep|>',
                        "call", first + i))
    return segs + [Seg("<|close|>tools<|sep|>", "opt")]


def _xml_params(draw: st.DrawFn) -> list[tuple[str, str]]:
    args = draw(arguments(extra_keys=False))
    return [(k, xml_text(draw, v, PARAMS[k])) for k, v in args.items()]


def block_qwen3_coder(draw, names, first, at_start, outer=("<tool_call>", "</tool_call>")):
    segs = []
    for i, n in enumerate(names):
        body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in _xml_params(draw))
        segs.append(Seg(f"{outer[0]}\n<function={n}>\n{body}</function>\n{outer[1]}", "call", first + i))
        if i < len(names) - 1:
            segs.append(Seg("\n", "opt"))
    return segs


def block_seed_oss(draw, names, first, at_start):
    return block_qwen3_coder(draw, names, first, at_start, ("<seed:tool_call>", "</seed:tool_call>"))


def block_glm(draw, names, first, at_start, nl):
    segs = []
    for i, n in enumerate(names):
        body = "".join(f"<arg_key>{k}</arg_key>{nl}<arg_value>{v}</arg_value>{nl}" for k, v in _xml_params(draw))
        segs.append(Seg(f"<tool_call>{n}{nl}{body}</tool_call>", "call", first + i))
    return segs


def block_glm45(draw, names, first, at_start):
    return block_glm(draw, names, first, at_start, "\n")


def block_glm47(draw, names, first, at_start):
    return block_glm(draw, names, first, at_start, "")


def block_minimax_m2(draw, names, first, at_start):
    segs = [Seg("<minimax:tool_call>\n", "opt")]
    for i, n in enumerate(names):
        body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in _xml_params(draw))
        segs.append(Seg(f'<invoke name="{n}">\n{body}</invoke>\n', "call", first + i))
    return segs + [Seg("</minimax:tool_call>", "opt")]


def block_deepseek_v32(draw, names, first, at_start):
    segs = [Seg("<｜DSML｜function_calls>\n", "opt")]
    for i, n in enumerate(names):
        args = draw(arguments(extra_keys=False))
        body = ""
        for k, v in args.items():
            if PARAMS[k] == "string" and draw(st.booleans()):
                body += f'<｜DSML｜parameter name="{k}" string="true">{xml_text(draw, v, "string")}</｜DSML｜parameter>\n'
            else:
                body += f'<｜DSML｜parameter name="{k}" string="false">{json.dumps(v)}</｜DSML｜parameter>\n'
        segs.append(Seg(f'<｜DSML｜invoke name="{n}">\n{body}</｜DSML｜invoke>\n', "call", first + i))
    return segs + [Seg("</｜DSML｜function_calls>", "opt")]


def block_xml_tools(draw, names, first, at_start):
    segs = []
    for i, n in enumerate(names):
        body = ""
        for k, v in _xml_params(draw):
            v = v.replace("&", "")
            body += f"<{k}>{v}</{k}>\n"
        segs.append(Seg(f"<{n}>\n{body}</{n}>", "call", first + i))
    return segs


_G4_MARKERS = ('<|"|>', "<tool_call|>", "<|tool_call>")
_G4_BARE_KEY = re.compile(r"[^\s:{}\[\],<>\"|]+\Z")


def _g4_str(text: str) -> str:
    return '<|"|>' + sanitize(text, _G4_MARKERS) + '<|"|>'


def _g4_value(draw: st.DrawFn, value: Any) -> str:
    """Gemma 4's serialization of ``value``: bare keys (quoted when they need it), ``<|"|>`` strings."""
    if isinstance(value, dict):
        members = []
        for k, v in value.items():
            key = k if _G4_BARE_KEY.match(k) else _g4_str(k)
            members.append(key + ":" + _g4_value(draw, v))
        return "{" + ",".join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_g4_value(draw, v) for v in value) + "]"
    if isinstance(value, str):
        return _g4_str(value)
    return json.dumps(value)


def block_gemma4(draw, names, first, at_start):
    return [Seg("<|tool_call>call:" + n + _g4_value(draw, draw(arguments())) + "<tool_call|>", "call", first + i)
            for i, n in enumerate(names)]


def block_lfm2(draw, names, first, at_start):
    form = draw(st.sampled_from(("pythonic", "pythonic", "json_list", "json_object")))
    if form == "json_object" and len(names) == 1:
        return [Seg("<|tool_call_start|>" + _json_envelope(draw, names[0], ("arguments", "parameters"))
                    + "<|tool_call_end|>", "call", first)]
    if form == "json_list":
        segs = [Seg("<|tool_call_start|>[", "opt")]
        for i, n in enumerate(names):
            if i:
                segs.append(Seg(draw(st.sampled_from((", ", ",", ",\n "))), "opt"))
            segs.append(Seg(_json_envelope(draw, n, ("arguments", "parameters")), "call", first + i))
        return segs + [Seg("]<|tool_call_end|>", "opt")]
    segs = block_pythonic(draw, names, first, True)
    return [Seg("<|tool_call_start|>[", "opt"), *segs[1:-1], Seg("]<|tool_call_end|>", "opt")]


def block_olmo3(draw, names, first, at_start):
    segs = [Seg("<function_calls>", "opt")]
    for i, n in enumerate(names):
        if i:
            segs.append(Seg(draw(st.sampled_from(("\n", "\n\n", " \n"))), "opt"))
        args = draw(arguments(extra_keys=False))
        segs.append(Seg(n + "(" + ", ".join(f"{k}={_py_literal(draw, v)}" for k, v in args.items()) + ")",
                        "call", first + i))
    return segs + [Seg("</function_calls>", "opt")]


def block_step3(draw, names, first, at_start):
    segs = [Seg("<｜tool_calls_begin｜>", "opt")]
    for i, n in enumerate(names):
        body = "".join(f'<steptml:parameter name="{k}">{v}</steptml:parameter>' for k, v in _xml_params(draw))
        sep = draw(st.sampled_from(("function<｜tool_sep｜>", "")))
        segs += [Seg(f"<｜tool_call_begin｜>{sep}", "opt"),
                 Seg(f'<steptml:invoke name="{n}">{body}</steptml:invoke>', "call", first + i),
                 Seg("<｜tool_call_end｜>", "opt")]
    return segs + [Seg("<｜tool_calls_end｜>", "opt")]


def block_deepseek_v4(draw, names, first, at_start):
    segs = block_deepseek_v32(draw, names, first, at_start)
    return [Seg("<｜DSML｜tool_calls>\n", "opt"), *segs[1:-1], Seg("</｜DSML｜tool_calls>", "opt")]


def block_minicpm5(draw, names, first, at_start):
    segs = []
    for i, n in enumerate(names):
        body = ""
        for k, v in _xml_params(draw):
            if draw(st.booleans()):
                v = "<![CDATA[" + v.replace("]]>", "") + draw(st.sampled_from(("", "</param>", "<a>"))) + "]]>"
            body += f'<param name="{k}">{v}</param>'
        segs.append(Seg(f'<function name="{n}">{body}</function>', "call", first + i))
        if i < len(names) - 1:
            segs.append(Seg("\n", "opt"))
    return segs


def block_minimax_m3(draw, names, first, at_start):
    m = "]<]minimax[>["
    segs = [Seg(f"{m}<tool_call>\n", "opt")]
    for i, n in enumerate(names):
        body = ""
        for k, v in _xml_params(draw):
            body += f"{m}<{k}>{v.replace(m, '')}{m}</{k}>" + draw(st.sampled_from(("", "\n")))
        segs.append(Seg(f'{m}<invoke name="{n}">{body}{m}</invoke>\n', "call", first + i))
    return segs + [Seg(f"{m}</tool_call>", "opt")]


def block_functionary_v3_1(draw, names, first, at_start):
    segs = []
    for i, n in enumerate(names):
        if i:
            segs.append(Seg(draw(st.sampled_from(("", "\n"))), "opt"))
        segs.append(Seg(f"<function={n}>" + dumps(draw, draw(arguments())) + "</function>", "call", first + i))
    return segs


def block_functionary_v3_2(draw, names, first, at_start):
    # The first message of the output has no ">>>" (the prompt wrote it); content before it gets "all\n".
    return [Seg(("" if at_start and first + i == 0 else ">>>") + f"{n}\n" + dumps(draw, draw(arguments())), "call", first + i)
            for i, n in enumerate(names)]


# -- JSON-array family: each array element, or each per-call block, is one call -------

_ARRAY_HEADS: dict[str, tuple[tuple[str, str], ...]] = {
    "granite": (("<|tool_call|>", ""), ("<tool_call>", "")),
    "hunyuan_a13b": (("<tool_calls>", "</tool_calls>"),),
    "xlam": (("<tool_call>", "</tool_call>"), ("[TOOL_CALLS]", ""), ("```json\n", "\n```"), ("```", "```")),
    "jamba": (("<tool_calls>", "</tool_calls>"),),
    "apriel": (("<tool_calls>", "</tool_calls>"),),
    "nemotron": (("<TOOLCALL>", "</TOOLCALL>"),),
    "command_r7b": (("<|START_ACTION|>", "<|END_ACTION|>"),),
    "phi4_mini_json": (("functools", ""),),
    "firefunction_v2": (("functools", ""),),
    "apertus": (("<|tools_prefix|>", "<|tools_suffix|>"),),
    "command_r_plus": (("Action:\n```json\n", "\n```"), ("Action: ```json", "```")),
}
_BARE_ARRAY = frozenset({"granite", "xlam"})  # a bare [ opens the array at the start of the output


def _json_array_block(dialect: str):
    def render(draw, names, first, at_start):
        forms = _ARRAY_HEADS[dialect]
        if dialect in _BARE_ARRAY and at_start and first == 0:
            forms = forms + (("", ""),)
        head, tail = draw(st.sampled_from(forms))
        segs = [Seg(head + (draw(st.sampled_from(("", " ", "\n"))) if head else "") + "[", "opt")]
        for i, n in enumerate(names):
            if i:
                segs.append(Seg(draw(st.sampled_from((", ", ",", ",\n "))), "opt"))
            if dialect == "apertus":
                segs.append(Seg(dumps(draw, {n: draw(arguments())}), "call", first + i))
            elif dialect == "command_r_plus":
                segs.append(Seg(dumps(draw, {"tool_name": n, "parameters": draw(arguments())}), "call", first + i))
            elif dialect == "command_r7b":
                obj = {"tool_call_id": str(first + i), "tool_name": n, "parameters": draw(arguments())}
                segs.append(Seg(dumps(draw, obj), "call", first + i))
            else:
                segs.append(Seg(_json_envelope(draw, n, ("arguments", "parameters")), "call", first + i))
        return segs + [Seg("]" + tail, "opt")]

    return render


_CALL_HEADS: dict[str, tuple[tuple[str, str], ...]] = {
    "granite4": (("<tool_call>", "</tool_call>"), ("<tool_call>\n", "\n</tool_call>")),
    "ernie45": (("<tool_call>\n", "\n</tool_call>\n"), ("<tool_call>", "</tool_call>")),
    "longcat": (("<longcat_tool_call>", "</longcat_tool_call>"),),
    "granite-20b-fc": (("<function_call> ", ""),),
    "gigachat3": (("<|message_sep|>\n\nfunction call<|role_sep|>\n", ""), ("<|function_call|>", "</s>"),
                  ("<|function_call|>", "")),
}


def _json_call_block(dialect: str):
    def render(draw, names, first, at_start):
        segs = []
        for i, n in enumerate(names):
            if i:
                segs.append(Seg(draw(st.sampled_from(("", "\n"))), "opt"))
            head, tail = draw(st.sampled_from(_CALL_HEADS[dialect]))
            fields = ("arguments",) if dialect == "gigachat3" else ("arguments", "parameters")
            segs.append(Seg(head + _json_envelope(draw, n, fields) + tail, "call", first + i))
        return segs

    return render


BLOCKS = {
    "granite": _json_array_block("granite"),
    "granite4": _json_call_block("granite4"),
    "granite-20b-fc": _json_call_block("granite-20b-fc"),
    "hunyuan_a13b": _json_array_block("hunyuan_a13b"),
    "ernie45": _json_call_block("ernie45"),
    "xlam": _json_array_block("xlam"),
    "jamba": _json_array_block("jamba"),
    "apriel": _json_array_block("apriel"),
    "nemotron": _json_array_block("nemotron"),
    "phi4_mini_json": _json_array_block("phi4_mini_json"),
    "firefunction_v2": _json_array_block("firefunction_v2"),
    "apertus": _json_array_block("apertus"),
    "command_r7b": _json_array_block("command_r7b"),
    "longcat": _json_call_block("longcat"),
    "gigachat3": _json_call_block("gigachat3"),
    "lfm2": block_lfm2,
    "olmo3": block_olmo3,
    "step3": block_step3,
    "step3p5": block_qwen3_coder,
    "ling3": block_glm45,
    "deepseek_v4": block_deepseek_v4,
    "hermes": block_hermes,
    "internlm": block_internlm,
    "llama3_json": block_llama3_json,
    "mistral": block_mistral,
    "pythonic": block_pythonic,
    "llama4_pythonic": block_pythonic,
    "deepseek_v3": block_deepseek_v3,
    "deepseek_v31": block_deepseek_v31,
    "kimi_k2": block_kimi_k2,
    "deepseek_v32": block_deepseek_v32,
    "qwen3_coder": block_qwen3_coder,
    "glm45": block_glm45,
    "glm47": block_glm47,
    "minimax_m2": block_minimax_m2,
    "seed_oss": block_seed_oss,
    "xml_tools": block_xml_tools,
    "gemma4": block_gemma4,
    "kimi_k3": block_kimi_k3,
    "minicpm5": block_minicpm5,
    "minimax_m3": block_minimax_m3,
    "functionary_v3_1": block_functionary_v3_1,
    "command_r_plus": _json_array_block("command_r_plus"),
    "functionary_v3_2": block_functionary_v3_2,
}

# Dialects whose block ends the output's useful text (a call list with no closer: text after it could
# be read as part of the block), so the generator puts no content after their block.
_NOTHING_AFTER = {"llama3_json", "mistral", "pythonic", "llama4_pythonic"}
# Dialects whose block may only open at the start of a channel in the generated form.
_ONE_BLOCK = {"llama3_json", "mistral", "pythonic", "llama4_pythonic"}


# -- whole outputs ------------------------------------------------------------------------------------------


@st.composite
def _names(draw: st.DrawFn, tools: tuple[str, ...], n: int) -> list[str]:
    pool = st.one_of(st.sampled_from(tools), st.sampled_from(tools), st.sampled_from(NOT_OFFERED))
    return [draw(pool) for _ in range(n)]


@st.composite
def harmony_output(draw: st.DrawFn, tools: tuple[str, ...], reasoning: str | None) -> Rendered:
    segs: list[Seg] = []
    names: list[str] = []
    nmsg = draw(st.integers(1, 5))
    for i in range(nmsg):
        last = i == nmsg - 1
        start = "<|start|>assistant" if i else ""
        kind = draw(st.sampled_from(("analysis", "final", "preamble", "call", "call")))
        text = sanitize(draw(FREE_TEXT), ("<|",))
        if kind == "call":
            name = draw(_names(tools, 1))[0]
            form = draw(st.sampled_from(("a", "b")))
            head = (f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>" if form == "a"
                    else f" to=functions.{name}<|channel|>commentary json<|message|>")
            term = draw(st.sampled_from(("<|call|>", "<|call|>", "")) if last else st.just("<|call|>"))
            segs.append(Seg(start + head + dumps(draw, draw(arguments())) + term, "call", len(names)))
            names.append(name)
            continue
        channel = {"analysis": "analysis", "final": "final", "preamble": "commentary"}[kind]
        term = draw(st.sampled_from(("<|end|>", "<|return|>", "")) if last else st.just("<|end|>"))
        if kind == "analysis" and reasoning is None:
            # without the reasoning parser an analysis message is still routed by the Harmony router
            pass
        segs += [Seg(start + f"<|channel|>{channel}<|message|>", "gone"), Seg(text, "must"), Seg(term, "gone")]
    return Rendered("openai", reasoning, None, tools, segs, names)


@st.composite
def dialect_output(draw: st.DrawFn, tool_parser: str) -> Rendered:
    """A well-formed output of ``tool_parser`` with 0-3 calls and optional reasoning before them."""
    reasoning = draw(st.sampled_from(REASONING_FOR[tool_parser]))
    tools = tuple(draw(st.lists(st.sampled_from(OFFERED), min_size=1, max_size=len(OFFERED), unique=True)))
    if tool_parser == "openai":
        return draw(harmony_output(tools, reasoning))
    forbidden = TOOL_MARKERS[tool_parser] + reasoning_markers(reasoning) + tuple(f"<{n}" for n in tools + NOT_OFFERED)
    free = FREE_TEXT.map(lambda t: sanitize(t, forbidden))
    segs: list[Seg] = []
    enable_thinking: bool | None = None
    if reasoning is not None:
        spec = registry.get_reasoning_dialect(reasoning)
        enable_thinking = True
        if not spec.starts_open or draw(st.booleans()):
            segs.append(Seg(spec.start, "gone"))
        segs += [Seg(draw(free).strip() or "thinking", "must"), Seg(spec.end, "gone")]
    ncalls = draw(st.integers(0, 3))
    names = draw(_names(tools, ncalls))
    render = BLOCKS[tool_parser]
    lead = draw(free)
    if tool_parser in _ONE_BLOCK:
        # The start rule counts JSON whitespace only ("\x1f" is whitespace to str.strip, not to the parsers).
        at_start = not lead.strip(" \t\r\n") or tool_parser == "mistral"
        if tool_parser in ("pythonic", "llama4_pythonic", "llama3_json") and not at_start and ncalls:
            lead = ""
            at_start = True
        if lead:
            segs.append(Seg(lead, "must"))
        if ncalls:
            segs += render(draw, names, 0, at_start)
        if not ncalls or tool_parser not in _NOTHING_AFTER:
            tail = draw(free)
            if tail:
                segs.append(Seg(tail, "must"))
    else:
        if lead and tool_parser == "functionary_v3_2":
            segs.append(Seg("all\n", "gone"))  # content is addressed to "all" (its first line)
        if lead:
            segs.append(Seg(lead, "must"))
        i = 0
        while i < ncalls:
            k = draw(st.integers(1, ncalls - i))
            segs += render(draw, names[i : i + k], i, not lead)
            i += k
            gap = draw(free)
            if gap:
                segs.append(Seg(gap, "must"))
    return Rendered(tool_parser, reasoning, enable_thinking, tools, segs, names)


# -- mutations ---------------------------------------------------------------------------------------------

MUTATIONS = ("truncate", "dup_marker", "drop_marker", "nest_marker", "marker_in_value", "unicode")
_RANDOM_UNICODE = ("\ud800", "\udfff", "\x00", "\ufeff", "‮", "\u2028", "😀", "\U0010ffff", "é", "\\", '"', "\n")


def _marker_spans(text: str, markers: tuple[str, ...]) -> list[tuple[int, str]]:
    out = []
    for m in markers:
        start = text.find(m)
        while start != -1:
            out.append((start, m))
            start = text.find(m, start + 1)
    return out


@st.composite
def mutated(draw: st.DrawFn, r: Rendered) -> Rendered:
    """Apply one mutation (or none) to ``r``'s text."""
    text = r.source()
    mutation = draw(st.sampled_from((None, None, *MUTATIONS)))
    markers = TOOL_MARKERS[r.tool_parser] + reasoning_markers(r.reasoning_parser)
    if mutation == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif mutation in ("dup_marker", "drop_marker"):
        spans = _marker_spans(text, markers)
        if spans:
            i, m = draw(st.sampled_from(spans))
            text = text[:i] + (m + m if mutation == "dup_marker" else "") + text[i + len(m):]
    elif mutation == "nest_marker":
        # a marker inserted inside a call block (inside another block's framing or arguments)
        pos, spans = 0, []
        for s in r.segs:
            if s.role == "call":
                spans.append((pos, pos + len(s.text)))
            pos += len(s.text)
        lo, hi = draw(st.sampled_from(spans)) if spans else (0, len(text))
        i = draw(st.integers(lo, hi))
        text = text[:i] + draw(st.sampled_from(markers)) + text[i:]
    elif mutation == "marker_in_value":
        # a marker inside a JSON string or an XML value: after a quote, or after a value opener
        cands = [i + 1 for i, c in enumerate(text) if c in "\">"]
        if cands:
            i = draw(st.sampled_from(cands))
            m = draw(st.sampled_from(markers))
            text = text[:i] + m + text[i:]
    elif mutation == "unicode":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(text)))
            ins = draw(st.one_of(st.sampled_from(_RANDOM_UNICODE), st.text(max_size=3)))
            text = text[:i] + ins + text[i:]
    out = Rendered(r.tool_parser, r.reasoning_parser, r.enable_thinking, r.tools, r.segs, r.names, mutation, text)
    return out


@st.composite
def fuzz_cases(draw: st.DrawFn, tool_parser: str, mutate: bool = True) -> Rendered:
    r = draw(dialect_output(tool_parser))
    if mutate:
        return draw(mutated(r))
    r.text = r.source()
    return r


@st.composite
def chunkings(draw: st.DrawFn, text: str) -> list[str]:
    """Any split of ``text``: random cut points (empty chunks too), a fixed size, or one character each."""
    how = draw(st.sampled_from(("points", "points", "size", "chars")))
    if how == "chars":
        return list(text) or [""]
    if how == "size":
        k = draw(st.integers(1, 16))
        return [text[i : i + k] for i in range(0, len(text), k)] or [""]
    points = sorted(draw(st.lists(st.integers(0, len(text)), max_size=max(1, min(len(text), 60)))))
    out, prev = [], 0
    for p in points:
        out.append(text[prev:p])
        prev = p
    out.append(text[prev:])
    return out
