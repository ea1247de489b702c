"""Chat templates render byte for byte as transformers does: shared/templates/expected.jsonl.

Each line of the corpus is a template × conversation × add_generation_prompt
case rendered by transformers 5.24.0 (see shared/templates/README.md): the
prompt it produced, or the error the template raised. Every case must
render to exactly that prompt with :class:`deltaflow.prompt.template.ChatTemplate`,
or raise a :class:`~deltaflow.prompt.template.TemplateError` whose message
contains the recorded one.

Run ``python -m pytest tests/conformance -rP -k summary`` to see the tally.
"""

from __future__ import annotations

import datetime as dt
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from deltaflow.prompt.template import ChatTemplate, TemplateError
from deltaflow.testing import shared_dir

pytestmark = pytest.mark.shared

_SHARED = shared_dir()  # ../shared beside the checkout (or $DELTAFLOW_SHARED)
if _SHARED is None or not (_SHARED / "templates" / "expected.jsonl").is_file():
    pytest.skip(
        "../shared/templates (the chat-template conformance corpus) is not beside this checkout",
        allow_module_level=True,
    )
TEMPLATES: Path = _SHARED / "templates"

# The README: transformers' datetime.now() was frozen to 2026-01-15 09:30; a line's `date` gives the day.
FROZEN_TIME = dt.time(9, 30)

CASES: list[dict[str, Any]] = [
    json.loads(line) for line in (TEMPLATES / "expected.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
]
CONVERSATIONS: dict[str, dict[str, Any]] = {
    c["id"]: c for c in json.loads((TEMPLATES / "conversations.json").read_text(encoding="utf-8"))
}


def case_id(case: dict[str, Any]) -> str:
    return f"{case['template']}::{case['conversation']}::{case['add_generation_prompt']}"


def server_form(chat: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The README's three server normalizations of a Chat Completions body, on copies.

    1. assistant ``tool_calls[].function.arguments`` parsed from a JSON string into an object;
    2. a ``content`` list of text parts joined into one string with ``"\\n"``;
    3. an assistant message whose ``content`` is null given ``""``.
    """
    messages = []
    for raw in chat["messages"]:
        m = dict(raw)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(part["text"] for part in m["content"] if part.get("type") == "text")
        if m.get("role") == "assistant":
            if m.get("content") is None:
                m["content"] = ""
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {
                        **call,
                        "function": {
                            **call["function"],
                            "arguments": (
                                json.loads(call["function"]["arguments"])
                                if isinstance(call["function"]["arguments"], str)
                                else call["function"]["arguments"]
                            ),
                        },
                    }
                    for call in m["tool_calls"]
                ]
        messages.append(m)
    return messages, chat.get("tools")


@cache
def source(template: str) -> str:
    return (TEMPLATES / template).read_text(encoding="utf-8")


def recorded_message(error: str) -> str:
    """The message part of a recorded ``"Type: message"``."""
    return error.split(": ", 1)[1] if ": " in error else error


def render_case(case: dict[str, Any]) -> str:
    """The case's prompt (raises TemplateError where the template raises)."""
    conversation = CONVERSATIONS[case["conversation"]]
    messages, tools = server_form(conversation["chat"])
    template = ChatTemplate.from_string(
        source(case["template"]), name=case["template"], special_tokens=case["special_tokens"]
    )
    date = dt.datetime.combine(dt.date.fromisoformat(case["date"]), FROZEN_TIME)
    return template.render(
        messages, tools=tools, add_generation_prompt=case["add_generation_prompt"], date=date, **case["kwargs"]
    )


def check(case: dict[str, Any]) -> str:
    """Compare one case; return "identical" or "error"; raise AssertionError on a mismatch."""
    if "error" in case:
        expected = recorded_message(case["error"])
        with pytest.raises(TemplateError) as info:
            render_case(case)
        assert expected in str(info.value), f"{case_id(case)}: expected an error containing {expected!r}, got {info.value}"
        assert case["template"] in str(info.value)
        return "error"
    prompt = render_case(case)
    assert prompt == case["prompt"], f"{case_id(case)}: the render differs from transformers'"
    return "identical"


def test_corpus_is_complete() -> None:
    """The corpus covers every template and conversation, both ways, once each."""
    templates = {p.name for p in TEMPLATES.glob("*.jinja")}
    assert {c["template"] for c in CASES} == templates
    assert {c["conversation"] for c in CASES} == set(CONVERSATIONS)
    ids = [case_id(c) for c in CASES]
    assert len(ids) == len(set(ids)) == len(templates) * len(CONVERSATIONS) * 2


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_case(case: dict[str, Any]) -> None:
    check(case)


def test_summary() -> None:
    counts = {"identical": 0, "error": 0}
    failures: list[str] = []
    for case in CASES:
        try:
            counts[check(case)] += 1
        except (pytest.fail.Exception, Exception) as exc:  # tally every case, then fail with the list
            failures.append(f"{case_id(case)}: {exc}")
    print(
        f"templates expected: {len(CASES)} cases, {counts['identical']} identical, {counts['error']} errors as recorded"
    )
    assert not failures, "\n".join(failures[:20])
    assert counts["identical"] + counts["error"] == len(CASES)
