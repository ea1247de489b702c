"""Layouts derived from a dialect's declaration, for the formats whose syntax is data.

A JSON-envelope dialect (:class:`~deltaflow.parsers.JsonEnvelopeFormat`) and
an XML-function dialect (:class:`~deltaflow.parsers.drivers.xml_function.XmlFunctionFormat`)
declare every marker of their syntax in their format; how the model's
template lays them out (the blanks between them, which markers are single
tokens) is the dialect's :class:`~deltaflow.parsers.Writing`. This module
builds the :class:`~deltaflow.constrain.layouts.Layout` from those two and
nothing else, so the grammar, the canonical text and the parser read one
declaration, and a new dialect of either format is constrained without an
edit here. The canonical text writes the format's main envelope
(``open``/``close``); its ``variants`` are parsed, not generated. Formats
whose syntax is code (Harmony, Gemma 4, pythonic, ...) keep a written layout
in :mod:`.layouts`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..parsers.drivers.json_envelope import JsonEnvelopeFormat
from ..parsers.drivers.xml_function import XmlFunctionFormat
from ..parsers.spec import ToolDialect, Writing

if TYPE_CHECKING:
    from .._core.toolspec import ToolSpec
    from .layouts import Call, Layout, XmlStyle

__all__ = ("derive_layout", "derivable")

_NO_WRITING = Writing()


def derivable(dialect: ToolDialect) -> bool:
    """Whether the dialect's layout is derived from its declaration (its format's syntax is data)."""
    return isinstance(dialect.format, JsonEnvelopeFormat | XmlFunctionFormat)


def derive_layout(dialect: ToolDialect) -> Layout | None:
    """The dialect's layout, built from its format and its :class:`~deltaflow.parsers.Writing`.

    Returns:
        The layout, or None when the dialect's format is not one whose syntax is data.
    """
    fmt = dialect.format
    w = dialect.writing or _NO_WRITING
    if isinstance(fmt, JsonEnvelopeFormat):
        return _json_envelope(dialect, fmt, w)
    if isinstance(fmt, XmlFunctionFormat):
        if fmt.param_open == "" and fmt.json_body:
            return _xml_json_body(dialect, fmt, w)
        return _xml_function(dialect, fmt, w)
    return None


def _opener(markers: tuple[str, ...], w: Writing) -> str:
    gaps = w.open_gaps
    return "".join(m + (gaps[i] if i < len(gaps) else "") for i, m in enumerate(markers))


def _json_envelope(dialect: ToolDialect, fmt: JsonEnvelopeFormat, w: Writing) -> Layout:
    from .layouts import Call, Json, Layout, js, params

    if w.bare and not fmt.bare_object:
        raise ValueError(f"dialect {dialect.name!r}: Writing(bare=True) needs a format whose block may start bare")
    args_key = fmt.args_fields[0]

    def call(t: ToolSpec) -> Call:
        if fmt.name_keyed:
            return Call("{" + js(t.name) + ": ", (Json(params(t)),), "}")
        return Call(f'{{"{fmt.name_field}": {js(t.name)}, "{args_key}": ', (Json(params(t)),), "}")

    opener = "" if w.bare else _opener(fmt.open, w)
    closer = "" if w.bare or fmt.close is None else w.close_gap + fmt.close
    if fmt.array:
        return Layout(
            call=call,
            trigger="[" if w.bare else fmt.open[0],
            prefix=opener + "[",
            suffix="]" + closer + w.after_close,
            separator=w.separator,
            multi=not w.one_call,
            atomic=w.atomic,
        )

    def envelope(t: ToolSpec) -> Call:
        c = call(t)
        return Call(opener + c.begin, c.body, c.end + closer + w.after_close)

    trigger = f'{{"{fmt.name_field}": ' if w.bare else fmt.open[0]
    return Layout(
        call=envelope,
        trigger=trigger,
        separator=w.separator,
        multi=not w.one_call,
        atomic=w.atomic,
        legacy=True,  # one JSON object between fixed texts: XGrammar's begin/schema/end structure
    )


def _call_tag(fmt: XmlFunctionFormat, name: str) -> str:
    if fmt.name_style == "equals":
        return f"{fmt.call_open}{name}>"
    if fmt.name_style == "attr":
        return f'{fmt.call_open} name="{name}">'
    return name  # bare: the name follows the block opener


def _xml_style(fmt: XmlFunctionFormat, w: Writing) -> XmlStyle:
    from .layouts import XmlStyle

    def open_(key: str, kind: str) -> str:
        if fmt.key_style == "equals":
            return f"{fmt.param_open}{key}{fmt.key_end}"
        if fmt.key_style == "attr":
            typed = f' {fmt.type_attr}="{"true" if kind == "string" else "false"}"' if fmt.type_attr else ""
            return f'{fmt.param_open} name="{key}"{typed}{fmt.key_end}'
        return f"{fmt.param_open}{key}{fmt.key_end}{w.key_gap}{fmt.value_open or ''}"

    end = fmt.call_close or fmt.block_close or ""
    if fmt.cdata:
        excludes: tuple[str, ...] = ()
    else:
        # where the driver would end a raw value: the next parameter (when it ends values) and the call's end
        ends_value = fmt.open_ends_value or fmt.key_style == "text"
        excludes = (*((fmt.param_open,) if ends_value else ()), *((end,) if end else ()))
    return XmlStyle(
        open=open_,
        close=fmt.value_close,
        after=w.param_gap,
        wrap="\n" if fmt.strip in ("each", "paired") else "",
        excludes=excludes,
        xgrammar_style=w.xgrammar,
        cdata=fmt.cdata,
    )


def _xml_function(dialect: ToolDialect, fmt: XmlFunctionFormat, w: Writing) -> Layout:
    from .layouts import Call, Layout, Xml, params

    style = _xml_style(fmt, w)
    block_open = fmt.block_open or ""
    block_close = fmt.block_close or ""
    per_call = w.block_per_call or fmt.call_open is None
    call_close = fmt.call_close + w.call_gap if fmt.call_close else ""

    def begin(name: str) -> str:
        head = block_open + w.block_gap if per_call else ""
        return head + _call_tag(fmt, name) + w.name_gap

    def call(t: ToolSpec) -> Call:
        return Call(begin(t.name), (Xml(params(t), style, t.name, dialect.name),),
                    call_close + (block_close if per_call else ""))

    trigger = block_open or dialect.openers[0]
    if per_call or not block_open:
        return Layout(call=call, trigger=trigger, separator=w.separator, multi=not w.one_call, atomic=w.atomic)
    return Layout(
        call=call,
        trigger=trigger,
        prefix=block_open + w.block_gap,
        suffix=block_close,
        separator=w.separator,
        multi=not w.one_call,
        atomic=w.atomic,
    )


def _xml_json_body(dialect: ToolDialect, fmt: XmlFunctionFormat, w: Writing) -> Layout:
    from .layouts import Call, Json, Layout, params

    make: Callable[[ToolSpec], Call] = lambda t: Call(  # noqa: E731
        _call_tag(fmt, t.name) + w.name_gap, (Json(params(t)),), (fmt.call_close or "") + w.call_gap
    )
    return Layout(call=make, trigger=dialect.openers[0], separator=w.separator, multi=not w.one_call,
                  atomic=w.atomic, legacy=True)
