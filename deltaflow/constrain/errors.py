"""The request side's errors (re-exported by :mod:`deltaflow.constrain` and :mod:`deltaflow`)."""

from __future__ import annotations

from ..errors import DeltaflowError

__all__ = ("ToolChoiceError", "UnsupportedConstraintError")


class ToolChoiceError(DeltaflowError, ValueError):
    """An invalid ``tool_choice`` (unknown form, or a function not among the tools)."""


class UnsupportedConstraintError(DeltaflowError, ValueError):
    """The dialect cannot express the requested constraint (the message names the dialect and why)."""
