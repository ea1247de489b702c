"""deltaflow.prompt.template: transformers' chat-template environment, template resolution, capabilities.

Each environment test asserts something plain Jinja (``jinja2.Environment()``)
renders differently, so a renderer that lost one of transformers' settings
fails here and not only in the conformance corpus.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
from pathlib import Path
from typing import Any

import jinja2
import pytest

from deltaflow.errors import DeltaflowError
from deltaflow.prompt.capabilities import TemplateCapabilities, probe_capabilities, reasoning_left_open
from deltaflow.prompt.template import (
    ChatTemplate,
    TemplateError,
    TemplateNotFoundError,
    compile_template,
    load_chat_template,
    read_special_tokens,
)

USER = [{"role": "user", "content": "hi"}]
DATE = dt.datetime(2026, 1, 15, 9, 30)


def render(source: str, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    return ChatTemplate.from_string(source).render(messages or USER, date=DATE, **kwargs)


def plain(source: str, **variables: Any) -> str:
    """What plain Jinja renders, for the contrast."""
    return jinja2.Environment().from_string(source).render(**variables)


# --------------------------------------------------------------------- environment facts


def test_tojson_keeps_key_order_non_ascii_and_html_characters() -> None:
    value = {"b": 1, "a": "<ü> & 'q'"}
    out = render("{{ x | tojson }}", x=value)
    assert out == '{"b": 1, "a": "<ü> & \'q\'"}'
    assert plain("{{ x | tojson }}", x=value) != out  # Jinja's sorts keys and escapes <, &, ' and non-ASCII


def test_tojson_takes_json_dumps_options() -> None:
    value = {"b": [1, 2], "a": "é"}
    assert render("{{ x | tojson(indent=2) }}", x=value) == json.dumps(value, ensure_ascii=False, indent=2)
    assert render("{{ x | tojson(separators=(',', ':')) }}", x=value) == '{"b":[1,2],"a":"é"}'
    assert render("{{ x | tojson(sort_keys=true) }}", x=value) == '{"a": "é", "b": [1, 2]}'
    assert render("{{ x | tojson(ensure_ascii=true) }}", x=value) == '{"b": [1, 2], "a": "\\u00e9"}'


def test_trim_blocks_and_lstrip_blocks() -> None:
    source = "A\n    {% if true %}\nB\n    {% endif %}\nC"
    assert render(source) == "A\nB\nC"
    assert plain(source) == "A\n    \nB\n    \nC"


def test_loopcontrols_break_and_continue() -> None:
    source = "{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    assert render(source) == "023"
    with pytest.raises(jinja2.TemplateSyntaxError):
        plain(source)


def test_generation_tag_renders_its_body_unchanged() -> None:
    source = "<s>{% generation %}{{ messages[0].content }}!{% endgeneration %}</s>"
    assert render(source) == "<s>hi!</s>"
    with pytest.raises(jinja2.TemplateSyntaxError):
        plain(source, messages=USER)


def test_generation_tag_scopes_like_a_call_block() -> None:
    """A plain set stays inside the block, a namespace attribute set inside is seen outside (as in transformers)."""
    source = (
        "{% set x = 1 %}{% set ns = namespace(v=1) %}"
        "{% generation %}{% set x = 2 %}{% set ns.v = 2 %}[{{ x }}]{% endgeneration %}{{ x }}{{ ns.v }}"
    )
    assert render(source) == "[2]12"


def test_raise_exception_is_a_template_error_with_the_message() -> None:
    t = ChatTemplate.from_string("line one\n{{ raise_exception('Roles must alternate!') }}", name="my.jinja")
    with pytest.raises(TemplateError) as info:
        t.render(USER)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, DeltaflowError)
    assert "Roles must alternate!" in str(err) and "'my.jinja'" in str(err)
    assert (err.template, err.reason, err.lineno) == ("my.jinja", "Roles must alternate!", 2)
    assert isinstance(err.__cause__, jinja2.TemplateError)


def test_python_errors_inside_the_template_become_template_errors() -> None:
    with pytest.raises(TemplateError, match=r"TypeError: can only concatenate str \(not \"dict\"\) to str") as info:
        render("{{ 'a' + x }}", x={"k": 1})
    assert isinstance(info.value.__cause__, TypeError)


def test_syntax_error_names_the_template_and_line() -> None:
    with pytest.raises(TemplateError, match=r"'broken.jinja' does not compile \(line 2\): .*unknown tag 'endfor'") as info:
        ChatTemplate.from_string("{% if x %}\n{% endfor %}", name="broken.jinja")
    assert info.value.lineno == 2 and isinstance(info.value.__cause__, jinja2.TemplateSyntaxError)


def test_strftime_now_sees_the_render_date() -> None:
    source = "{{ strftime_now('%d %b %Y %H:%M') }}"
    assert render(source) == "15 Jan 2026 09:30"
    t = ChatTemplate.from_string(source)
    assert t.render(USER, date=dt.date(2025, 12, 31)) == "31 Dec 2025 00:00"  # a date is its midnight
    before = dt.datetime.now().replace(second=0, microsecond=0)
    now = dt.datetime.strptime(t.render(USER), "%d %b %Y %H:%M")
    assert before <= now <= dt.datetime.now()
    with pytest.raises(jinja2.UndefinedError):
        plain(source)
    with pytest.raises(TypeError, match="date must be"):
        t.render(USER, date="2026-01-15")  # type: ignore[arg-type]


def test_concurrent_renders_keep_their_own_dates() -> None:
    t = ChatTemplate.from_string("{% for i in range(200) %}{{ strftime_now('%Y') }}{% endfor %}")
    results: dict[int, str] = {}

    def work(year: int) -> None:
        results[year] = t.render(USER, date=dt.date(year, 1, 1))

    threads = [threading.Thread(target=work, args=(2000 + i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == {2000 + i: str(2000 + i) * 200 for i in range(8)}


@pytest.mark.parametrize(
    "source",
    [
        "{{ ().__class__.__mro__ }}",
        "{{ messages.__class__.__base__ }}",
        "{{ raise_exception.__globals__['os'] }}",
        "{% set x = [] %}{{ x.append(1) }}",  # the immutable sandbox: no mutating methods
        "{% set d = {} %}{{ d.update({'a': 1}) }}",
        "{% set ns = namespace(_private=1) %}",
        "{% set ns = namespace() %}{% set ns._x = 1 %}",
    ],
)
def test_sandbox_refuses(source: str) -> None:
    with pytest.raises(TemplateError, match="SecurityError"):
        render(source)


def test_sandbox_refuses_every_time(source: str = "{{ messages[0].__class__ }}{{ messages.append }}") -> None:
    """The sandbox remembers attribute safety per type and name: the second render refuses as the first did."""
    for _ in range(2):
        with pytest.raises(TemplateError, match="SecurityError"):
            render("{% set x = [] %}{{ x.append(1) }}")
    assert render(source) == ""  # unsafe attributes are undefined, printed as nothing
    assert render(source) == ""


_NAMES = ["role", "content", "items", "keys", "get", "clear", "pop", "update", "append", "startswith", "upper",
          "split", "format", "__class__", "__len__", "_private", "mro", "index", "missing", "real"]


@pytest.mark.parametrize("name", _NAMES)
def test_sandbox_attributes_match_jinja_immutable_sandbox(name: str) -> None:
    """Every ``obj.name`` the template environment answers is what Jinja's own immutable sandbox answers."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from deltaflow.prompt.template import _environment

    ours, theirs = _environment(), ImmutableSandboxedEnvironment()
    objects: list[Any] = [
        {"role": "user", "content": "hi", "items": "an item", "clear": 1},
        {},
        "text",
        ["a"],
        3,
        1.5,
        True,
        None,
        ours.globals["namespace"](role="x"),
    ]
    for obj in objects:
        for _ in range(2):  # cold, then from the remembered answer
            got, want = ours.getattr(obj, name), theirs.getattr(obj, name)
            assert type(got) is type(want), (obj, name)
            if isinstance(want, jinja2.Undefined):
                assert str(getattr(got, "_undefined_hint", None)) == str(getattr(want, "_undefined_hint", None))
            elif name == "format":  # the sandbox wraps str.format anew each time
                assert got.__qualname__ == want.__qualname__
            else:
                assert got == want, (obj, name)
    loop_source = "{% for m in messages %}{{ loop.index }}{{ loop.__class__ }}{{ loop.last }}{% endfor %}"
    assert render(loop_source, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "1False2True"


def test_plain_jinja_allows_what_the_sandbox_refuses() -> None:
    assert "object" in plain("{{ ().__class__.__mro__ }}")
    assert plain("{% set x = [] %}{{ x.append(1) }}{{ x }}") == "None[1]"


def test_dict_and_namespace_globals_work() -> None:
    assert render("{{ dict(a=1, b=2) | tojson }}") == '{"a": 1, "b": 2}'
    assert render("{{ dict.fromkeys(['x', 'y'], 0) | tojson }}") == '{"x": 0, "y": 0}'
    assert render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") == "3"


def test_variables_the_template_sees() -> None:
    t = ChatTemplate.from_string(
        "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ flag }}",
        special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
    )
    assert t.render(USER, flag=1) == "<s>|</s>|True|True|True|1"
    assert t.render(USER, add_generation_prompt=False, eos_token="<end>", flag=2) == "<s>|<end>|True|True|False|2"
    docs = [{"title": "T", "text": "x"}]
    t2 = ChatTemplate.from_string("{{ tools | tojson }}|{{ documents | tojson }}")
    tool = {"type": "function", "function": {"name": "f"}}
    assert t2.render(USER, tools=[tool], documents=docs) == json.dumps([tool]) + "|" + json.dumps(docs)


def test_bad_inputs_are_clear_errors() -> None:
    t = ChatTemplate.from_string("x")
    with pytest.raises(ValueError, match="empty conversation"):
        t.render([])
    with pytest.raises(TypeError, match=r"messages\[1\] must be a dict"):
        t.render([{"role": "user", "content": "a"}, "b"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"tools\[0\] must be a JSON-schema dict"):
        t.render(USER, tools=["f"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="documents must be a list"):
        t.render(USER, documents={"title": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="special_tokens must map names to token text"):
        ChatTemplate.from_string("x", special_tokens={"bos_token": 1})  # type: ignore[dict-item]


# ------------------------------------------------------------------ message normalization

DUMP = "{{ messages | tojson }}"


def test_none_keys_are_dropped_from_each_message_top_level_only() -> None:
    messages = [
        {"role": "user", "content": "a", "name": None},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"x": None}}}]},
    ]
    out = json.loads(render(DUMP, messages))
    assert out == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"x": None}}}]},
    ]
    # So `is defined` tests see a missing key, not a None (plain data would print "None").
    assert render("{% for m in messages %}{{ m.content is defined }}{% endfor %}", messages) == "TrueFalse"


@pytest.mark.parametrize("key", ["reasoning_content", "thinking", "reasoning"])
def test_reasoning_is_aliased_to_reasoning_content_and_thinking(key: str) -> None:
    out = json.loads(render(DUMP, [{"role": "assistant", "content": "4", key: "why"}]))
    assert out[0]["reasoning_content"] == out[0]["thinking"] == "why"
    assert out[0].get(key) == "why"


def test_reasoning_alias_precedence_and_existing_thinking() -> None:
    m = {"role": "assistant", "content": "", "reasoning": "r", "thinking": "t", "reasoning_content": None}
    out = json.loads(render(DUMP, [m]))[0]
    assert (out["reasoning_content"], out["thinking"], out["reasoning"]) == ("t", "t", "r")
    m2 = {"role": "assistant", "content": "", "reasoning_content": "rc", "thinking": "t"}
    out2 = json.loads(render(DUMP, [m2]))[0]
    assert (out2["reasoning_content"], out2["thinking"]) == ("rc", "t")  # an existing thinking is kept
    assert list(json.loads(render(DUMP, [{"role": "assistant", "reasoning": "r"}]))[0]) == [
        "thinking",
        "role",
        "reasoning",
        "reasoning_content",
    ]


def test_callers_messages_are_never_mutated() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hello"}], "name": None},
        {"role": "assistant", "content": "ok", "reasoning": "r", "tool_calls": [{"function": {"arguments": {}}}]},
        {"role": "assistant", "content": "to be continued"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    before = copy.deepcopy((messages, tools))
    source = "{% for m in messages %}{{ m.content }}{{ m.reasoning_content }}{% endfor %}{{ tools | length }}"
    t = ChatTemplate.from_string(source)
    t.render(messages, tools=tools)
    t.render(messages, tools=tools, continue_final_message=True)
    assert (messages, tools) == before


def test_objects_become_plain_data() -> None:
    class Weird:
        pass

    class Text(str):
        pass

    from dataclasses import dataclass

    @dataclass
    class Msg:
        role: str
        content: Any

    out = render("{{ messages | tojson }}", [Msg("user", Text("x")), {"role": "user", "content": Weird()}])  # type: ignore[list-item]
    assert json.loads(out) == [{"role": "user", "content": "x"}, {"role": "user", "content": "<Weird>"}]


# --------------------------------------------------------------------- continue_final_message

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_continue_final_message_cuts_after_the_final_text() -> None:
    t = ChatTemplate.from_string(CHATML)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}]
    assert t.render(messages, continue_final_message=True) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nThe answer is"
    parts = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "text", "text": "Part"}]}]
    t2 = ChatTemplate.from_string("{% for m in messages %}[{{ m.content[0].text if m.content is not string else m.content }}]{% endfor %}")
    assert t2.render(parts, continue_final_message=True) == "[Hi][Part"


def test_continue_final_message_trailing_space_trimmed_by_template() -> None:
    t = ChatTemplate.from_string("{% for m in messages %}<{{ m.content | trim }}>{% endfor %}")
    assert t.render([{"role": "assistant", "content": "abc  "}], continue_final_message=True) == "<abc"


def test_continue_final_message_named_field() -> None:
    t = ChatTemplate.from_string("{% for m in messages %}<think>{{ m.reasoning_content }}</think>{{ m.content }}{% endfor %}")
    m = [{"role": "assistant", "content": "", "reasoning": "step one"}]
    assert t.render(m, continue_final_message="reasoning_content") == "<think>step one"
    with pytest.raises(ValueError, match="never mentions"):
        ChatTemplate.from_string("{{ messages[0].content }}").render(m, continue_final_message="reasoning_content")


def test_continue_final_message_errors() -> None:
    t = ChatTemplate.from_string(CHATML)
    with pytest.raises(ValueError, match="cannot be combined"):
        t.render(USER, continue_final_message=True, add_generation_prompt=True)
    with pytest.raises(ValueError, match="does not render the final message"):
        ChatTemplate.from_string("{{ messages | length }}{{ messages[-1].content[:2] }}").render(
            [{"role": "assistant", "content": "hello"}], continue_final_message=True
        )
    with pytest.raises(ValueError, match="has no 'content'"):
        t.render([{"role": "assistant"}], continue_final_message=True)


# --------------------------------------------------------------------------- compile cache


def test_compiled_once_per_source() -> None:
    source = "{{ 'cache probe' }} {{ messages | length }}"
    a = ChatTemplate.from_string(source, name="a")
    hits = compile_template.cache_info().hits
    b = ChatTemplate.from_string(source, name="b", special_tokens={"bos_token": "<s>"})
    assert compile_template.cache_info().hits == hits + 1
    assert a._compiled is b._compiled
    assert (a.name, b.name, dict(b.special_tokens)) == ("a", "b", {"bos_token": "<s>"})


# ------------------------------------------------------------------------------ resolution

SIMPLE = "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"


def write(folder: Path, files: dict[str, Any]) -> Path:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return folder


def test_chat_template_jinja_wins_and_tokens_come_from_the_config(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "chat_template.jinja": SIMPLE,
            "chat_template.json": {"chat_template": "json"},
            "tokenizer_config.json": {
                "chat_template": "config",
                "bos_token": {"__type": "AddedToken", "content": "<B>", "lstrip": False},
                "eos_token": "<E>",
                "unk_token": None,
            },
        },
    )
    t = load_chat_template(tmp_path)
    assert t.source == SIMPLE and t.name == f"{tmp_path.name}/chat_template.jinja"
    assert dict(t.special_tokens) == {"bos_token": "<B>", "eos_token": "<E>"}
    assert t.render(USER) == "<B>user:hi;"


def test_chat_template_json(tmp_path: Path) -> None:
    write(tmp_path, {"chat_template.json": {"chat_template": SIMPLE}, "tokenizer_config.json": {"chat_template": "config"}})
    t = load_chat_template(str(tmp_path))
    assert t.source == SIMPLE and t.name.endswith("chat_template.json[chat_template]")


def test_tokenizer_config_string(tmp_path: Path) -> None:
    write(tmp_path, {"tokenizer_config.json": {"chat_template": SIMPLE, "bos_token": "<s>"}})
    assert load_chat_template(tmp_path).render(USER) == "<s>user:hi;"


def test_tokenizer_config_named_templates(tmp_path: Path) -> None:
    named = [{"name": "default", "template": "D{{ tools is none }}"}, {"name": "tool_use", "template": "T{{ tools | length }}"}]
    write(tmp_path, {"tokenizer_config.json": {"chat_template": named}})
    t = load_chat_template(tmp_path)
    assert sorted(t.variants) == ["default", "tool_use"]
    assert t.render(USER) == "DTrue"
    assert t.render(USER, tools=[{"type": "function", "function": {"name": "f"}}]) == "T1"
    assert t.render(USER, tools=[]) == "T0"  # transformers: tools given (even empty) -> "tool_use"
    assert load_chat_template(tmp_path, name="tool_use").render(USER, tools=[]) == "T0"
    only = load_chat_template(tmp_path, name="default")
    assert only.render(USER, tools=[{"type": "function", "function": {"name": "f"}}]) == "DFalse"
    assert t.variant("tool_use").source == "T{{ tools | length }}"
    with pytest.raises(TemplateNotFoundError, match=r"no chat template named 'rag' \(named templates: default, tool_use\)"):
        load_chat_template(tmp_path, name="rag")
    with pytest.raises(TemplateNotFoundError, match="no named template 'rag'"):
        t.variant("rag")


def test_named_templates_without_default(tmp_path: Path) -> None:
    write(tmp_path, {"tokenizer_config.json": {"chat_template": [{"name": "tool_use", "template": "T"}]}})
    with pytest.raises(TemplateNotFoundError, match="have no 'default': pass name="):
        load_chat_template(tmp_path)
    assert load_chat_template(tmp_path, name="tool_use").render(USER) == "T"


def test_additional_chat_templates_folder(tmp_path: Path) -> None:
    write(tmp_path, {"chat_template.jinja": "D", "additional_chat_templates/tool_use.jinja": "T"})
    t = load_chat_template(tmp_path)
    assert (t.render(USER), t.render(USER, tools=[])) == ("D", "T")
    assert load_chat_template(tmp_path, name="tool_use").render(USER) == "T"


def test_explicit_file_wins(tmp_path: Path) -> None:
    write(tmp_path, {"chat_template.jinja": "folder", "custom.jinja": "custom", "t.json": {"chat_template": "from json"}})
    assert load_chat_template(tmp_path, file="custom.jinja").render(USER) == "custom"
    assert load_chat_template(tmp_path, file=tmp_path / "custom.jinja").render(USER) == "custom"
    assert load_chat_template(tmp_path, file="t.json").render(USER) == "from json"
    with pytest.raises(TemplateNotFoundError, match="does not exist") as info:
        load_chat_template(tmp_path, file="nope.jinja")
    assert info.value.folder == tmp_path and info.value.tried == ("nope.jinja",)


def test_single_template_has_no_named_ones(tmp_path: Path) -> None:
    write(tmp_path, {"chat_template.jinja": "x"})
    assert load_chat_template(tmp_path, name="default").render(USER) == "x"
    with pytest.raises(TemplateNotFoundError, match="single template.*no 'tool_use'"):
        load_chat_template(tmp_path, name="tool_use")


def test_missing_template_names_folder_and_files(tmp_path: Path) -> None:
    write(tmp_path, {"tokenizer_config.json": {"eos_token": "</s>"}})
    with pytest.raises(TemplateNotFoundError) as info:
        load_chat_template(tmp_path)
    msg = str(info.value)
    assert str(tmp_path) in msg
    assert "chat_template.jinja" in msg and "chat_template.json (absent)" in msg
    assert "tokenizer_config.json (no 'chat_template')" in msg
    assert info.value.folder == tmp_path and len(info.value.tried) == 3
    with pytest.raises(TemplateNotFoundError, match="not a folder"):
        load_chat_template(tmp_path / "absent")


def test_bad_files_are_template_errors(tmp_path: Path) -> None:
    write(tmp_path, {"tokenizer_config.json": "{not json"})
    with pytest.raises(TemplateError, match="cannot read .*tokenizer_config.json"):
        load_chat_template(tmp_path)
    write(tmp_path, {"tokenizer_config.json": {"chat_template": 3}})
    with pytest.raises(TemplateError, match="must be a template string or a list"):
        load_chat_template(tmp_path)
    write(tmp_path, {"tokenizer_config.json": {}, "chat_template.jinja": "{% if %}"})
    with pytest.raises(TemplateError, match="chat_template.jinja' does not compile"):
        load_chat_template(tmp_path)


def test_read_special_tokens() -> None:
    config = {
        "bos_token": None,
        "eos_token": {"content": "<|im_end|>"},
        "pad_token": "<|endoftext|>",
        "mask_token": 5,
        "additional_special_tokens": ["<x>"],
    }
    assert read_special_tokens(config) == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}


@pytest.mark.shared
def test_real_qwen3_folder(shared: Path) -> None:
    t = load_chat_template(shared / "tokenizers" / "qwen3")
    assert dict(t.special_tokens) == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    out = t.render([{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert out == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert not reasoning_left_open(out)


# ---------------------------------------------------------------------------- capabilities


def template_file(shared: Path, name: str) -> ChatTemplate:
    path = shared / "templates" / name
    specials = {t["file"]: t["special_tokens"] for t in json.loads((shared / "templates" / "templates.json").read_text())["templates"]}
    return ChatTemplate.from_string(path.read_text(encoding="utf-8"), name=name, special_tokens=specials[name])


def caps(**true: bool) -> TemplateCapabilities:
    fields = dict.fromkeys(TemplateCapabilities.__dataclass_fields__, False)
    return TemplateCapabilities(**{**fields, **true})


CAPABILITIES = {
    "hf-qwen3.jinja": caps(
        tools=True, tool_calls=True, object_arguments=True, tool_results=True, system=True, reasoning=True, string_content=True
    ),
    "hf-llama3.jinja": caps(tools=True, tool_calls=True, object_arguments=True, tool_results=True, system=True, string_content=True),
    "mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja": caps(
        tools=True, tool_calls=True, object_arguments=True, tool_results=True, system=True, string_content=True, part_content=True
    ),
    # Adds the arguments to a string: only a JSON-string arguments renders; offered tools are ignored.
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": caps(tool_calls=True, tool_results=True, system=True, string_content=True),
    # Appends to a list: the immutable sandbox refuses, so no tool call renders at all.
    "Kimi-K2-Thinking.jinja": caps(tools=True, system=True, string_content=True, part_content=True),
    "gemma4.jinja": caps(
        tools=True,
        tool_calls=True,
        object_arguments=True,
        tool_results=True,
        system=True,
        developer=True,
        string_content=True,
        part_content=True,
    ),
    # Renders only `custom_tools`, never `tools`.
    "vllm-tool_chat_template_llama4_pythonic.jinja": caps(
        tool_calls=True, object_arguments=True, tool_results=True, system=True, string_content=True, part_content=True
    ),
}


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(CAPABILITIES))
def test_capabilities_of_real_templates(shared: Path, name: str) -> None:
    t = template_file(shared, name)
    assert t.capabilities == CAPABILITIES[name]
    assert t.capabilities is t.capabilities  # probed once


@pytest.mark.shared
def test_capabilities_without_special_tokens(shared: Path) -> None:
    """A template that adds eos_token to strings is probed with placeholder tokens, not failed for want of them."""
    source = (shared / "templates" / "mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja").read_text(encoding="utf-8")
    bare = ChatTemplate.from_string(source)
    with pytest.raises(TemplateError, match="UndefinedError"):
        bare.render([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], add_generation_prompt=False)
    assert bare.capabilities == CAPABILITIES["mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja"]


def test_capabilities_of_small_templates() -> None:
    strings_only = ChatTemplate.from_string("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    c = strings_only.capabilities
    assert c.string_content and c.system and not c.part_content  # a list of parts prints as its repr
    assert not (c.tools or c.tool_calls or c.reasoning or c.developer)
    assert c.tool_results  # a tool message is a message like any other here

    parts_only = ChatTemplate.from_string(
        "{% for m in messages %}{% if m.content is string %}{{ raise_exception('parts only') }}{% endif %}"
        "{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"
    )
    c = parts_only.capabilities
    assert c.part_content and not c.string_content and not c.system

    no_system = ChatTemplate.from_string(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% elif m.role == 'developer' %}dev{% endif %}{{ m.content }}{% endfor %}"
    )
    assert not no_system.capabilities.system and no_system.capabilities.developer


def test_probe_is_the_defaults_for_named_templates(tmp_path: Path) -> None:
    named = [{"name": "default", "template": "{{ messages[0].content }}"}, {"name": "tool_use", "template": "{{ tools | tojson }}"}]
    write(tmp_path, {"tokenizer_config.json": {"chat_template": named}})
    t = load_chat_template(tmp_path)
    assert not t.capabilities.tools and probe_capabilities(t.variant("tool_use")).tools


# ----------------------------------------------------------------------- reasoning_left_open


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n<think>", True),
        ("<｜Assistant｜><think>\n\n  ", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),  # thinking turned off: closed
        ("<|im_start|>assistant\n", False),
        ("", False),
        ("<think>old</think>answer<|im_end|>\n<|im_start|>assistant\n<think>\n", True),
        ("user: what is <think>?<|im_end|>\n<|im_start|>assistant\n", False),  # a marker in earlier text
        ("<think>\nstill thinking", False),  # text after the marker: the prompt continues it, not a template opening
    ],
)
def test_reasoning_left_open(prompt: str, expected: bool) -> None:
    assert reasoning_left_open(prompt) is expected


def test_reasoning_left_open_other_markers() -> None:
    assert reasoning_left_open("<|assistant|><seed:think>", start="<seed:think>", end="</seed:think>")
    assert not reasoning_left_open("<seed:think></seed:think>", start="<seed:think>", end="</seed:think>")
    assert reasoning_left_open("[THINK]\n", start="[THINK]", end="")
    with pytest.raises(ValueError, match="non-empty"):
        reasoning_left_open("x", start="")


@pytest.mark.shared
def test_reasoning_left_open_on_real_renders(shared: Path) -> None:
    qwen = template_file(shared, "hf-qwen3.jinja")
    r1 = template_file(shared, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    assert not reasoning_left_open(qwen.render(USER))  # Qwen3 leaves the choice to the model
    assert not reasoning_left_open(qwen.render(USER, enable_thinking=False))
    assert reasoning_left_open(r1.render(USER))  # the generation prompt opens <think>
