"""Python literals as JSON text, read without evaluation: the pythonic call formats' value converters.

Two readers of one keyword value's source, both never evaluating anything:

* :func:`literal_to_json`: :func:`ast.literal_eval` (literals only); tuples
  become arrays, dict keys that are numbers, booleans or None become strings
  (as :func:`json.dumps` writes them), a source that is JSON but not Python
  (``true``, ``null``) is taken as JSON (the ``pythonic`` dialects);
* :func:`lenient_literal_to_json`: walks the syntax tree itself and repairs
  what vLLM's ``lfm2`` parser recovers (raw control characters and unknown
  escapes in strings, leading-zero integers, sets as arrays in written
  order, JSON ``true``/``false``/``null`` anywhere): LFM2 and OLMo 3.

A lone surrogate (not encodable as UTF-8) is written as a ``\\uXXXX`` escape.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from .text import has_surrogate

__all__ = ("lenient_literal_to_json", "literal_to_json")


def literal_to_json(source: str) -> str | None:
    """Convert the source of one complete Python literal to JSON text, or None if it is not one.

    The source is parsed by :func:`ast.literal_eval` (literals only; nothing
    is evaluated). Tuples become arrays; dict keys that are numbers, booleans
    or None become strings, as :func:`json.dumps` does. A source that is not
    a Python literal but is valid JSON (``true``, ``null``) is taken as JSON.
    """
    src = source.strip()
    try:
        value = ast.literal_eval(src)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        try:
            value = json.loads(src)
        except (ValueError, RecursionError):
            return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return None
    if has_surrogate(text):  # a lone surrogate cannot be encoded as UTF-8: escape it
        text = json.dumps(value, allow_nan=False)
    return text



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
        for k_node, v_node in zip(node.keys, node.values, strict=True):
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


def lenient_literal_to_json(source: str) -> str | None:
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
    if has_surrogate(text):  # a lone surrogate cannot be encoded as UTF-8: escape it
        text = json.dumps(value, allow_nan=False)
    return text
