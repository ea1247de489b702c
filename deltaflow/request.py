"""Compatibility module: the request side moved to :mod:`deltaflow.constrain`.

``from deltaflow.request import prepare_request`` (and the other names below)
keeps working; new code imports from :mod:`deltaflow.constrain` (or from
:mod:`deltaflow`, which re-exports the main names).
"""

from __future__ import annotations

from .constrain import (
    PreparedRequest,
    ToolChoiceError,
    ToolConstraint,
    UnsupportedConstraintError,
    prepare_request,
    render_tool_calls,
    supported_constraint_dialects,
    unconstrainable_dialects,
)

__all__ = (
    "PreparedRequest",
    "ToolChoiceError",
    "ToolConstraint",
    "UnsupportedConstraintError",
    "prepare_request",
    "render_tool_calls",
    "supported_constraint_dialects",
    "unconstrainable_dialects",
)
