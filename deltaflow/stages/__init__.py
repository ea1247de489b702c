"""The stages of the pipeline, each a small sans-IO transducer (no I/O, no anyio).

Every stage has a ``name`` and two methods: ``feed(item) -> list`` and
``finish() -> list`` (the input ended: release what is held).
"""

from ._protocol import Stage as Stage
from .assembler import DeltaAssembler as DeltaAssembler
from .identity import IdentityFirstBuffer as IdentityFirstBuffer
from .name_filter import NameFilter as NameFilter
from .reasoning import ReasoningSplitter as ReasoningSplitter
from .tool_feeder import ToolBlockFeeder as ToolBlockFeeder

__all__ = (
    "DeltaAssembler",
    "IdentityFirstBuffer",
    "NameFilter",
    "ReasoningSplitter",
    "Stage",
    "ToolBlockFeeder",
)
