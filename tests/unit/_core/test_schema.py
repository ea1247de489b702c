"""Schema-typed conversion of raw XML parameter values: plans, conversion and the streaming prefix test."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaflow._core.schema import (
    JSON_PLAN,
    SCALAR_MAX,
    STRING_PLAN,
    Tentative,
    ValuePlan,
    convert,
    json_fragment,
    json_kind,
    json_string,
    parameter_plans,
    plan_for_schema,
    tentative,
)

# -- plans ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanCase:
    """A parameter schema and the plan it must give."""

    label: str
    schema: Any
    plan: ValuePlan


PLANS = [
    PlanCase("string", {"type": "string"}, STRING_PLAN),
    PlanCase("no type", {"description": "anything"}, STRING_PLAN),
    PlanCase("not a dict", "integer", STRING_PLAN),
    PlanCase("integer", {"type": "integer"}, ValuePlan(("integer",))),
    PlanCase("type list", {"type": ["integer", "null"]}, ValuePlan(("integer",), True)),
    PlanCase("string or object", {"type": ["string", "object"]}, ValuePlan(("object",))),
    PlanCase("anyOf nullable string", {"anyOf": [{"type": "string"}, {"type": "null"}]}, ValuePlan((), True)),
    PlanCase("oneOf array or null", {"oneOf": [{"type": "array", "items": {}}, {"type": "null"}]},
             ValuePlan(("array",), True)),
    PlanCase("anyOf keeps order", {"anyOf": [{"type": "boolean"}, {"type": "number"}]},
             ValuePlan(("boolean", "number"))),
    PlanCase("enum of strings", {"enum": ["celsius", "fahrenheit"]}, STRING_PLAN),
    PlanCase("enum of ints", {"enum": [1, 2, None]}, ValuePlan(("integer",), True)),
    PlanCase("const", {"const": True}, ValuePlan(("boolean",))),
    PlanCase("properties only", {"properties": {"a": {}}}, ValuePlan(("object",))),
    PlanCase("items only", {"items": {"type": "string"}}, ValuePlan(("array",))),
    PlanCase("non-standard names", {"anyOf": [{"type": "float"}, {"type": "int"}, {"type": "dict"}]},
             ValuePlan(("number", "integer", "object"))),
    PlanCase("bool alias", {"type": "bool"}, ValuePlan(("boolean",))),
    PlanCase("unknown name", {"type": "frobnicate"}, STRING_PLAN),
]


@pytest.mark.parametrize("case", PLANS, ids=[c.label for c in PLANS])
def test_plan_for_schema(case: PlanCase) -> None:
    """A parameter schema gives the typed readings it admits, in schema order, with string as the last resort."""
    assert plan_for_schema(case.schema) == case.plan


def test_local_refs_are_resolved() -> None:
    """A local ``$ref`` is followed within the tool's parameters schema."""
    params: dict[str, Any] = {
        "type": "object",
        "properties": {
            "when": {"$ref": "#/$defs/When"},
            "bad": {"$ref": "#/$defs/Missing"},
            "ext": {"$ref": "x.json"},
            "deep": {"$ref": "#/$defs/When/type/x"},  # a path through a non-object
        },
        "$defs": {"When": {"type": "object", "properties": {"at": {"type": "string"}}}},
    }
    plans = parameter_plans(params)
    assert plans == {"when": ValuePlan(("object",)), "bad": STRING_PLAN, "ext": STRING_PLAN, "deep": STRING_PLAN}


def test_parameter_plans_without_properties() -> None:
    """A tool schema without properties has no plans (every value is a string)."""
    assert parameter_plans({"type": "object"}) == {}
    assert parameter_plans({"properties": ["not", "a", "mapping"]}) == {}


def test_plans_are_bounded_on_recursive_refs() -> None:
    """A self-referencing schema ends (its depth is bounded)."""
    params = {"properties": {"a": {"$ref": "#/properties/a"}}}
    assert parameter_plans(params) == {"a": STRING_PLAN}


def test_string_plan_streams() -> None:
    """Only a plan without typed readings and without null streams."""
    assert STRING_PLAN.streams
    assert not ValuePlan((), True).streams
    assert not JSON_PLAN.streams


# -- conversion -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Conv:
    """A raw value, its schema, and the JSON value it must convert to."""

    label: str
    schema: Any
    raw: str
    value: Any


CONVERSIONS = [
    Conv("string stays a string", {"type": "string"}, "42", "42"),
    Conv("string keeps null text", {"type": "string"}, "null", "null"),
    Conv("string verbatim", {"type": "string"}, "  a \"b\" \\ \n", '  a "b" \\ \n'),
    Conv("integer", {"type": "integer"}, "42", 42),
    Conv("integer with blanks", {"type": "integer"}, " -7\n", -7),
    Conv("integer written 5.0", {"type": "integer"}, "5.0", 5),
    Conv("integer in exponent form", {"type": "integer"}, "-1e3", -1000),
    Conv("integer with a fraction is a string", {"type": "integer"}, "5.5", "5.5"),
    Conv("integer with leading zero is a string", {"type": "integer"}, "007", "007"),
    Conv("huge exponent is a string", {"type": "integer"}, "1e5000", "1e5000"),
    Conv("not an integer", {"type": "integer"}, "abc", "abc"),
    Conv("number", {"type": "number"}, "3.14", 3.14),
    Conv("number 5.0", {"type": "number"}, "5.0", 5.0),
    Conv("number -1e3", {"type": "number"}, "-1e3", -1000.0),
    Conv("not a JSON number", {"type": "number"}, ".5", ".5"),
    Conv("boolean", {"type": "boolean"}, "true", True),
    Conv("boolean any case", {"type": "boolean"}, "False", False),
    Conv("not a boolean", {"type": "boolean"}, "yes", "yes"),
    Conv("null when nullable", {"type": ["integer", "null"]}, "null", None),
    Conv("None when nullable", {"anyOf": [{"type": "string"}, {"type": "null"}]}, "None", None),
    Conv("NULL when nullable", {"type": ["string", "null"]}, "NULL", None),
    Conv("null not nullable", {"type": "integer"}, "null", "null"),
    Conv("nullable string value", {"type": ["string", "null"]}, "hello", "hello"),
    Conv("null type", {"type": "null"}, "null", None),
    Conv("object", {"type": "object"}, '{"a": [1, {"b": null}]}', {"a": [1, {"b": None}]}),
    Conv("object with blanks", {"type": "object"}, ' \n{"a": 1}\n ', {"a": 1}),
    Conv("array", {"type": "array"}, "[1, 2, 3]", [1, 2, 3]),
    Conv("array is not an object", {"type": "object"}, "[1]", "[1]"),
    Conv("invalid object is a string", {"type": "object"}, "{not json", "{not json"),
    Conv("quoted JSON object", {"type": "object"}, '"{\\"a\\": 1}"', {"a": 1}),
    Conv("backslash-escaped object", {"type": "array"}, '[{\\"id\\": \\"1\\"}]', [{"id": "1"}]),
    Conv("Python literal", {"type": "object"}, "{'k': True, 'n': None, 't': (1, 2)}",
         {"k": True, "n": None, "t": [1, 2]}),
    Conv("quoted Python literal", {"type": "object"}, "\"{'k': 'v'}\"", {"k": "v"}),
    Conv("Python literal of the wrong kind", {"type": "object"}, "[1, 2]", "[1, 2]"),
    Conv("Python set is not JSON", {"type": "array"}, "[{1, 2}]", "[{1, 2}]"),
    Conv("Python float inf is not JSON", {"type": "object"}, "{'a': 1e999}", "{'a': 1e999}"),
    Conv("Python code is never run", {"type": "object"}, "{__import__('os').getcwd(): 1}",
         "{__import__('os').getcwd(): 1}"),
    Conv("union: typed reading first", {"type": ["string", "integer"]}, "42", 42),
    Conv("union: string when nothing else fits", {"type": ["string", "integer"]}, "2 dollars", "2 dollars"),
    Conv("union with object", {"type": ["string", "object"]}, '{"a": 1}', {"a": 1}),
    Conv("anyOf order", {"anyOf": [{"type": "number"}, {"type": "boolean"}]}, "true", True),
    Conv("bad escape is a string", {"type": "array"}, "[\\x]", "[\\x]"),
    Conv("escaped text that is still not JSON", {"type": "array"}, '[\\"a', '[\\"a'),
    Conv("Python literal nested too deep", {"type": "array"}, "[" * 70 + "'a'" + "]" * 70, "[" * 70 + "'a'" + "]" * 70),
    Conv("scalar too long is a string", {"type": "integer"}, "1" * (SCALAR_MAX + 1), "1" * (SCALAR_MAX + 1)),
    Conv("empty value", {"type": "integer"}, "", ""),
    Conv("blank value", {"type": "integer"}, "  ", "  "),
]


@pytest.mark.parametrize("case", CONVERSIONS, ids=[c.label for c in CONVERSIONS])
def test_convert(case: Conv) -> None:
    """A raw value converts to the JSON value its schema admits, else to the string itself."""
    out = convert(plan_for_schema(case.schema), case.raw)
    assert out is not None
    got = json.loads(out)
    assert got == case.value
    assert type(got) is type(case.value)


def test_typed_values_keep_their_source_text() -> None:
    """A JSON number, object or array is emitted as the model wrote it, not re-serialized."""
    assert convert(plan_for_schema({"type": "number"}), "1.50e+10") == "1.50e+10"
    assert convert(plan_for_schema({"type": "object"}), '{ "a" : 1,"a":2 }') == '{ "a" : 1,"a":2 }'


def test_typed_only() -> None:
    """With ``typed_only``, a value no typed reading accepts gives None instead of a string."""
    plan = plan_for_schema({"type": "integer"})
    assert convert(plan, "12", typed_only=True) == "12"
    assert convert(plan, "1x", typed_only=True) is None
    assert convert(STRING_PLAN, "x", typed_only=True) is None


def test_json_plan() -> None:
    """The JSON plan (DSML ``string="false"`` without a schema) takes any JSON value, else a string."""
    assert convert(JSON_PLAN, ' {"a": 1} ') == '{"a": 1}'
    assert convert(JSON_PLAN, '"x"') == '"x"'
    assert convert(JSON_PLAN, "null") == "null"
    assert convert(JSON_PLAN, "None") == '"None"'
    assert convert(JSON_PLAN, "hello") == '"hello"'


def test_json_helpers() -> None:
    """Strings are JSON-escaped; a fragment is the escaped body without quotes; kinds are validated."""
    assert json_string('a"\\\n\x00é😀') == '"a\\"\\\\\\n\\u0000é😀"'
    assert json_fragment('a"b') == 'a\\"b'
    assert json_kind(' {"a": [1]} ') == "{"
    assert json_kind("[1, 2]") == "["
    assert json_kind('"s"') == '"'
    assert json_kind("-1.5") == "0"
    assert json_kind("true") == "t"
    assert json_kind("{} x") is None
    assert json_kind("{") is None
    assert json_kind("") is None


# -- the streaming prefix test ------------------------------------------------------------------


def test_tentative_examples() -> None:
    """A prefix is held while it may still be typed, and released as a string once it cannot be."""
    integer = plan_for_schema({"type": "integer"})
    obj = plan_for_schema({"type": ["string", "object"]})
    nullable = plan_for_schema({"type": ["string", "null"]})
    assert tentative(STRING_PLAN, "") is Tentative.NO
    assert tentative(integer, "  ") is Tentative.NEED
    assert tentative(integer, "-") is Tentative.NEED
    assert tentative(integer, "12.5e") is Tentative.NEED
    assert tentative(integer, "12 ") is Tentative.NEED
    assert tentative(integer, "12 x") is Tentative.NO
    assert tentative(integer, "x") is Tentative.NO
    assert tentative(integer, "1" * (SCALAR_MAX + 1)) is Tentative.NO
    assert tentative(obj, ' {"a') is Tentative.WHOLE
    assert tentative(obj, "[") is Tentative.NO  # an array is not an object, and "[" is no string start of one
    assert tentative(nullable, "Nu") is Tentative.NEED
    assert tentative(nullable, "NULL") is Tentative.NEED
    assert tentative(nullable, "nul ") is Tentative.NO
    assert tentative(nullable, "Non") is Tentative.NEED
    assert tentative(nullable, "none") is Tentative.NO
    assert tentative(plan_for_schema({"type": "boolean"}), "FAL") is Tentative.NEED
    assert tentative(JSON_PLAN, "tr") is Tentative.NEED
    assert tentative(JSON_PLAN, "Tr") is Tentative.NO
    assert tentative(JSON_PLAN, '"') is Tentative.WHOLE


_SCHEMAS = st.sampled_from(
    [
        {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "object"}, {"type": "array"},
        {"type": ["integer", "null"]}, {"type": ["string", "null"]}, {"type": ["string", "object"]},
        {"anyOf": [{"type": "boolean"}, {"type": "array"}, {"type": "null"}]}, {"type": "string"},
    ]
)
_PIECES = st.sampled_from(
    ["", " ", "\n", "-", "0", "1", "9", ".", "e", "E", "+", "t", "r", "u", "e", "f", "a", "l", "s", "n", "N", "o",
     "{", "}", "[", "]", '"', "\\", ":", ",", "'", "x", "null", "true", "None", '{"a": 1}', "[1, 2]"]
)


@settings(max_examples=500)
@given(schema=_SCHEMAS, pieces=st.lists(_PIECES, max_size=10), plan_json=st.booleans())
def test_tentative_agrees_with_convert(schema: Any, pieces: list[str], plan_json: bool) -> None:
    """Once a prefix is "no", it stays "no" and the whole value converts to the string.

    A typed result was never "no".
    """
    plan = JSON_PLAN if plan_json else plan_for_schema(schema)
    text = "".join(pieces)
    verdicts = [tentative(plan, text[:i]) for i in range(len(text) + 1)]
    first_no = next((i for i, v in enumerate(verdicts) if v is Tentative.NO), None)
    if first_no is not None:
        assert all(v is Tentative.NO for v in verdicts[first_no:]), verdicts
        assert convert(plan, text) == json_string(text)
        assert convert(plan, text, typed_only=True) is None
    first_whole = next((i for i, v in enumerate(verdicts) if v is Tentative.WHOLE), None)
    if first_whole is not None:
        assert all(v is Tentative.WHOLE for v in verdicts[first_whole:]), verdicts


@pytest.mark.parametrize("text", ["a\ud800｜\x7fé", "\udfff\udfff", "😀\ud83d\x01", "plain ｜ text"], ids=repr)
def test_json_fragments_of_any_split_join_to_the_whole_text(text: str) -> None:
    """Escaping the pieces of a streamed string gives the whole string's escape: only lone surrogates are escaped."""
    whole = json_string(text)[1:-1]
    for i in range(len(text) + 1):
        assert json_string(text[:i])[1:-1] + json_string(text[i:])[1:-1] == whole
    assert json.loads(f'"{whole}"') == text


def test_a_literal_is_only_read_as_the_container_it_opens() -> None:
    """'{"a": 1},' is a Python tuple, but not an array value: an array-typed value that starts with ``{`` is the
    string the model wrote (found by test_tentative_agrees_with_convert)."""
    plan = plan_for_schema({"type": "array"})
    assert convert(plan, '{"a": 1},') == json_string('{"a": 1},')
    assert convert(plan, "['a', (1, 2)]") == '["a",[1,2]]'


def test_json_fragment_is_the_escaped_string_without_its_quotes() -> None:
    """The shortcut for text with nothing to escape gives json_string's answer for every code point."""
    from deltaflow._core.text import json_string

    for cp in range(0x110000):
        c = chr(cp)
        assert json_fragment(c) == json_string(c)[1:-1], hex(cp)
    for text in ("", "plain <div> 東京 😀", 'a"b', "a\\b", "tab\there", "\u2028", "\ud800x", "é\x7f"):
        assert json_fragment(text) == json_string(text)[1:-1], repr(text)
