"""The one answer a look at possibly incomplete text gives: need more, no, or yes.

A driver often asks a question of text that may stop mid-way (does a marker
start here? does this quote close its string? does this value end?). The
answer is a :class:`Verdict`; ``NEED`` always means "the text ends before it
is decided: hold the tail and ask again with more". With ``final=True`` a
look never answers ``NEED``. (:class:`~deltaflow._core.schema.Tentative`
answers a different question with a fourth state, ``WHOLE``, and spells
"need more" the same way.)
"""

from __future__ import annotations

import enum

__all__ = ("NEED", "NO", "YES", "Verdict")


class Verdict(enum.IntEnum):
    """Need more text, no, or yes."""

    NEED = 0
    NO = 1
    YES = 2


NEED = Verdict.NEED
NO = Verdict.NO
YES = Verdict.YES
