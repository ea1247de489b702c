"""Drivers: one module per wire-format family, each the machine that reads one tool block of its format.

A driver is configured by a *format* (its options for one dialect) and built
per block by the dialect's factory; all of them derive from
:class:`~deltaflow.parsers.base.DriverBase`, the one attribution engine
(emit, commit, abort, bounded blanks, end of input). The dialects that use
them are declared in :mod:`deltaflow.parsers.dialects`.

* :mod:`.json_envelope`: a JSON object per call (``{"name", "arguments"}``), or a JSON array of them;
* :mod:`.xml_function`: XML-like, function-first calls with key/value parameters (Qwen3-Coder, GLM, MiniMax-M2, DSML);
* :mod:`.xml_element`: one element per parameter, nested elements typed by the schema (MiniMax-M3);
* :mod:`.tag_per_tool`: a tag per offered tool (coding-agent XML tools, Cline style);
* :mod:`.xtml`: Kimi K3's XTML sections;
* :mod:`.special_tokens`: special-token sections of calls (DeepSeek V3/V3.1, Kimi K2);
* :mod:`.mistral`: ``[TOOL_CALLS]`` in its three generations;
* :mod:`.pythonic`: Python call lists, read without evaluation;
* :mod:`.recipient`: recipient lines (Functionary v3.2);
* :mod:`.harmony`: gpt-oss Harmony channels (a router and a call-body driver).
"""
