"""The whole prompt path on shared/templates: a request body of each API -> the prompt transformers renders.

For every template × conversation × add_generation_prompt case of
``expected.jsonl`` and every API form the conversation has (Chat, Responses,
Anthropic), :func:`deltaflow.render_prompt` (reader -> conversation ->
template form -> render) gives exactly the recorded prompt, or:

* raises :class:`~deltaflow.prompt.template.TemplateError` where the template
  raised for transformers too;
* raises :class:`~deltaflow.prompt.render.PromptError` where the template
  cannot express part of the conversation (it ignores offered tools: the DeepSeek
  templates that expect tools in the system text), which transformers drops
  silently; the probe says so;
* renders where transformers' template raised only because servers hand it
  tool-call arguments as objects and it concatenates them as strings: the
  capability probe found that it takes JSON text, and we give it that.

The conversation's template variables (``kwargs``) travel as
``chat_template_kwargs`` in all three APIs (each API's own thinking options
map onto more variables than ``enable_thinking``: Kimi K3's template reads
``reasoning_effort``; tests/unit/prompt/test_render.py checks that mapping).

``python -m pytest tests/conformance -rP -k summary`` prints the tally.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from functools import cache
from typing import Any

import pytest

from deltaflow.prompt.render import PromptError, PromptModel, render_prompt
from deltaflow.prompt.template import ChatTemplate, TemplateError
from deltaflow.testing import shared_dir

pytestmark = pytest.mark.shared

_SHARED = shared_dir()
if _SHARED is None or not (_SHARED / "templates" / "expected.jsonl").is_file():
    pytest.skip("../shared/templates (the chat-template corpus) is not beside this checkout", allow_module_level=True)
TEMPLATES = _SHARED / "templates"
DATE = dt.datetime(2026, 1, 15, 9, 30)
CASES = [json.loads(line) for line in (TEMPLATES / "expected.jsonl").read_text(encoding="utf-8").splitlines() if line]
CONVERSATIONS = {c["id"]: c for c in json.loads((TEMPLATES / "conversations.json").read_text(encoding="utf-8"))}
FORMS = (("chat", "chat"), ("responses", "responses"), ("messages", "anthropic"))


@cache
def model(name: str, bos: str | None, eos: str | None) -> PromptModel | None:
    specials = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
    try:
        template = ChatTemplate.from_string((TEMPLATES / name).read_text(encoding="utf-8"), name=name,
                                            special_tokens=specials)
    except TemplateError:
        return None  # MiroThinker-v1 does not compile: test_templates_expected checks that error
    return PromptModel(name, template)


def body_of(case: dict[str, Any], key: str) -> dict[str, Any] | None:
    form = CONVERSATIONS[case["conversation"]][key]
    if form is None:
        return None
    body = json.loads(json.dumps(form))
    if case["kwargs"]:
        body["chat_template_kwargs"] = dict(case["kwargs"])
    return body


def outcome(case: dict[str, Any], protocol: str, key: str) -> str | None:
    """``"identical"``, ``"error as recorded"``, ``"refused: <capability>"``, ``"rendered: string arguments"``,
    or None when the API form is absent or the template does not compile; fails on anything else."""
    pm = model(case["template"], case["special_tokens"].get("bos_token"), case["special_tokens"].get("eos_token"))
    body = body_of(case, key)
    if pm is None or body is None:
        return None
    caps = pm.capabilities
    try:
        got = render_prompt(body, model=pm, protocol=protocol,  # type: ignore[arg-type]
                            add_generation_prompt=case["add_generation_prompt"], date=DATE, tokens=False)
    except PromptError as exc:
        assert getattr(caps, exc.capability) is False, f"refused for {exc.capability}, which the probe found"
        return f"refused: {exc.capability}"
    except TemplateError as exc:
        assert "error" in case, f"transformers rendered this case; we raised {exc}"
        assert case["error"].split(": ", 1)[-1] in str(exc)  # recorded as "Type: message"
        return "error as recorded"
    if "error" in case:
        assert not caps.object_arguments and "concatenate" in case["error"], case["error"]
        return "rendered: string arguments"
    assert got.text == case["prompt"]
    return "identical"


@pytest.mark.parametrize("protocol,key", FORMS, ids=[p for p, _ in FORMS])
@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c['template']}::{c['conversation']}::{c['add_generation_prompt']}" for c in CASES]
)
def test_case(case: dict[str, Any], protocol: str, key: str) -> None:
    outcome(case, protocol, key)


def test_summary() -> None:
    tally: Counter[tuple[str, str]] = Counter()
    for case in CASES:
        for protocol, key in FORMS:
            result = outcome(case, protocol, key)
            if result is not None:
                tally[(protocol, result)] += 1
    for protocol, _ in FORMS:
        parts = ", ".join(f"{n} {what}" for (p, what), n in sorted(tally.items()) if p == protocol)
        print(f"render_prompt {protocol}: {parts}")
    assert sum(n for (_, what), n in tally.items() if what == "identical") > 2000
