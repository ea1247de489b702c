"""Schema-typed conversion of raw XML parameter values (pure functions, no pydantic).

XML-like tool dialects (Qwen3-Coder, GLM-4.x, MiniMax-M2, Seed-OSS, DSML)
write every parameter value as raw text; whether ``42`` is the number 42 or
the string "42" is decided by the tool's JSON schema for that parameter
(shared/dialects.md section 0, "Argument encoding families"). This module
turns a parameter's schema into a :class:`ValuePlan` once, and a raw value
into JSON text with :func:`convert`.

Rules (deliberate; CONFORMANCE.md "XML-like, function-first dialects"):

* No schema for the parameter (no ``tools``, an unknown tool, a key that is
  not among ``properties``, or a schema without type information): the value
  is a string. This is what vLLM, LMDeploy and llama.cpp do.
* The schema's types are read from ``type`` (a name or a list), ``anyOf`` /
  ``oneOf`` / ``allOf`` members, local ``$ref`` s, and ``enum`` / ``const``
  values. Non-standard names seen in tool definitions (``int``, ``float``,
  ``bool``, ``dict``, ``list`` ...) are mapped to the JSON Schema types.
* Every non-string type of the schema is tried in schema order on the value
  with surrounding whitespace removed; the first that accepts it wins.
  ``null`` (any case) or ``None`` is JSON null only when the schema admits
  null. Anything no typed reading accepts is the string, verbatim. String is
  therefore always the last resort: with ``["string", "integer"]``, ``42`` is
  the number (llama.cpp; vLLM does the same for type lists).
* integer: a JSON number whose value is whole (``5``, ``5.0``, ``-1e3``);
  written as an integer. number: a JSON number, verbatim. boolean: ``true`` /
  ``false`` in any case. object / array: the JSON text verbatim when it is an
  object / array; else, in order, a JSON string holding one, the text read as
  the body of a JSON string (backslash-escaped quotes, a GLM quirk), or a
  Python literal (``{'k': True}``, read with ``ast.literal_eval``, which
  never evaluates code), re-encoded as JSON.

Streaming (:func:`tentative`): a value may be released as a string as soon
as its text can no longer become any typed value of the plan; until then it
is held. The answer only ever goes from "need" to "no" or "whole" as text is
appended, and :func:`convert` agrees with it, so what a stream emits never
depends on where chunks ended.
"""

from __future__ import annotations

import ast
import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import msgspec

from .jsonscan import JsonScanner
from .text import json_string as _json_string

__all__ = (
    "JSON_PLAN",
    "STRING_PLAN",
    "Tentative",
    "ValuePlan",
    "convert",
    "json_fragment",
    "json_kind",
    "json_string",
    "parameter_plans",
    "plan_for_schema",
    "schema_kinds",
    "tentative",
    "type_name",
)

SCALAR_MAX = 1000
"""Longest number or literal text (whitespace removed) read as a typed scalar; longer text is a string."""

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PART = re.compile(r"-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_MAX_INT_DIGITS = 1000
_MAX_DEPTH = 64

_encode = msgspec.json.encode
_decode = msgspec.json.decode

# Type names seen in tool schemas, mapped to JSON Schema types (vLLM's converters accept the same prefixes).
_TYPE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("integer", "integer"), ("int", "integer"), ("uint", "integer"), ("long", "integer"),
    ("short", "integer"), ("unsigned", "integer"),
    ("number", "number"), ("num", "number"), ("float", "number"), ("double", "number"), ("decimal", "number"),
    ("boolean", "boolean"), ("bool", "boolean"), ("binary", "boolean"),
    ("string", "string"), ("str", "string"), ("text", "string"), ("varchar", "string"), ("char", "string"),
    ("enum", "string"),
    ("object", "object"), ("dict", "object"), ("map", "object"),
    ("array", "array"), ("arr", "array"), ("list", "array"), ("tuple", "array"),
    ("null", "null"), ("none", "null"),
)


@dataclass(frozen=True)
class ValuePlan:
    """How the raw text of one parameter value is converted.

    Attributes:
        types: typed readings tried in order: ``"integer"``, ``"number"``,
            ``"boolean"``, ``"object"``, ``"array"``, or ``"json"`` (any JSON
            value, for DSML's ``string="false"`` without a schema).
        nullable: ``null`` / ``None`` is JSON null.
    """

    types: tuple[str, ...] = ()
    nullable: bool = False

    @property
    def streams(self) -> bool:
        """True when every value is a string (streamed as it arrives)."""
        return not self.types and not self.nullable


STRING_PLAN = ValuePlan()
"""Every value is a string."""

JSON_PLAN = ValuePlan(("json",))
"""A JSON value when the text is valid JSON, else a string (DSML ``string="false"`` without a schema)."""


class Tentative(enum.Enum):
    """What :func:`tentative` says about a value prefix."""

    NO = "no"  # no typed reading is possible any more: it is a string
    NEED = "need"  # a typed reading is still possible: look again with more text (see _core/verdict.py)
    WHOLE = "whole"  # only the whole value decides (an object or array): hold it to its end


# -- plans ------------------------------------------------------------------------------


def _normalize(name: object) -> str | None:
    if not isinstance(name, str):
        return None
    low = name.strip().lower()
    for prefix, kind in _TYPE_PREFIXES:
        if low.startswith(prefix):
            return kind
    return None


def _resolve(schema: Mapping[str, object], root: Mapping[str, object] | None) -> object:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or root is None or not ref.startswith("#/"):
        return None
    node: object = root
    for part in ref[2:].split("/"):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part.replace("~1", "/").replace("~0", "~"))
    return node


def _collect(schema: object, root: Mapping[str, object] | None, out: list[str], depth: int) -> None:
    if depth > 8 or not isinstance(schema, Mapping):
        return
    before = len(out)
    t = schema.get("type")
    for name in t if isinstance(t, list) else [t]:
        kind = _normalize(name)
        if kind is not None and kind not in out:
            out.append(kind)
    for key in ("anyOf", "oneOf", "allOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for sub in members:
                _collect(sub, root, out, depth + 1)
    if "$ref" in schema:
        _collect(_resolve(schema, root), root, out, depth + 1)
    if len(out) > before:
        return
    values = schema.get("enum")
    if not isinstance(values, list):
        values = [schema["const"]] if "const" in schema else []
    for v in values:
        kind = (
            "null" if v is None else "boolean" if isinstance(v, bool) else "integer" if isinstance(v, int)
            else "number" if isinstance(v, float) else "string" if isinstance(v, str)
            else "object" if isinstance(v, dict) else "array" if isinstance(v, list) else None
        )
        if kind is not None and kind not in out:
            out.append(kind)
    if len(out) == before:
        if "properties" in schema:
            out.append("object")
        elif "items" in schema:
            out.append("array")


def type_name(name: object) -> str | None:
    """The JSON Schema type a ``type`` name stands for (``"str"`` -> ``"string"``, ``"int"`` ->
    ``"integer"``, ``"dict"`` -> ``"object"`` ...), as the parsers read it; None for an unknown name."""
    return _normalize(name)


def schema_kinds(schema: object, root: Mapping[str, object] | None = None) -> tuple[str, ...]:
    """The JSON Schema types a parameter's schema admits, in schema order, as the parsers read them.

    The same reading as :func:`plan_for_schema` (``type`` names normalized,
    ``anyOf`` / ``oneOf`` / ``allOf`` members, local ``$ref`` s, ``enum`` /
    ``const`` values, ``properties`` / ``items``), but keeping ``"string"``
    and ``"null"``. Empty: the schema gives no type (the value is a string).

    Args:
        schema: the parameter's schema.
        root: the tool's whole ``parameters`` schema, for local ``$ref`` s.
    """
    kinds: list[str] = []
    _collect(schema, root, kinds, 0)
    return tuple(kinds)


def plan_for_schema(schema: object, root: Mapping[str, object] | None = None) -> ValuePlan:
    """The conversion plan of one parameter's JSON schema.

    Args:
        schema: the parameter's schema (``parameters.properties[KEY]``).
        root: the tool's whole ``parameters`` schema, for local ``$ref`` s.

    Returns:
        The plan; :data:`STRING_PLAN` when the schema gives no type.
    """
    kinds: list[str] = []
    _collect(schema, root, kinds, 0)
    types = tuple(k for k in kinds if k not in ("string", "null"))
    nullable = "null" in kinds
    if not types and not nullable:
        return STRING_PLAN
    return ValuePlan(types, nullable)


def parameter_plans(parameters: Mapping[str, object]) -> dict[str, ValuePlan]:
    """The plan of every property of a tool's ``parameters`` schema (an empty dict when it has none)."""
    props = parameters.get("properties")
    if not isinstance(props, Mapping):
        return {}
    return {str(k): plan_for_schema(v, parameters) for k, v in props.items()}


# -- JSON helpers -------------------------------------------------------------------------


def json_string(text: str) -> str:
    """``text`` as a JSON string literal (quotes included; lone surrogates as ``\\uXXXX``)."""
    return _json_string(text)


def json_fragment(text: str) -> str:
    """``text`` JSON-escaped, without the quotes (a piece of a streamed string)."""
    if '"' not in text and "\\" not in text and text.isprintable():
        # Nothing to escape: every printable character but these two is written as it is (control
        # characters and lone surrogates are not printable). Most pieces of a streamed value.
        return text
    return _json_string(text)[1:-1]


def json_kind(text: str) -> str | None:
    """The kind of the single JSON value ``text`` holds, validated lexically, or None.

    Returns:
        ``"{"`` (object), ``"["`` (array), ``'"'`` (string), ``"0"``
        (number), ``"t"`` / ``"f"`` / ``"n"`` (literals), or None when
        ``text`` is not exactly one JSON value (whitespace around allowed).
    """
    scan = JsonScanner()
    end, _ = scan.scan(text, 0, True)
    if not scan.done or text[end:].strip(" \t\r\n"):
        return None
    c = text.lstrip(" \t\r\n")[:1]
    return "0" if c == "-" or c.isdigit() else c


# -- the prefix test ------------------------------------------------------------------------

_CONTAINER_STARTS = {"object": '{"', "array": '["', "json": '{["'}


def _literal_prefix(t: str, complete: bool, words: tuple[str, ...], fold: bool) -> bool:
    if fold:
        t = t.lower()
    if complete:
        return t in words
    return any(w.startswith(t) for w in words)


def tentative(plan: ValuePlan, text: str) -> Tentative:
    """Whether a value whose text so far is ``text`` may still be typed (see the module docstring).

    Args:
        plan: the value's plan.
        text: the value text received so far (after the dialect's framing
            newline was removed).
    """
    if plan.streams:
        return Tentative.NO
    s = text.lstrip()
    if not s:
        return Tentative.NEED
    c = s[0]
    for typ in plan.types:
        starts = _CONTAINER_STARTS.get(typ)
        if starts is not None and c in starts:
            return Tentative.WHOLE
    t = s.rstrip()
    complete = len(t) < len(s)  # whitespace after the text: the scalar has ended
    if len(t) > SCALAR_MAX:
        return Tentative.NO
    for typ in plan.types:
        if typ in ("integer", "number", "json"):
            if (_NUMBER if complete else _NUMBER_PART).fullmatch(t):
                return Tentative.NEED
        if typ == "boolean" and _literal_prefix(t, complete, ("true", "false"), True):
            return Tentative.NEED
        if typ == "json" and _literal_prefix(t, complete, ("true", "false", "null"), False):
            return Tentative.NEED
    if plan.nullable and (
        _literal_prefix(t, complete, ("null",), True) or _literal_prefix(t, complete, ("None",), False)
    ):
        return Tentative.NEED
    return Tentative.NO


# -- conversion -------------------------------------------------------------------------------


def _integer(t: str) -> str | None:
    if _INTEGER.fullmatch(t):
        return t
    if not _NUMBER.fullmatch(t):
        return None
    try:
        d = Decimal(t)
        if d != d.to_integral_value() or d.adjusted() > _MAX_INT_DIGITS:
            return None
        return str(int(d))
    except (InvalidOperation, ValueError):  # pragma: no cover - the regex admits only valid numbers
        return None


def _plain(value: object, depth: int = 0) -> bool:
    """True if a Python literal's value is representable as JSON as it is."""
    if depth > _MAX_DEPTH:
        return False
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _container(t: str, want: str, depth: int = 0) -> str | None:
    kind = json_kind(t)
    if kind == want:
        return t
    if depth == 0:
        if kind == '"':
            try:
                inner = _decode(t)
            except UnicodeEncodeError:  # a raw lone surrogate: not JSON text
                return None
            assert isinstance(inner, str)
            return _container(inner.strip(), want, 1)
        if "\\" in t and t[:1] in "{[":
            try:
                unescaped = _decode('"' + t + '"')
            except (msgspec.DecodeError, UnicodeEncodeError):
                pass
            else:
                found = _container(str(unescaped).strip(), want, 1)
                if found is not None:
                    return found
    if t[:1] != want:
        # Only a literal of the wanted container: '{"a": 1},' is a tuple to Python, not an array.
        return None
    try:
        value = ast.literal_eval(t)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, (list, tuple)) if want == "[" else isinstance(value, dict):
        if _plain(value):
            try:
                return _encode(value).decode()
            except UnicodeEncodeError:  # a lone surrogate: not valid JSON text
                return None
    return None


def _typed(typ: str, t: str) -> str | None:
    if typ == "object":
        return _container(t, "{")
    if typ == "array":
        return _container(t, "[")
    if len(t) > SCALAR_MAX:
        return None
    if typ == "integer":
        return _integer(t)
    if typ == "number":
        return t if _NUMBER.fullmatch(t) else None
    if typ == "boolean":
        low = t.lower()
        return low if low in ("true", "false") else None
    if typ == "json":
        return t if json_kind(t) is not None else None
    return None  # pragma: no cover - plans hold only the types above


def convert(plan: ValuePlan, text: str, *, typed_only: bool = False) -> str | None:
    """Convert a complete raw value to JSON text (see the module docstring).

    Args:
        plan: the value's plan.
        text: the raw value (after the dialect's framing newlines were removed).
        typed_only: return None instead of falling back to a string.

    Returns:
        The JSON text of the value (None only with ``typed_only``).
    """
    if not plan.streams:
        t = text.strip()
        if t:
            for typ in plan.types:
                found = _typed(typ, t)
                if found is not None:
                    return found
            if plan.nullable and (t.lower() == "null" or t == "None"):
                return "null"
    return None if typed_only else json_string(text)
