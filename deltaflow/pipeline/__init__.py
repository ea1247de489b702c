"""Runtime: the synchronous :class:`ResponseParser` / :func:`parse_complete` and the async :class:`Pipeline`."""

from .chain import SyncChain as SyncChain
from .runner import AsyncStage as AsyncStage
from .runner import DeltaStream as DeltaStream
from .runner import Pipeline as Pipeline
from .runner import stream as stream
from .sync import ResponseParser as ResponseParser
from .sync import accumulate as accumulate
from .sync import default_stage_factories as default_stage_factories
from .sync import default_stages as default_stages
from .sync import parse_complete as parse_complete

__all__ = (
    "AsyncStage",
    "DeltaStream",
    "Pipeline",
    "ResponseParser",
    "SyncChain",
    "accumulate",
    "default_stage_factories",
    "default_stages",
    "parse_complete",
    "stream",
)
