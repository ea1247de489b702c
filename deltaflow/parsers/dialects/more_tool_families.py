"""More tool dialects on the pythonic, JSON-envelope and XML-function drivers.

Tool parsers (names as vLLM, SGLang and llama.cpp name them; facts from
shared/dialects.md sections 4, 6, 7, 8c and 14, and the corpus vectors):

* ``lfm2`` (Liquid LFM2 / LFM2.5; SGLang ``lfm2``, llama.cpp ``lfm2``):
  ``<|tool_call_start|>[f(a=1), g()]<|tool_call_end|>``. The payload is a
  pythonic call list (the usual LFM2 output), or JSON: a list of
  ``{"name", "arguments"|"parameters"}`` objects or one such object (SGLang
  accepts both). The first non-blank character after the opener decides:
  ``{`` one JSON object, ``[`` then ``{`` a JSON list, anything else the
  pythonic list (which surfaces what is not a call list, e.g. an empty
  block). Pythonic values use :func:`python_literal_to_json` (vLLM's lfm2
  recoveries: raw control characters inside strings, leading-zero integers,
  sets as arrays, JSON ``true``/``false``/``null``) and the nested-quote rule
  of :mod:`deltaflow.parsers.drivers.pythonic`. Both markers are special tokens
  (vLLM refuses to start without their ids), so no prefix is declared.
  A block opens anywhere; a bare ``[`` never does (llama.cpp: bracketed text
  outside the markers is content).
* ``olmo3`` (OLMo 3): newline-separated pythonic calls without list brackets
  between ``<function_calls>`` and ``</function_calls>``; JSON
  ``true``/``false``/``null`` are accepted as values (vLLM). The opener is
  text in the cl100k-based OLMo vocabulary (``<`` ``function`` ``_calls``
  ``>``, checked with shared/tokenizers/cl100k), so its prefixes are declared.
* ``step3`` (StepFun Step3, section 14):
  ``<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f"><steptml:parameter name="k">v</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>``.
  MiniMax-style invokes inside a section; the per-call wrapper
  (``<｜tool_call_begin｜>``, an optional ``function<｜tool_sep｜>``,
  ``<｜tool_call_end｜>``) is filler between invokes (vLLM's own tests omit
  ``function<｜tool_sep｜>``). ``｜`` is U+FF5C with ASCII ``_``; the section
  markers are special tokens (vLLM lists them), so no prefix is declared.
  Values are typed by the tool's schema.
* ``step3p5`` (Step-3.5): Qwen3-Coder's XML
  (``<tool_call><function=N><parameter=K>V</parameter></function></tool_call>``),
  the same declaration as ``qwen3_coder``. No Step-3.5 tokenizer is
  available: the declared prefixes cover ``<tool_call>`` written as text too.
* ``ling3`` (Ling 3.0 / Bailing V3; llama.cpp ``ling3``): GLM-4.5's
  ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>``,
  the same declaration as ``glm45`` (values typed by schema; a union with
  string keeps text that only starts like a number as a string). No Ling
  tokenizer is available; the prefixes of ``<tool_call>`` are declared.
* ``deepseek_v4`` (DeepSeek-V4; llama.cpp vectors): DeepSeek-V3.2's DSML
  with the block ``<｜DSML｜tool_calls>`` ... ``</｜DSML｜tool_calls>``
  (corpus README). DSML is text; the splits are those of the DeepSeek-V3.1
  vocabulary (``<`` ``｜`` ``DS`` ``ML`` ``｜`` ``tool`` ``_c`` ``alls`` ``>``).

Reasoning parsers of these families are declared elsewhere.

Stable-prefix guarantee: as the drivers state; the LFM2 dispatcher adds
only the blanks after the opener until the payload's first character (and,
for a JSON list, the blanks and ``]`` before ``<|tool_call_end|>``).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import replace
from typing import Any, final

from ..._core.text import skip_json_ws, skip_space
from ...items import ToolDelta
from ..drivers.json_envelope import JsonEnvelopeDriver, JsonEnvelopeFormat
from ..drivers.pythonic import PythonicDriver
from ..registry import register_tool_dialect
from ..spec import ToolDialect, ToolDriver, DriverContext, all_prefixes
from ..drivers.xml_function import XmlFunctionDriver, XmlFunctionFormat
from .xml_family import DSML_FORMAT, GLM_FORMAT, QWEN3_CODER_FORMAT, xml_function_dialect

__all__ = (
    "LFM2_END",
    "LFM2_START",
    "Lfm2Driver",
    "OLMO3_END",
    "OLMO3_START",
    "STEP3_FORMAT",
    "python_literal_to_json",
)

LFM2_START = "<|tool_call_start|>"
"""LFM2's tool block opener (a special token)."""
LFM2_END = "<|tool_call_end|>"
"""LFM2's tool block closer (a special token)."""
OLMO3_START = "<function_calls>"
"""OLMo 3's tool block opener (text)."""
OLMO3_END = "</function_calls>"
"""OLMo 3's tool block closer (text)."""

# -- lenient Python literals ------------------------------------------------------------------

# A Python string literal (optional prefix); the body may hold raw newlines (repaired below).
_PY_STRING = re.compile(
    r"""(?P<prefix>[rRbBuU]{0,2})(?P<lit>'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""",
    re.S,
)
_STRING_FIX = re.compile(r"\\(.)|[\x00-\x1f]", re.S)
_VALID_ESCAPES = frozenset("\n\\'\"abfnrtv01234567xNuU")
_LEADING_ZEROS = re.compile(r"(?<![\w.])0+(?=\d)")
_CTRL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_JSON_NAMES: dict[str, Any] = {"true": True, "false": False, "null": None}
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotLiteral(Exception):
    """The source is not a literal this converter accepts."""


def _ctrl(ch: str) -> str:
    return _CTRL.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x20 else ch)


def _fix_escape(m: re.Match[str]) -> str:
    c = m.group(1)
    if c is None:
        return _ctrl(m.group())  # a raw control character inside a string
    if c in _VALID_ESCAPES:
        return m.group()
    return "\\\\" + _ctrl(c)  # an unknown escape keeps its backslash (as Python does, without the warning)


def _repair(source: str) -> str:
    """Repair what vLLM's lfm2 recovers: raw control characters and unknown escapes in strings, ``07``."""
    out: list[str] = []
    pos = 0
    for m in _PY_STRING.finditer(source):
        out.append(_LEADING_ZEROS.sub("", source[pos : m.start()]))
        prefix, lit = m.group("prefix"), m.group("lit")
        if "r" in prefix.lower():
            out.append(m.group())
        else:
            q = 3 if lit[:3] in ("'''", '"""') and len(lit) >= 6 else 1
            out.append(prefix + lit[:q] + _STRING_FIX.sub(_fix_escape, lit[q:-q]) + lit[-q:])
        pos = m.end()
    out.append(_LEADING_ZEROS.sub("", source[pos:]))
    return "".join(out)


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        v = node.value
        if v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)):
            return v
        raise _NotLiteral
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = node.operand
        number = operand.value if isinstance(operand, ast.Constant) else None
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return -number if isinstance(node.op, ast.USub) else number
        raise _NotLiteral
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]  # a set keeps the written order (vLLM lfm2)
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for k_node, v_node in zip(node.keys, node.values):
            if k_node is None:
                raise _NotLiteral  # "**x"
            key = _literal(k_node)
            if not (key is None or isinstance(key, (str, int, float, bool))):
                raise _NotLiteral
            out[key] = _literal(v_node)
        return out
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    raise _NotLiteral


def python_literal_to_json(source: str) -> str | None:
    """Convert one keyword value's source to JSON text, leniently; None if it is not a literal.

    The source is parsed into a syntax tree (never evaluated) and only
    literals are accepted: strings, numbers, True/False/None, lists, tuples,
    sets (as arrays, in written order), dicts with scalar keys, and JSON's
    ``true``/``false``/``null`` anywhere. Before parsing, raw control
    characters inside strings are escaped, an unknown escape keeps its
    backslash, and leading zeros of integers are dropped (``07`` is 7).
    """
    src = _repair(source.strip())
    try:
        value = _literal(ast.parse(src, mode="eval").body)
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (_NotLiteral, ValueError, TypeError, SyntaxError, MemoryError, RecursionError, OverflowError):
        return None
    if _SURROGATE.search(text):  # a lone surrogate cannot be encoded as UTF-8: escape it
        text = json.dumps(value, allow_nan=False)
    return text


# -- LFM2 -------------------------------------------------------------------------------------

_LFM2_OBJECT = JsonEnvelopeFormat(open=(LFM2_START,), close=LFM2_END, args_fields=("arguments", "parameters"))
_LFM2_LIST = JsonEnvelopeFormat(
    open=(LFM2_START, "["), close=None, args_fields=("arguments", "parameters"), separator=","
)
# Payload kinds.
_PYTHONIC, _OBJECT, _LIST = range(3)


@final
class Lfm2Driver:
    """One LFM2 block: dispatches on the payload's first character (see the module docstring).

    Args:
        ctx: the block's context (channel, call numbering, tools).
    """

    __slots__ = ("done", "_ctx", "_inner", "_kind", "_tail", "_call", "_aborted")

    def __init__(self, ctx: DriverContext) -> None:
        self.done = False
        self._ctx = ctx
        self._inner: ToolDriver | None = None
        self._kind = _PYTHONIC
        self._tail = False
        self._call = -1
        self._aborted = False

    @property
    def complete(self) -> bool:
        """The block could end here (only an optional closer is still looked for)."""
        if self._tail:
            return True
        inner = self._inner
        return inner is not None and self._kind != _LIST and bool(getattr(inner, "complete", False))

    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        inner = self._inner
        if inner is None:
            kind = self._choose(text, start, final)
            if kind is None:
                return start  # only blanks after the opener so far: held by the caller
            self._kind = kind
            if kind == _OBJECT:
                inner = JsonEnvelopeDriver(self._ctx, _LFM2_OBJECT)
            elif kind == _LIST:
                inner = JsonEnvelopeDriver(self._ctx, _LFM2_LIST)
            else:
                inner = PythonicDriver(
                    self._ctx, start=LFM2_START, end=LFM2_END, convert=python_literal_to_json, nested_quotes=True
                )
            self._inner = inner
        if not self._tail:
            mark = len(out)
            pos = inner.feed_tool_block(text, out, final, start)
            for ev in out[mark:]:
                if isinstance(ev, ToolDelta):
                    self._call = ev.call
                    self._aborted = self._aborted or ev.abort
            if not inner.done:
                return pos
            if self._kind != _LIST or self._aborted:
                self.done = True
                return pos
            self._tail = True
            start = pos
        return self._close_list(text, out, final, start)

    @staticmethod
    def _choose(text: str, start: int, final: bool) -> int | None:
        """The payload kind, from the first non-blank characters after the opener (None: not yet known)."""
        p = skip_space(text, start)
        if not text.startswith(LFM2_START, p):  # pragma: no cover - the feeder opens a block at the opener
            return _PYTHONIC
        n = len(text)
        q = skip_space(text, p + len(LFM2_START))
        if q >= n:
            return _PYTHONIC if final else None
        if text[q] == "{":
            return _OBJECT
        if text[q] != "[":
            return _PYTHONIC
        r = skip_space(text, q + 1)
        if r >= n:
            return _PYTHONIC if final else None
        return _LIST if text[r] == "{" else _PYTHONIC

    def _close_list(self, text: str, out: list[object], final: bool, pos: int) -> int:
        """After a JSON list's last element: ``]`` and ``<|tool_call_end|>`` are raw text of the last call."""
        n = len(text)
        p = skip_json_ws(text, pos)
        if p >= n and not final:
            return pos
        end = pos
        if p < n and text[p] == "]":
            end = p + 1
            q = skip_json_ws(text, end)
            if text.startswith(LFM2_END, q):
                end = q + len(LFM2_END)
            elif LFM2_END.startswith(text[q:]):  # blanks, or a closer cut by the chunk end
                if not final:
                    return pos
                if q < n:
                    end = n  # a closer cut short at the very end belongs to the call
        if end > pos:
            out.append(ToolDelta(call=self._call, channel=self._ctx.channel, raw=text[pos:end], end=True))
        self.done = True
        return end


LFM2 = register_tool_dialect(
    ToolDialect(
        name="lfm2",
        openers=(LFM2_START,),
        factory=Lfm2Driver,
        markers=(LFM2_START, LFM2_END),
        lead_blanks=True,  # blanks before <|tool_call_start|> are framing (SGLang strips them)
        token_prefixes=(),
        description="LFM2: <|tool_call_start|>[f(a=1), g()]<|tool_call_end|> (or a JSON list of {name, arguments})",
        families=("LFM2", "LFM2.5", "LFM2-8B-A1B", "LFM2.5-8B-A1B"),
    )
)

# -- OLMo 3 -----------------------------------------------------------------------------------


def _olmo3(ctx: DriverContext) -> PythonicDriver:
    return PythonicDriver(
        ctx, start=OLMO3_START, end=OLMO3_END, bracketed=False, convert=python_literal_to_json
    )


OLMO3 = register_tool_dialect(
    ToolDialect(
        name="olmo3",
        openers=(OLMO3_START,),
        factory=_olmo3,
        markers=(OLMO3_START, OLMO3_END),
        # cl100k (OLMo's base vocabulary): '<' 'function' '_calls' '>' (tests check it).
        token_prefixes=("<", "<function", "<function_calls"),
        tokenizers=("cl100k",),
        description="OLMo 3: <function_calls>f(a=1)\\ng()</function_calls> (newline-separated pythonic calls)",
        families=("OLMo-3-7B-Instruct", "OLMo-3-32B-Think", "OLMo-3.1"),
    )
)

# -- Step3 ------------------------------------------------------------------------------------

STEP3_FORMAT = XmlFunctionFormat(
    block_open="<｜tool_calls_begin｜>",
    block_close="<｜tool_calls_end｜>",
    call_open="<steptml:invoke",
    call_close="</steptml:invoke>",
    name_style="attr",
    param_open="<steptml:parameter",
    key_style="attr",
    key_end=">",
    value_open=None,
    value_close="</steptml:parameter>",
    fillers=("<｜tool_call_begin｜>", "function<｜tool_sep｜>", "<｜tool_call_end｜>"),
)
"""Step3's section: MiniMax-style invokes, each wrapped in Step3's per-call markers (fillers)."""


def _step3(ctx: DriverContext) -> XmlFunctionDriver:
    return XmlFunctionDriver(ctx, STEP3_FORMAT)


STEP3 = register_tool_dialect(
    ToolDialect(
        name="step3",
        openers=STEP3_FORMAT.openers,
        factory=_step3,
        markers=(*STEP3_FORMAT.markers, "<｜tool_call_begin｜>", "<｜tool_sep｜>", "<｜tool_call_end｜>"),
        token_prefixes=(),
        description='Step3: <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="N">...',
        families=("Step3",),
    )
)

STEP3P5 = register_tool_dialect(
    xml_function_dialect(
        "step3p5",
        QWEN3_CODER_FORMAT,
        token_prefixes=("<", "<tool", "<tool_", "<tool_call", "<function"),
        description="Step-3.5: <tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>",
        families=("Step-3.5-Flash",),
    )
)

# -- Ling 3 -----------------------------------------------------------------------------------

LING3 = register_tool_dialect(
    xml_function_dialect(
        "ling3",
        GLM_FORMAT,
        # No Ling tokenizer in shared/: every prefix of the end-of-turn token is held too.
        token_prefixes=("<", "<tool", "<tool_", "<tool_call", *all_prefixes("<|role_end|>")),
        # The end-of-turn special token is turn framing, never answer text (llama.cpp strips it).
        framing=("<|role_end|>",),
        description="Ling 3 / Bailing V3: <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>",
        families=("Ling-3.0", "Ring-3.0"),
    )
)

# -- DeepSeek-V4 ------------------------------------------------------------------------------

DSML_V4_FORMAT = replace(DSML_FORMAT, block_open="<｜DSML｜tool_calls>", block_close="</｜DSML｜tool_calls>")

DEEPSEEK_V4 = register_tool_dialect(
    xml_function_dialect(
        "deepseek_v4",
        DSML_V4_FORMAT,
        token_prefixes=(
            "<", "<｜", "<｜DS", "<｜DSML", "<｜DSML｜", "<｜DSML｜tool", "<｜DSML｜tool_c", "<｜DSML｜tool_calls",
            # "invoke" is BPE-merged with letters glued after it, so any split of it can occur.
            "<｜DSML｜i", "<｜DSML｜in", "<｜DSML｜inv", "<｜DSML｜invo", "<｜DSML｜invok",
        ),
        tokenizers=("deepseek-v3.1",),
        description='DeepSeek-V4 DSML: <｜DSML｜tool_calls><｜DSML｜invoke name="N"><｜DSML｜parameter name="K" string="true|false">',
        families=("DeepSeek-V4",),
    )
)
