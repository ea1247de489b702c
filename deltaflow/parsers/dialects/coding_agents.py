"""Coding agents (Cline, Roo Code, Kilo Code): the ``xml_tools`` tag protocol, for any model family.

Facts (shared/dialects.md section 13, dialects.json ``cline``):

* A prompt-level protocol, so any model family may write it, on top of its
  own reasoning markers: pair ``tool_parser="xml_tools"`` with the family's
  ``reasoning_parser``. Cline's ``<thinking>`` is prose, not a channel, and
  stays in the content (no reasoning parser is registered for it).
* ``<TOOL><param>raw text</param>...</TOOL>``; tool and parameter names are a
  closed list: here, the request's tools and their schema properties. Any
  other tag is plain text. Values are trimmed strings.
* ``write_to_file``'s ``content`` runs to the last ``</content>`` before
  ``</write_to_file>``. This dialect applies that rule to every parameter
  named ``content`` or ``diff`` (``replace_in_file``'s SEARCH/REPLACE blocks
  may quote file text as well), for any tool.
* Cline allows one tool per message; deltaflow emits every call (as with
  parallel tool calling enabled).
* Atomic markers: none; every tag is split text in every tokenizer.

The openers depend on the request: ``<NAME>`` for each offered tool, given
by :meth:`~deltaflow.parsers.drivers.tag_per_tool.TagPerToolFormat.request_openers`
through ``ToolDialect.openers_for``; without tools there are none and all
text is content.

Token prefixes: the only declared opener, ``<``, is one character and has no
proper prefix, so ``token_prefixes`` is empty. Tags are plain text, so *any*
prefix of ``<TOOL>``, ``<param>``, ``</param>`` or ``</TOOL>`` can end a token;
the driver holds every partial tag itself, in both chunking modes.
"""

from __future__ import annotations

from ..declare import declare
from ..drivers.tag_per_tool import TagPerToolFormat

__all__ = ("PRESETS", "XML_TOOLS")


XML_TOOLS = declare(
    "xml_tools", TagPerToolFormat(),
    description="coding-agent tags (Cline style): <TOOL><param>raw text</param></TOOL>, names from the request's tools",
    families=("any model prompted with Cline / Roo Code / Kilo Code XML tool use",),
)

PRESETS: tuple[tuple[str, str | None, str | None], ...] = ()
