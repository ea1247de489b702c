"""Runtime: the synchronous :class:`ResponseParser` / :func:`parse_complete` (and, later, the async shell)."""

from .sync import ResponseParser as ResponseParser
from .sync import accumulate as accumulate
from .sync import parse_complete as parse_complete

__all__ = ("ResponseParser", "accumulate", "parse_complete")
