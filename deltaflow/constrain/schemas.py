"""Schema reading shared by the layouts, the grammar writers and the renderer.

Parameter types are read exactly as the parsers read them
(:func:`deltaflow._core.schema.schema_kinds`: ``"str"`` is ``"string"``,
``"int"`` is ``"integer"``, ``anyOf`` members, local ``$ref`` s, ``enum``
values ...), so that a grammar, the canonical text and what the parser makes
of that text agree. Schemas handed to a JSON grammar (llguidance's ``%json``,
XGrammar's ``json_schema``, the GBNF converter) are first *normalized*: the
same type names mapped to JSON Schema's (an unknown name is dropped: any
value), everything else kept as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.schema import schema_kinds, type_name

__all__ = (
    "SCALAR_KINDS",
    "enum_values",
    "inline_refs",
    "is_raw_string",
    "kinds",
    "normalized",
    "props",
    "restrict",
    "strictified",
    "value_kind",
)

SCALAR_KINDS = frozenset(("string", "integer", "number", "boolean", "null"))
"""The JSON Schema types whose values are scalars."""

_MAP_KEYS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_ONE_KEYS = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames",
             "additionalItems", "unevaluatedProperties", "unevaluatedItems")
_LIST_KEYS = ("anyOf", "oneOf", "allOf", "prefixItems")
_REF_DEPTH = 8


def kinds(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The JSON Schema types ``schema`` admits, in order, as the parsers read them (empty: untyped)."""
    return schema_kinds(schema, root)


def is_raw_string(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> bool:
    """Whether an XML dialect writes the parameter as raw text: string-typed (alone or among other
    types: the parsers fall back to a string) or untyped (the parsers keep unknown values as strings)."""
    ks = kinds(schema, root)
    return not ks or "string" in ks


def props(schema: Mapping[str, Any]) -> tuple[list[tuple[str, Mapping[str, Any]]], set[str]]:
    """The ``(key, schema)`` pairs of ``properties`` in order, and the required keys."""
    ps = schema.get("properties")
    if not isinstance(ps, Mapping):
        ps = {}
    req = schema.get("required")
    required = {str(r) for r in req} if isinstance(req, list) else set()
    return [(str(k), v if isinstance(v, Mapping) else {}) for k, v in ps.items()], required


def enum_values(schema: Mapping[str, Any]) -> list[Any] | None:
    """The values an ``enum`` or ``const`` allows, or None."""
    e = schema.get("enum")
    if isinstance(e, list):
        return list(e)
    if "const" in schema:
        return [schema["const"]]
    return None


def value_kind(value: Any) -> str:
    """The JSON Schema type of a Python (JSON) value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    return "array"


def _type_names(value: Any) -> list[str]:
    names = value if isinstance(value, list) else [value]
    out: list[str] = []
    for n in names:
        t = type_name(n)
        if t is not None and t not in out:
            out.append(t)
    return out


def normalized(schema: Any) -> Any:
    """A copy of a JSON schema with its type names mapped as the parsers map them.

    ``{"type": "str"}`` becomes ``{"type": "string"}``, ``["int", "null"]``
    ``["integer", "null"]``; a name no JSON Schema type stands for is dropped.
    A standard schema comes back equal to itself.
    """
    if isinstance(schema, list):
        return [normalized(x) for x in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "type" and isinstance(v, (str, list)):
            names = _type_names(v)
            if names:
                out[k] = names[0] if isinstance(v, str) else names
        elif k in _MAP_KEYS and isinstance(v, Mapping):
            out[k] = {pk: normalized(pv) for pk, pv in v.items()}
        elif k in _ONE_KEYS and isinstance(v, (Mapping, list)):
            out[k] = normalized(v)
        elif k in _LIST_KEYS and isinstance(v, list):
            out[k] = [normalized(x) for x in v]
        else:
            out[k] = v
    return out


def _resolve(ref: str, root: Mapping[str, Any]) -> Any:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in ref[2:].split("/") if len(ref) > 1 else []:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part.replace("~1", "/").replace("~0", "~"))
    return node


def inline_refs(schema: Any, root: Mapping[str, Any], depth: int = 0) -> Any:
    """``schema`` with its local ``$ref`` s replaced by what they point to in ``root``.

    For a sub-schema used on its own (an XML parameter's JSON value), whose
    ``$ref`` s would otherwise point nowhere. Beyond a depth of 8 (a
    recursive schema) or for a ``$ref`` that cannot be resolved, any value
    (``{}``) is allowed there.
    """
    if isinstance(schema, list):
        return [inline_refs(x, root, depth) for x in schema]
    if not isinstance(schema, Mapping):
        return schema
    if isinstance(schema.get("$ref"), str):
        if depth >= _REF_DEPTH:
            return {}
        target = _resolve(schema["$ref"], root)
        if not isinstance(target, Mapping):
            return {}
        merged = {**{k: v for k, v in schema.items() if k != "$ref"}, **target}
        return inline_refs(merged, root, depth + 1)
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in ("$defs", "definitions"):
            continue
        if k in _MAP_KEYS and isinstance(v, Mapping):
            out[k] = {pk: inline_refs(pv, root, depth) for pk, pv in v.items()}
        elif k in _ONE_KEYS and isinstance(v, (Mapping, list)):
            out[k] = inline_refs(v, root, depth)
        elif k in _LIST_KEYS and isinstance(v, list):
            out[k] = [inline_refs(x, root, depth) for x in v]
        else:
            out[k] = v
    return out


def strictified(schema: Any) -> Any:
    """A copy of ``schema`` where every object schema with ``properties`` and no
    ``additionalProperties`` gets ``additionalProperties: false`` (a ``strict`` tool)."""
    if isinstance(schema, list):
        return [strictified(x) for x in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in _MAP_KEYS and isinstance(v, Mapping):
            out[k] = {pk: strictified(pv) for pk, pv in v.items()}
        elif k in _ONE_KEYS and isinstance(v, (Mapping, list)):
            out[k] = strictified(v)
        elif k in _LIST_KEYS and isinstance(v, list):
            out[k] = [strictified(x) for x in v]
        else:
            out[k] = v
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def restrict(schema: Mapping[str, Any], kind: str, root: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The part of ``schema`` that admits values of type ``kind`` (``"number"`` admits integers too)."""
    want = {"integer", "number"} if kind == "number" else {kind}
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list):
            keep = [m for m in members if isinstance(m, Mapping) and want & set(kinds(m, root))]
            if len(keep) == 1:
                return restrict(keep[0], kind, root)
            if keep:
                return {key: [restrict(m, kind, root) for m in keep]}
    out = {k: v for k, v in schema.items() if k not in ("type", "enum", "const", "anyOf", "oneOf")}
    out["type"] = kind
    values = enum_values(schema)
    if values is not None:
        keep_values = [v for v in values if value_kind(v) in want or (kind == "number" and value_kind(v) == "integer")]
        out["enum"] = keep_values
    return out
