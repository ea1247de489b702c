"""The shared conversations (``shared/templates/conversations.json``): three API forms, one conversation.

For each conversation:

* every non-null form (Chat, Responses, Anthropic) reads to the same
  canonical conversation. Equality is asserted on everything but
  ``options``: instructions, turns (text, reasoning, tool calls with their
  ids, names and argument text, tool results), tools, strict tools and tool
  choice. ``options`` differ only by what the bodies carry: Anthropic's
  required ``max_tokens`` (1024); the template ``kwargs`` are a Chat
  extension (``chat_template_kwargs``) and are checked on the Chat form;
* ``template_messages(read_chat(chat))`` is the Chat form after the README's
  three normalizations (arguments parsed into objects, list content joined
  with ``"\\n"``, null assistant content given ``""``), and
  ``template_tools`` is its ``tools``; the same holds for the other forms,
  which read to the same conversation.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from deltaflow.prompt.conversation import Conversation, GenerationOptions
from deltaflow.prompt.messages import template_messages, template_tools
from deltaflow.prompt.readers import read_chat, read_messages, read_responses

pytestmark = pytest.mark.shared

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
CONVERSATIONS = SHARED / "templates" / "conversations.json"


def _cases() -> list[Any]:
    if not CONVERSATIONS.is_file():
        reason = f"{CONVERSATIONS} is absent (../shared, the conformance corpus, is not beside this checkout)"
        return [pytest.param(None, id="absent", marks=pytest.mark.skip(reason=reason))]
    data = json.loads(CONVERSATIONS.read_text(encoding="utf-8"))
    return [pytest.param(case, id=case["id"]) for case in data]


CASES = _cases()


def projection(conv: Conversation) -> tuple[Any, ...]:
    """What the three forms must agree on: everything but the options."""
    return (conv.instructions, conv.turns, conv.tools, conv.strict_tools, conv.tool_choice)


def normalized_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The README's three normalizations of the Chat form (what servers hand to templates)."""
    out = copy.deepcopy(messages)
    for m in out:
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(part["text"] for part in m["content"])
        if m["role"] == "assistant" and m.get("content") is None:
            m["content"] = ""
        for call in m.get("tool_calls", ()):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def test_the_corpus_has_nine_conversations() -> None:
    if not CONVERSATIONS.is_file():
        pytest.skip(f"{CONVERSATIONS} is absent")
    assert len(CASES) == 9


@pytest.mark.parametrize("case", CASES)
def test_every_form_reads_to_one_conversation(case: dict[str, Any]) -> None:
    chat = read_chat(case["chat"])
    forms = {"responses": read_responses(case["responses"])}
    if case["anthropic"] is not None:
        forms["anthropic"] = read_messages(case["anthropic"])
    for api, conv in forms.items():
        assert projection(conv) == projection(chat), api
    assert chat.options == GenerationOptions()
    assert forms["responses"].options == GenerationOptions()
    if "anthropic" in forms:
        assert forms["anthropic"].options == GenerationOptions(max_tokens=1024)


@pytest.mark.parametrize("case", CASES)
def test_template_messages_are_the_normalized_chat_form(case: dict[str, Any]) -> None:
    want = normalized_chat(case["chat"]["messages"])
    readers = [read_chat(case["chat"]), read_responses(case["responses"])]
    if case["anthropic"] is not None:
        readers.append(read_messages(case["anthropic"]))
    for conv in readers:
        assert template_messages(conv) == want
        assert template_tools(conv) == case["chat"].get("tools")


@pytest.mark.parametrize("case", CASES)
def test_template_kwargs_ride_on_the_chat_form(case: dict[str, Any]) -> None:
    conv = read_chat({**case["chat"], "chat_template_kwargs": case["kwargs"]})
    assert conv.options.chat_template_kwargs == case["kwargs"]
