"""No super-linear regular expression on model text; pythonic calls and argument JSON are never evaluated.

* Every compiled pattern of deltaflow (module-level ``re.Pattern`` objects, plus
  the per-dialect patterns built at run time, which the end-to-end runs
  exercise) is run on worst-case inputs of 200k characters in a subprocess
  with a 20 s hang guard (not a timing assertion: a backtracking blow-up on
  these inputs takes hours, linear scans take milliseconds).
* A static check: no pattern nests an unbounded quantifier inside another
  (``(a+)*`` shapes), except the reviewed ones listed in ``REVIEWED``.
* ``eval`` / ``exec`` are never called by the library (source grep), and a
  pythonic parse with builtins ``eval``/``exec`` patched to raise surfaces
  hostile calls without running them.
"""

from __future__ import annotations

import builtins
import importlib
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import deltaflow
from deltaflow import parse_complete

ROOT = Path(deltaflow.__file__).parent
SCALE = int(os.environ.get("DELTAFLOW_FUZZ_REGEX_CHARS", "200000"))
HANG_GUARD = 20  # seconds


def _modules() -> list[str]:
    out = []
    for m in pkgutil.walk_packages([str(ROOT)], "deltaflow."):
        if ".server" in m.name or m.name.endswith(("cli", "__main__", "demo")):
            continue
        out.append(m.name)
    return out


def module_patterns() -> dict[str, re.Pattern[str]]:
    found: dict[str, re.Pattern[str]] = {}
    for name in _modules():
        try:
            mod = importlib.import_module(name)
        except ImportError:  # optional dependency
            continue
        for attr, value in vars(mod).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                found[f"{name}.{attr}"] = value
            elif isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(v, re.Pattern) and isinstance(v.pattern, str):
                        found[f"{name}.{attr}[{k!r}]"] = v
    return found


PATTERNS = module_patterns()
SOURCE_PATTERNS = len(re.findall(r"re\.compile\(", "".join(p.read_text() for p in ROOT.rglob("*.py"))))


def test_patterns_found() -> None:
    # Most re.compile calls are module-level; the rest are built per dialect (exercised end to end below).
    assert len(PATTERNS) >= 30, sorted(PATTERNS)
    assert SOURCE_PATTERNS >= len(PATTERNS) - 5


# -- static: nested unbounded quantifiers -------------------------------------------------------------

_NESTED = re.compile(r"\((?:[^()\\]|\\.)*(?:[*+]|\{\d*,\})\)(?:[*+]|\{\d*,\})")
# Reviewed: each repetition of the outer group starts with a literal that the inner class cannot
# match, so there is one way to split any input (linear); the worst-case run below checks it.
REVIEWED = {r"[^\W\d]\w*(?:\.[^\W\d]\w*)*\Z"}


def test_no_nested_unbounded_quantifiers() -> None:
    bad = {k: p.pattern for k, p in PATTERNS.items() if _NESTED.search(p.pattern) and p.pattern not in REVIEWED}
    assert not bad, f"nested unbounded quantifiers (review, then add to REVIEWED): {bad}"


def test_static_check_catches_the_classic_shapes() -> None:
    for evil in (r"(a+)+b", r"(\s*x*)*y", r"(a{1,})*"):
        assert _NESTED.search(evil), evil


# -- worst-case inputs, run in a subprocess with a hang guard -------------------------------------------

_DIRECT = textwrap.dedent(
    """
    import re, sys, time
    sys.path.insert(0, {tests!r})
    from fuzz.test_regex_safety import PATTERNS
    N = {n}
    units = ["a", " ", "\\t", "\\n", "\\\\", "\\\\u00", '"', "<", "<tool_call", "</", "[", "(", "{{", "-1", "1e", "a.", "a:",
             "functions.", "```", "<|", "<｜", "=", "\\\\n", "x=", '"a', "'"]
    t0 = time.monotonic()
    for name, p in sorted(PATTERNS.items()):
        for u in units:
            s = u * (N // len(u))
            for tail in ("", "!", "\\x00"):
                p.match(s + tail)
                p.fullmatch(s + tail)
    print("ok", len(PATTERNS), round(time.monotonic() - t0, 2))
    """
)


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD * 6, cwd=ROOT.parent
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_module_pattern_on_worst_case_inputs() -> None:
    """(anchored match/fullmatch, as the parsers apply them) 200k-character runs of near-matching units (whitespace, escapes, marker prefixes) against every pattern."""
    code = _DIRECT.format(tests=str(Path(__file__).parent.parent), n=SCALE)
    try:
        out = _run(code)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure this test exists for
        pytest.fail("a pattern did not finish on a worst-case input (super-linear backtracking?)")
    assert out.startswith("ok")


_E2E = textwrap.dedent(
    """
    import sys, time
    from deltaflow import parse_complete
    from deltaflow.parsers import registry
    N = {n}
    tools = [{{"type": "function", "function": {{"name": "f", "parameters": {{"type": "object"}}}}}}]
    t0 = time.monotonic()
    for tp in registry.tool_dialect_names():
        d = registry.get_tool_dialect(tp)
        opener = (d.openers or d.start_openers or ("<f>",))[0]
        for unit in (opener[:-1], opener, " ", "\\\\", '"', "<|", "functions.f", "\\\\n", "<parameter=", "```"):
            unit = unit or "<"
            body = unit * max(1, N // len(unit))
            for text in (body, opener + body, opener + '{{"name": "f", "arguments": {{"a": "' + body):
                parse_complete(text, tool_parser=tp, tools=tools)
    print("ok", round(time.monotonic() - t0, 2))
    """
)


def test_every_dialect_end_to_end_on_worst_case_inputs() -> None:
    """Repeated marker prefixes, unterminated strings and long blank runs through every tool dialect."""
    n = int(os.environ.get("DELTAFLOW_FUZZ_E2E_CHARS", "4000"))
    try:
        out = _run(_E2E.format(n=n))
    except subprocess.TimeoutExpired:  # pragma: no cover
        pytest.fail("a dialect did not finish on a worst-case input")
    assert out.startswith("ok")


# -- nothing is evaluated --------------------------------------------------------------------------------

_CALL_RE = re.compile(r"(?<![\w.])(eval|exec)\s*\(")


def test_library_never_calls_eval_or_exec() -> None:
    hits = []
    for path in ROOT.rglob("*.py"):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if _CALL_RE.search(code) and "literal_eval" not in code:
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, hits


HOSTILE = [
    "[f(a=__import__('os').system('echo x'))]",
    "[f(a=eval('1+1'))]",
    "[f(a=(lambda: 1)())]",
    "[f(a=open('/etc/passwd').read())]",
    "[__import__('os').system('echo x')]",
    "[f(**{'a': 1})]",
]


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("tool_parser", ["pythonic", "llama4_pythonic"])
def test_pythonic_is_never_evaluated(text: str, tool_parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("evaluated model output")

    calls: list[str] = []
    real_import = builtins.__import__

    def spy_import(name: str, *a: object, **k: object) -> object:
        if name in ("os", "subprocess"):
            calls.append(name)
        return real_import(name, *a, **k)  # type: ignore[arg-type]

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    # Warm up first: tools are validated by pydantic, imported lazily on first use, and importing
    # it runs exec for its own classes (not model output).
    parse_complete("warm up", tool_parser=tool_parser, tools=tools)
    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    monkeypatch.setattr(os, "system", refuse)
    monkeypatch.setattr(builtins, "__import__", spy_import)
    try:
        m = parse_complete(text, tool_parser=tool_parser, tools=tools)
    finally:
        monkeypatch.setattr(builtins, "__import__", real_import)
    assert "os" not in calls
    for c in m.tool_calls:  # a call may be emitted only with literal arguments
        assert "__import__" not in c.function.arguments and "lambda" not in c.function.arguments
        assert "system" not in c.function.arguments and "open(" not in c.function.arguments
    if not m.tool_calls:
        assert m.content is not None and "__import__" in m.content or "eval" in (m.content or "") or m.content
