"""Validation of a request's ``tools`` at the edge (pydantic lives here only).

Accepted forms, per entry:

* OpenAI: ``{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}``
* Anthropic: ``{"name": ..., "description": ..., "input_schema": {...}}``
* a bare function object: ``{"name": ..., "parameters": {...}}``

:class:`ToolSpec` itself is defined in the pydantic-free
:mod:`deltaflow._core.toolspec` (re-exported here unchanged), and pydantic
is imported on the first call of :func:`normalize_tools` that validates an
entry, so importing deltaflow, its parsers and its stages does not import
pydantic.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._core.toolspec import ToolSpec
from .errors import ToolSpecError

if TYPE_CHECKING:
    import pydantic

__all__ = ("ToolSpec", "normalize_tools")

_NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
_ACCEPTED = (
    'accepted forms: OpenAI {"type": "function", "function": {"name", "parameters"}}, '
    'Anthropic {"name", "input_schema"}, or a bare {"name", "parameters"}'
)


def _check_tool_name(v: str) -> str:
    if not _NAME_RE.match(v):
        raise ValueError("must be 1 to 128 characters of letters, digits, '_', '-', '.' or ':'")
    return v


def _describe(err: pydantic.ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "<entry>"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


@functools.cache
def _validator() -> Callable[[int, Mapping[str, Any]], ToolSpec]:
    """The validator of one mapping entry, built (and pydantic imported) on first use."""
    import pydantic

    class _Function(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        name: str
        description: str | None = None
        parameters: dict[str, Any] | None = None

        @pydantic.field_validator("name")
        @classmethod
        def _check_name(cls, v: str) -> str:
            return _check_tool_name(v)

    class _OpenAITool(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        type: str = "function"
        function: _Function

        @pydantic.field_validator("type")
        @classmethod
        def _check_type(cls, v: str) -> str:
            if v != "function":
                raise ValueError(f"'type' must be 'function', got {v!r}")
            return v

    class _AnthropicTool(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        name: str
        description: str | None = None
        input_schema: dict[str, Any]
        type: str | None = None

        @pydantic.field_validator("name")
        @classmethod
        def _check_name(cls, v: str) -> str:
            return _check_tool_name(v)

    def validate(i: int, entry: Mapping[str, Any]) -> ToolSpec:
        try:
            if "function" in entry:
                f = _OpenAITool.model_validate(entry).function
                return ToolSpec(name=f.name, description=f.description, parameters=f.parameters or {})
            if "input_schema" in entry:
                an = _AnthropicTool.model_validate(entry)
                return ToolSpec(name=an.name, description=an.description, parameters=an.input_schema)
            if "name" in entry:
                bare = _Function.model_validate(entry)
                return ToolSpec(name=bare.name, description=bare.description, parameters=bare.parameters or {})
        except pydantic.ValidationError as exc:
            fn = entry.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else entry.get("name")
            label = f" ({name!r})" if isinstance(name, str) else ""
            raise ToolSpecError(f"tools[{i}]{label} is invalid: {_describe(exc)}; {_ACCEPTED}", index=i) from None
        raise ToolSpecError(f"tools[{i}] has none of 'function', 'input_schema' or 'name'; {_ACCEPTED}", index=i)

    return validate


def _one(i: int, entry: Any) -> ToolSpec:
    if isinstance(entry, ToolSpec):
        return entry
    if not isinstance(entry, Mapping):
        raise ToolSpecError(f"tools[{i}] must be an object, got {type(entry).__name__}; {_ACCEPTED}", index=i)
    return _validator()(i, entry)


def normalize_tools(tools: Iterable[Any] | None) -> tuple[ToolSpec, ...] | None:
    """Validate a request's ``tools`` list and return it as :class:`ToolSpec` s.

    Args:
        tools: a list of OpenAI or Anthropic tool definitions, or None.

    Returns:
        A tuple of specs, or None when ``tools`` is None.

    Raises:
        ToolSpecError: an entry is not a valid tool (the message names its
            index and what is accepted), or two tools share a name.
    """
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise ToolSpecError(f"tools must be a list of tool definitions, got {type(tools).__name__}")
    specs = tuple(_one(i, t) for i, t in enumerate(tools))
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s.name in seen:
            raise ToolSpecError(f"tools[{i}]: duplicate tool name {s.name!r}", index=i)
        seen.add(s.name)
    return specs
