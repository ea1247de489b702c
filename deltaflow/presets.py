"""Model presets: common model names -> their tool and reasoning parsers.

``ResponseParser(model="Qwen/Qwen3-8B")`` picks the parsers an inference
server would use for that model. Lookups ignore case and accept the name
with or without its organization (``"Qwen3-8B"``). Explicit
``tool_parser=`` / ``reasoning_parser=`` arguments override a preset.

The rows live with their dialects: every module of
:mod:`deltaflow.parsers.dialects` holds its family's ``PRESETS``, and the
table is their concatenation in the order of
:data:`deltaflow.parsers.dialects.VENDORS`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .errors import DeltaflowError
from .parsers.dialects import VENDORS

__all__ = ("Preset", "UnknownModelError", "list_presets", "resolve_model")


class UnknownModelError(DeltaflowError, ValueError):
    """A model name with no preset; the message suggests the closest names.

    Attributes:
        model: the name asked for.
        suggestions: the closest known names.
    """

    def __init__(self, model: str, suggestions: list[str]) -> None:
        self.model = model
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(
            f"no preset for model {model!r}{hint} (pass tool_parser= and reasoning_parser= explicitly, "
            "or see deltaflow.presets.list_presets())"
        )


@dataclass(frozen=True)
class Preset:
    """The parsers for one model."""

    model: str
    tool_parser: str | None
    reasoning_parser: str | None


_TABLE: tuple[tuple[str, str | None, str | None], ...] = tuple(row for vendor in VENDORS for row in vendor.PRESETS)
"""Every ``(model, tool_parser, reasoning_parser)`` row: each dialect module's ``PRESETS``, in ``VENDORS`` order."""

_BY_KEY: dict[str, Preset] = {}
for _model, _tool, _reasoning in _TABLE:
    _p = Preset(_model, _tool, _reasoning)
    _BY_KEY[_model.lower()] = _p
    _BY_KEY.setdefault(_model.split("/", 1)[-1].lower(), _p)


def list_presets() -> tuple[Preset, ...]:
    """Every preset, in table order."""
    return tuple(Preset(m, t, r) for m, t, r in _TABLE)


def resolve_model(model: str) -> Preset:
    """Return the preset of ``model``.

    Raises:
        UnknownModelError: no preset (a ``ValueError``); the message suggests close names.
    """
    if not isinstance(model, str):
        raise TypeError(f"model must be a str, got {type(model).__name__}")
    key = model.strip().lower()
    preset = _BY_KEY.get(key) or _BY_KEY.get(key.split("/", 1)[-1])
    if preset is not None:
        return preset
    names = [m for m, _, _ in _TABLE]
    lowered = {n.lower(): n for n in names}
    close = difflib.get_close_matches(key, list(lowered), n=3, cutoff=0.5)
    if not close:
        short = {n.split("/", 1)[-1].lower(): n for n in names}
        close = [short[c] for c in difflib.get_close_matches(key.split("/", 1)[-1], list(short), n=3, cutoff=0.5)]
        raise UnknownModelError(model, close)
    raise UnknownModelError(model, [lowered[c] for c in close])
