"""Chat templates rendered exactly as transformers renders them.

A model's chat template is a Jinja program from the model's repository.
Every engine that serves the model (transformers, vLLM, SGLang) renders it in
the environment transformers defines, and small differences in that
environment change the prompt: Jinja's own ``tojson`` sorts keys and escapes
HTML characters, ``trim_blocks``/``lstrip_blocks`` decide every newline
around a block tag, and templates call ``raise_exception`` and
``strftime_now``. :class:`ChatTemplate` compiles a template once in that
environment and renders it byte for byte as transformers 5.x's
``apply_chat_template(..., tokenize=False)`` does:

* the environment is :class:`jinja2.sandbox.ImmutableSandboxedEnvironment`
  with ``trim_blocks=True``, ``lstrip_blocks=True``, the
  ``{% generation %}...{% endgeneration %}`` tag (its body renders
  unchanged) and ``jinja2.ext.loopcontrols`` (``break``/``continue``);
* ``tojson`` is ``json.dumps(x, ensure_ascii=False, indent=None,
  separators=None, sort_keys=False)`` (those four parameters, in that order);
* globals: ``raise_exception(message)`` (a :class:`TemplateError` carrying the
  message), ``strftime_now(format)`` (the render's ``date``, or now), a
  ``dict`` that builds dicts (and ``dict.fromkeys``) without exposing the
  ``dict`` type, and a ``namespace`` that refuses attribute names starting
  with ``_``;
* before rendering, the messages are copied into plain JSON data (mappings,
  lists, tuples, str, int, float, bool, None; dataclasses and pydantic
  models become dicts, anything else a ``"<TypeName>"`` placeholder), the
  top-level keys of each message whose value is None are dropped, and a
  message's reasoning (the first of ``reasoning_content``, ``thinking``,
  ``reasoning`` that is set) is given as ``reasoning_content`` and, unless
  already set, as ``thinking`` (gpt-oss templates read that). ``tools``,
  ``documents`` and the extra variables are copied the same way. The
  caller's objects are never changed;
* the template sees ``messages``, ``tools`` (None when not given),
  ``documents``, ``add_generation_prompt``, the special tokens
  (``bos_token``, ``eos_token``, ...) and every extra keyword (which wins over
  a special token of the same name).

Compiled templates are cached by source text (:func:`compile_template`), so
a model's template compiles once however many :class:`ChatTemplate` objects
hold it, and one compiled template renders concurrently from threads (the
date a render fixes lives in a context variable).

:func:`load_chat_template` finds a model folder's template as transformers
does: an explicit file, else ``chat_template.jinja`` (with the named
templates of ``additional_chat_templates/*.jinja``), else
``chat_template.json``, else ``tokenizer_config.json``'s ``chat_template``
(a string, or a list of ``{"name", "template"}``). With named templates and
no name asked for, each render picks ``"tool_use"`` when tools are given
(and the model has one), else ``"default"``.

What a template can render (tools, tool calls, reasoning, ...) is probed by
:attr:`ChatTemplate.capabilities` (see :mod:`deltaflow.prompt.capabilities`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as _dt
import json
import os
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.parser
import jinja2.runtime
import jinja2.sandbox
import jinja2.utils

from ..errors import DeltaflowError

if TYPE_CHECKING:
    from .capabilities import TemplateCapabilities

__all__ = (
    "SPECIAL_TOKEN_NAMES",
    "ChatTemplate",
    "GenerationExtension",
    "TemplateError",
    "TemplateNotFoundError",
    "compile_template",
    "load_chat_template",
    "read_special_tokens",
)

#: The special tokens a tokenizer hands its chat template, by variable name (transformers' named ones).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

# The names a message's reasoning arrives under; the first is the one templates read.
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")

# Appended to the final message for continue_final_message, then cut off the render again.
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "

# The files load_chat_template reads, in order.
_JINJA_FILE = "chat_template.jinja"
_NAMED_DIR = "additional_chat_templates"
_JSON_FILE = "chat_template.json"
_CONFIG_FILE = "tokenizer_config.json"


# ----------------------------------------------------------------------------- errors


class TemplateError(DeltaflowError, ValueError):
    """A chat template that does not compile, or that raised while rendering.

    Raised for the template's own ``raise_exception(...)``, for a Jinja error
    (a syntax error, a sandbox refusal) and for a Python error inside the
    template (such as adding a dict to a string); the original exception is
    ``__cause__``. The message names the template and keeps the template's
    own message.

    Attributes:
        template: the template's name (a file name, or ``"<string>"``).
        reason: the template's own message: what it passed to
            ``raise_exception``, or the text of the Jinja or Python error.
        lineno: the template line the error points at, when known.
    """

    def __init__(self, message: str, *, template: str = "<string>", reason: str = "", lineno: int | None = None):
        self.template = template
        self.reason = reason or message
        self.lineno = lineno
        super().__init__(message)


class TemplateNotFoundError(TemplateError):
    """No chat template where one was looked for.

    Attributes:
        folder: the model folder that was searched (None for a template set
            asked for a name it does not have).
        tried: what was looked for, in order (file names, or ``file[key]``).
    """

    def __init__(
        self, message: str, *, folder: Path | None = None, tried: Sequence[str] = (), template: str = "<string>"
    ):
        self.folder = folder
        self.tried = tuple(tried)
        super().__init__(message, template=template)


class _RaisedByTemplate(jinja2.TemplateError):
    """What the template global ``raise_exception`` raises (turned into :class:`TemplateError`)."""


# ------------------------------------------------------------------------ environment


class GenerationExtension(jinja2.ext.Extension):
    """The ``{% generation %}...{% endgeneration %}`` block tag: renders its body unchanged.

    Training code uses the tag to find the assistant's tokens; for rendering a
    prompt it is transparent. The body is a call block, so its scoping is that
    of transformers' tag: a plain ``{% set %}`` inside stays inside, namespace
    attributes set inside are seen outside.
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        """Parse the block up to ``{% endgeneration %}`` into a call block of :meth:`_body`."""
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body")
        return jinja2.nodes.CallBlock(call, [], [], body, lineno=lineno)

    @staticmethod
    def _body(caller: Callable[[], str]) -> str:
        return caller()


# The date strftime_now sees during a render (None: the clock's).
_RENDER_NOW: contextvars.ContextVar[_dt.datetime | None] = contextvars.ContextVar(
    "deltaflow_template_now", default=None
)


def _raise_exception(message: Any) -> None:
    raise _RaisedByTemplate(str(message))


def _strftime_now(format: str) -> str:
    now = _RENDER_NOW.get()
    return (now if now is not None else _dt.datetime.now()).strftime(format)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _DictGlobal:
    """The template global ``dict``: ``dict(...)`` and ``dict.fromkeys(...)`` without the type object itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Iterable[Any], value: Any = None) -> dict[Any, Any]:
        """A dict of ``keys``, each mapped to ``value``."""
        return dict.fromkeys(keys, value)


def _refuse_private_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            f"a chat template cannot set the attribute {name!r} on a namespace: names starting with '_' are refused"
        )


class _SafeNamespace(jinja2.utils.Namespace):
    """The template global ``namespace``: Jinja's, refusing attribute names that start with ``_``."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (self is args[0], so namespace(self=...) works)
        ns, rest = args[0], args[1:]
        initial = dict(*rest, **kwargs)
        for key in initial:
            _refuse_private_name(key)
        jinja2.utils.Namespace.__init__(ns, initial)

    def __setitem__(self, name: str, value: Any) -> None:
        _refuse_private_name(name)
        super().__setitem__(name, value)


# The attributes of a dict (its methods): ``message.role`` on a dict that has no such attribute is the item.
_DICT_ATTRIBUTES = frozenset(dir(dict))
# Types whose attribute safety depends on the type and the name alone: the plain JSON data templates see,
# a loop's ``loop`` and a ``namespace()``.
_PLAIN_TYPES = frozenset({str, dict, list, int, float, bool, type(None), jinja2.runtime.LoopContext, _SafeNamespace})
_SAFETY_CACHE_SIZE = 4096


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the same decisions, made once per type and name for plain data.

    ``message.role`` on a dict first asks the dict for an attribute ``role``
    (raising and catching an ``AttributeError``) and only then for the item;
    ``text.startswith`` checks the attribute's safety with a dozen
    ``isinstance`` tests. For the plain JSON types templates see (and
    ``loop`` and ``namespace()``), the answer depends only on the type and
    the name: dict items are looked up directly when the name is no dict
    attribute, and safety is remembered per ``(type, name)`` (bounded; the
    names come from the template's source).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._safety: dict[tuple[type, str], bool] = {}

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        kind = type(obj)
        if kind not in _PLAIN_TYPES:
            return super().is_safe_attribute(obj, attr, value)
        key = (kind, attr)
        safe = self._safety.get(key)
        if safe is None:
            safe = super().is_safe_attribute(obj, attr, value)
            if len(self._safety) < _SAFETY_CACHE_SIZE:
                self._safety[key] = safe
        return safe


_ENV_LOCK = threading.Lock()
_ENV: _Sandbox | None = None


def _environment() -> _Sandbox:
    """The one Jinja environment every chat template compiles in (built on first use)."""
    global _ENV
    if _ENV is None:
        with _ENV_LOCK:
            if _ENV is None:
                env = _Sandbox(
                    trim_blocks=True,
                    lstrip_blocks=True,
                    extensions=[GenerationExtension, jinja2.ext.loopcontrols],
                )
                env.filters["tojson"] = _tojson
                env.globals["raise_exception"] = _raise_exception
                env.globals["strftime_now"] = _strftime_now
                env.globals["dict"] = _DictGlobal()
                env.globals["namespace"] = _SafeNamespace
                _ENV = env
    return _ENV


@lru_cache(maxsize=128)
def compile_template(source: str) -> jinja2.Template:
    """Compile ``source`` in transformers' chat-template environment, once per source text.

    Args:
        source: the template's Jinja text.

    Returns:
        The compiled template (shared: the 128 most recently used sources are
        kept).

    Raises:
        jinja2.TemplateSyntaxError: the template does not compile
            (:meth:`ChatTemplate.from_string` turns it into a
            :class:`TemplateError` naming the template).
    """
    return _environment().from_string(source)


def _template_lineno(exc: BaseException) -> int | None:
    """The line of the template frame nearest to where ``exc`` was raised, if any."""
    lineno = getattr(exc, "lineno", None)
    if isinstance(lineno, int):
        return lineno
    tb = exc.__traceback__
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            found = tb.tb_lineno
        tb = tb.tb_next
    return found


# ------------------------------------------------------------------- input normalization


def _plain(value: Any) -> Any:
    """A fresh copy of ``value`` made of plain JSON data (see the module docstring)."""
    kind = type(value)
    if value is None or kind is str or kind is int or kind is float or kind is bool:
        return value
    # The common containers by their exact type first (isinstance of Mapping is slow), their strings without a call.
    if kind is dict:
        return {(k if type(k) is str else _plain(k)): (v if type(v) is str else _plain(v)) for k, v in value.items()}
    if kind is list:
        return [v if type(v) is str else _plain(v) for v in value]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _plain(dump())
    return f"<{kind.__name__}>"


def _prepare_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Plain copies of ``messages``, None-valued keys dropped and reasoning aliased."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    if not messages:
        raise ValueError("cannot render a chat template for an empty conversation: give at least one message")
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(messages):
        message = _plain(raw)
        if not isinstance(message, dict):
            raise TypeError(
                f"messages[{i}] must be a dict (or a dataclass or pydantic model), got {type(raw).__name__}"
            )
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_KEYS if k in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _prepare_tools(tools: Sequence[Any] | None) -> list[Any] | None:
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise TypeError(f"tools must be a list of JSON-schema tool dicts, got {type(tools).__name__}")
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise TypeError(
                f"tools[{i}] must be a JSON-schema dict such as {{'type': 'function', 'function': {{...}}}}, "
                f"got {type(tool).__name__}"
            )
    return [_plain(t) for t in tools]


def _prepare_documents(documents: Sequence[Any] | None) -> list[Any] | None:
    if documents is None:
        return None
    if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Sequence):
        raise TypeError(
            f"documents must be a list of dicts with 'title' and 'text' keys, got {type(documents).__name__}"
        )
    for i, doc in enumerate(documents):
        if not isinstance(doc, Mapping):
            raise TypeError(f"documents[{i}] must be a dict with 'title' and 'text' keys, got {type(doc).__name__}")
    return [_plain(d) for d in documents]


def _as_datetime(date: _dt.date | None) -> _dt.datetime | None:
    if date is None or isinstance(date, _dt.datetime):
        return date
    if isinstance(date, _dt.date):
        return _dt.datetime.combine(date, _dt.time())
    raise TypeError(f"date must be a datetime.date, a datetime.datetime or None, got {type(date).__name__}")


def _check_special_tokens(special_tokens: Mapping[str, str] | None) -> dict[str, str]:
    if special_tokens is None:
        return {}
    if not isinstance(special_tokens, Mapping):
        raise TypeError(f"special_tokens must be a mapping of variable name to token text, got {special_tokens!r}")
    out: dict[str, str] = {}
    for key, value in special_tokens.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"special_tokens must map names to token text (str -> str), got {key!r}: {type(value).__name__}"
            )
        out[key] = value
    return out


# --------------------------------------------------------------------------- templates


class ChatTemplate:
    """A model's chat template, compiled once, rendered as transformers renders it.

    Build one with :meth:`from_string` or :func:`load_chat_template`. It is
    immutable and safe to share between threads.

    A template loaded from a model with named templates (transformers'
    template dicts) holds them as :attr:`variants`; :meth:`render` then picks
    ``"tool_use"`` when tools are given and the model has one, else the
    ``"default"`` it was built from.

    Attributes:
        name: what the template is called in errors (a file name, or
            ``"<string>"``).
        source: the template's Jinja text.
        special_tokens: the special-token variables every render gets
            (``bos_token``, ``eos_token``, ...).
    """

    __slots__ = ("name", "source", "special_tokens", "_compiled", "_variants", "_capabilities", "_ast", "_variables")

    def __init__(self, source: str, *, name: str = "<string>", special_tokens: Mapping[str, str] | None = None):
        """Compile ``source`` (see :meth:`from_string`)."""
        if not isinstance(source, str):
            raise TypeError(f"a chat template's source must be str, got {type(source).__name__}")
        self.name = name
        self.source = source
        self.special_tokens: Mapping[str, str] = types.MappingProxyType(_check_special_tokens(special_tokens))
        try:
            self._compiled = compile_template(source)
        except jinja2.TemplateSyntaxError as exc:
            where = f" (line {exc.lineno})" if exc.lineno else ""
            raise TemplateError(
                f"chat template {name!r} does not compile{where}: {exc.message}",
                template=name,
                reason=exc.message or str(exc),
                lineno=exc.lineno,
            ) from exc
        self._variants: Mapping[str, ChatTemplate] = types.MappingProxyType({})
        self._capabilities: TemplateCapabilities | None = None
        self._ast: jinja2.nodes.Template | None = None
        self._variables: frozenset[str] | None = None

    @classmethod
    def from_string(
        cls, source: str, *, name: str = "<string>", special_tokens: Mapping[str, str] | None = None
    ) -> ChatTemplate:
        """Compile a chat template from its Jinja text.

        Args:
            source: the template's Jinja text.
            name: what to call the template in error messages.
            special_tokens: the special-token variables (``{"bos_token":
                "<s>", "eos_token": "</s>"}``) every render gets.

        Returns:
            The compiled template (compiled once per source text: see
            :func:`compile_template`).

        Raises:
            TemplateError: the template does not compile (the message gives
                the line and Jinja's reason).
        """
        return cls(source, name=name, special_tokens=special_tokens)

    @classmethod
    def _named(
        cls, templates: Mapping[str, ChatTemplate], *, folder: Path | None, tried: Sequence[str]
    ) -> ChatTemplate:
        """The ``"default"`` of named templates, holding all of them as its variants."""
        if "default" not in templates:
            raise TemplateNotFoundError(
                f"the named chat templates in {folder} ({', '.join(sorted(templates))}) have no 'default': "
                "pass name= to pick one",
                folder=folder,
                tried=tried,
            )
        default = templates["default"]
        default._variants = types.MappingProxyType(dict(templates))
        return default

    @property
    def variants(self) -> Mapping[str, ChatTemplate]:
        """The model's named templates by name (``"default"``, ``"tool_use"``, ...); empty for a single template."""
        return self._variants

    def variant(self, name: str) -> ChatTemplate:
        """The named template ``name`` of this model.

        Raises:
            TemplateNotFoundError: the model has no template of that name
                (the message lists the names it has).
        """
        if name in self._variants:
            return self._variants[name]
        have = ", ".join(sorted(self._variants)) or "none: it is a single template"
        raise TemplateNotFoundError(
            f"chat template {self.name!r} has no named template {name!r} (named templates: {have})",
            folder=None,
            tried=(name,),
            template=self.name,
        )

    def select(self, *, tools: Sequence[Any] | None = None) -> ChatTemplate:
        """The template a render with these ``tools`` uses: ``"tool_use"`` when tools are given and exist, else self."""
        if tools is not None and "tool_use" in self._variants:
            return self._variants["tool_use"]
        return self

    @property
    def capabilities(self) -> TemplateCapabilities:
        """What this template renders (tools, tool calls, reasoning, ...), probed once on first use.

        See :func:`deltaflow.prompt.capabilities.probe_capabilities`.
        """
        caps = self._capabilities
        if caps is None:
            from .capabilities import probe_capabilities

            caps = self._capabilities = probe_capabilities(self)
        return caps

    @property
    def ast(self) -> jinja2.nodes.Template:
        """The template's Jinja syntax tree (parsed once, on first use)."""
        tree = self._ast
        if tree is None:
            tree = self._ast = _environment().parse(self.source)
        return tree

    @property
    def variables(self) -> frozenset[str]:
        """The variables the template reads without setting them (``messages``, ``enable_thinking``, ...).

        As :func:`jinja2.meta.find_undeclared_variables` finds them: a
        template-local name set only inside a loop or a branch may be listed
        too.
        """
        names = self._variables
        if names is None:
            names = self._variables = frozenset(jinja2.meta.find_undeclared_variables(self.ast))
        return names

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool | None = None,
        continue_final_message: bool | str = False,
        date: _dt.date | None = None,
        **kwargs: Any,
    ) -> str:
        """Render the prompt for a conversation, byte for byte as transformers does.

        Args:
            messages: the conversation, each message a dict (or a dataclass or
                pydantic model) in the form templates take: ``role``,
                ``content``, and ``tool_calls`` (arguments as objects),
                ``reasoning_content``, ... as the template reads them. Never
                changed.
            tools: JSON-schema tool dicts (``{"type": "function", "function":
                {...}}``); None renders the template's no-tools form.
            documents: retrieval documents (dicts with ``title`` and ``text``)
                for templates that take them.
            add_generation_prompt: end with the header of a new assistant turn.
                None (the default) means True, unless
                ``continue_final_message`` is set.
            continue_final_message: end the prompt right after the final
                message's text, so the model continues that message (its
                ``content``; a string names another field, such as
                ``"reasoning_content"``). Cannot be combined with
                ``add_generation_prompt=True``.
            date: what ``strftime_now`` sees (a date means its midnight); None
                means now. Fix it for reproducible prompts.
            **kwargs: more template variables (``enable_thinking``,
                ``reasoning_effort``, ...); they win over special tokens of
                the same name.

        Returns:
            The prompt text.

        Raises:
            TemplateError: the template raised (``raise_exception``, a Jinja
                or Python error); the message names the template and keeps
                its own message.
            ValueError: ``continue_final_message`` with
                ``add_generation_prompt=True``, an empty conversation, or a
                final message the template does not render.
            TypeError: messages, tools or documents of the wrong shape.
        """
        if continue_final_message:
            if add_generation_prompt:
                raise ValueError(
                    "continue_final_message and add_generation_prompt=True cannot be combined: continue_final_message "
                    "lets the model continue the final message, add_generation_prompt starts a new assistant turn"
                )
            add_generation_prompt = False
        elif add_generation_prompt is None:
            add_generation_prompt = True
        return self.select(tools=tools)._render(
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=bool(add_generation_prompt),
            continue_final_message=continue_final_message,
            date=date,
            variables=kwargs,
        )

    def _render(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None,
        documents: Sequence[Any] | None,
        add_generation_prompt: bool,
        continue_final_message: bool | str,
        date: _dt.date | None,
        variables: Mapping[str, Any],
    ) -> str:
        now = _as_datetime(date)
        chat = _prepare_messages(messages)
        context: dict[str, Any] = dict(self.special_tokens)
        context.update({k: _plain(v) for k, v in variables.items()})
        context.update(
            messages=chat,
            tools=_prepare_tools(tools),
            documents=_prepare_documents(documents),
            add_generation_prompt=add_generation_prompt,
        )
        final_text = self._tag_final_message(chat, continue_final_message) if continue_final_message else None

        token = _RENDER_NOW.set(now)
        try:
            rendered = self._compiled.render(context)
        except _RaisedByTemplate as exc:
            raise self._render_error(exc, "raised an exception") from exc
        except Exception as exc:  # the template's own failures: Jinja's and Python's errors alike
            raise self._render_error(exc, "failed") from exc
        finally:
            _RENDER_NOW.reset(token)

        if final_text is not None:
            rendered = self._cut_after_final_message(rendered, final_text)
        return rendered

    def _render_error(self, exc: Exception, what: str) -> TemplateError:
        reason = exc.message if isinstance(exc, jinja2.TemplateError) and exc.message else str(exc)
        lineno = _template_lineno(exc)
        where = f" at line {lineno}" if lineno else ""
        if isinstance(exc, _RaisedByTemplate):
            text = f"chat template {self.name!r} {what}{where}: {reason}"
        else:
            text = f"chat template {self.name!r} {what}{where}: {type(exc).__name__}: {reason}"
        return TemplateError(text, template=self.name, reason=reason, lineno=lineno)

    def _tag_final_message(self, chat: list[dict[str, Any]], field: bool | str) -> str:
        """Mark the text to continue in the (copied) final message; return that text as given."""
        key = field if isinstance(field, str) else "content"
        final = chat[-1]
        value = final.get(key)
        if value is None:
            raise ValueError(f"continue_final_message is set, but the final message has no {key!r} to continue")
        keys = [key]
        if key in _REASONING_KEYS:
            # The reasoning goes in under several names: tag each copy, whichever the template reads.
            keys = [k for k in _REASONING_KEYS if final.get(k) == value]
        if not any(k in self.source for k in keys):
            raise ValueError(
                f"continue_final_message names {key!r}, which chat template {self.name!r} never mentions"
            )
        if isinstance(value, (list, tuple)):
            for part in reversed(value):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    text: str = part["text"]
                    part["text"] = text + _CONTINUE_TAG
                    return text
            raise ValueError("continue_final_message is set, but the final message has no text part to continue")
        if not isinstance(value, str):
            raise ValueError(
                f"continue_final_message is set, but the final message's {key!r} is {type(value).__name__}, "
                "not text or a list of text parts"
            )
        for k in keys:
            final[k] = final[k] + _CONTINUE_TAG
        return value

    def _cut_after_final_message(self, rendered: str, final_text: str) -> str:
        tag = _CONTINUE_TAG.strip()
        if final_text.strip() not in rendered or tag not in rendered:
            raise ValueError(
                f"continue_final_message is set, but chat template {self.name!r} does not render the final "
                f"message's text (it changes or drops it), so the prompt cannot end inside it: {final_text.strip()!r}"
            )
        at = rendered.rindex(tag)
        if rendered.startswith(_CONTINUE_TAG, at):
            return rendered[:at]
        return rendered[:at].rstrip()  # the template trimmed the message's trailing space

    def __repr__(self) -> str:
        named = f", variants={sorted(self._variants)!r}" if self._variants else ""
        return f"ChatTemplate(name={self.name!r}, {len(self.source)} chars{named})"


# --------------------------------------------------------------------------- resolution


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TemplateError(f"cannot read {path}: {exc}", template=str(path)) from exc


def _token_text(value: Any) -> str | None:
    """A special token's text: a string, or the ``content`` of an AddedToken-shaped dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def read_special_tokens(config: Mapping[str, Any]) -> dict[str, str]:
    """The special-token variables of a parsed ``tokenizer_config.json``.

    Args:
        config: the parsed file.

    Returns:
        ``{"bos_token": ..., "eos_token": ..., ...}`` for those of
        :data:`SPECIAL_TOKEN_NAMES` that are set (a string, or an
        AddedToken-shaped dict ``{"content": ...}``); unset and null ones are
        left out, as transformers leaves them out of the template variables.
    """
    out: dict[str, str] = {}
    for key in SPECIAL_TOKEN_NAMES:
        text = _token_text(config.get(key))
        if text is not None:
            out[key] = text
    return out


def _templates_from_value(
    value: Any, *, label: str, special_tokens: Mapping[str, str]
) -> dict[str, ChatTemplate] | ChatTemplate:
    """A ``chat_template`` value: a string, a list of ``{"name", "template"}``, or a name -> template mapping."""
    if isinstance(value, str):
        return ChatTemplate(value, name=label, special_tokens=special_tokens)
    pairs: list[tuple[Any, Any]]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
        pairs = [(v.get("name"), v.get("template")) for v in value]
    else:
        raise TemplateError(
            f"{label} must be a template string or a list of {{'name': ..., 'template': ...}}, "
            f"got {type(value).__name__}",
            template=label,
        )
    out: dict[str, ChatTemplate] = {}
    for name, source in pairs:
        if not isinstance(name, str) or not isinstance(source, str):
            raise TemplateError(
                f"{label}: each named template needs a string 'name' and 'template', got {name!r}", template=label
            )
        out[name] = ChatTemplate(source, name=f"{label}:{name}", special_tokens=special_tokens)
    return out


def load_chat_template(
    model_dir: str | os.PathLike[str], *, name: str | None = None, file: str | os.PathLike[str] | None = None
) -> ChatTemplate:
    """Find and compile a model folder's chat template, with its special tokens.

    Looks, in order, at: ``file`` (relative to ``model_dir`` unless
    absolute; a ``.json`` file is read for its ``chat_template``);
    ``chat_template.jinja`` (named templates beside it in
    ``additional_chat_templates/NAME.jinja``); ``chat_template.json``
    (``{"chat_template": ...}``); ``tokenizer_config.json``'s
    ``chat_template`` (a string, or a list of ``{"name", "template"}``).
    The special tokens are read from ``tokenizer_config.json`` when it
    exists (see :func:`read_special_tokens`).

    Args:
        model_dir: the model's folder.
        name: which named template to use (``"tool_use"``, ...). None: a
            single template as it is; named templates' ``"default"``, with
            the others as :attr:`ChatTemplate.variants` (a render with tools
            uses ``"tool_use"`` if there is one).
        file: a template file that wins over the folder's own.

    Returns:
        The compiled template.

    Raises:
        TemplateNotFoundError: no template (the message names the folder and
            every file tried), or no template called ``name`` (the message
            lists the names there are).
        TemplateError: a template that does not compile, or a file that is
            not valid JSON or UTF-8.
    """
    folder = Path(model_dir)
    if not folder.is_dir():
        raise TemplateNotFoundError(f"model folder {folder} does not exist or is not a folder", folder=folder, tried=())
    config_path = folder / _CONFIG_FILE
    config = _read_json(config_path) if config_path.is_file() else {}
    if not isinstance(config, Mapping):
        raise TemplateError(
            f"{config_path} must hold a JSON object, got {type(config).__name__}", template=str(config_path)
        )
    special = read_special_tokens(config)
    tried: list[str] = []
    found: dict[str, ChatTemplate] | ChatTemplate | None = None

    def label(path: Path, key: str | None = None) -> str:
        shown = f"{folder.name}/{path.relative_to(folder)}" if path.is_relative_to(folder) else str(path)
        return f"{shown}[{key}]" if key else shown

    def from_json(path: Path) -> dict[str, ChatTemplate] | ChatTemplate | None:
        data = config if path == config_path else _read_json(path)
        if not isinstance(data, Mapping) or data.get("chat_template") is None:
            tried.append(f"{path.name} (no 'chat_template')")
            return None
        return _templates_from_value(data["chat_template"], label=label(path, "chat_template"), special_tokens=special)

    if file is not None:
        path = Path(file)
        path = path if path.is_absolute() else folder / path
        tried.append(str(file))
        if not path.is_file():
            raise TemplateNotFoundError(
                f"chat template file {path} does not exist (asked for as file={str(file)!r})",
                folder=folder,
                tried=tried,
            )
        if path.suffix == ".json":
            found = from_json(path)
            if found is None:
                raise TemplateNotFoundError(f"{path} has no 'chat_template'", folder=folder, tried=tried)
        else:
            found = ChatTemplate(path.read_text(encoding="utf-8"), name=label(path), special_tokens=special)
    else:
        jinja_path = folder / _JINJA_FILE
        tried.append(_JINJA_FILE)
        named_dir = folder / _NAMED_DIR
        named: dict[str, ChatTemplate] = {}
        if named_dir.is_dir():
            for p in sorted(named_dir.glob("*.jinja")):
                named[p.name.removesuffix(".jinja")] = ChatTemplate(
                    p.read_text(encoding="utf-8"), name=label(p), special_tokens=special
                )
        if jinja_path.is_file():
            source = jinja_path.read_text(encoding="utf-8")
            default = ChatTemplate(source, name=label(jinja_path), special_tokens=special)
            found = {**named, "default": default} if named else default
        elif named:
            found = named
        else:
            for candidate in (folder / _JSON_FILE, config_path):
                if found is not None:
                    break
                if candidate.is_file():
                    found = from_json(candidate)
                else:
                    tried.append(f"{candidate.name} (absent)")
            if found is None:
                raise TemplateNotFoundError(
                    f"no chat template in {folder}: tried {', '.join(tried)}", folder=folder, tried=tried
                )

    if isinstance(found, ChatTemplate):
        if name is not None and name != "default":
            raise TemplateNotFoundError(
                f"the chat template of {folder} ({found.name}) is a single template, not named ones: "
                f"there is no {name!r}",
                folder=folder,
                tried=[*tried, name],
                template=found.name,
            )
        return found
    if name is not None:
        if name not in found:
            raise TemplateNotFoundError(
                f"{folder} has no chat template named {name!r} (named templates: {', '.join(sorted(found))})",
                folder=folder,
                tried=[*tried, name],
            )
        return found[name]
    return ChatTemplate._named(found, folder=folder, tried=tried)
