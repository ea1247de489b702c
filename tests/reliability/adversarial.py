"""Adversarial model outputs for the memory-bound tests and the ``benchmarks/memory_bounds.py`` benchmark.

Each case is a head (fed once) followed by a unit repeated until the stream
reaches the requested size, fed in 4 KB chunks through a
:class:`~deltaflow.ResponseParser` while ``tracemalloc`` records the peak of
what stays allocated. A case is either ``"streams"`` (the parser may hold only
a marker prefix or a short tail: the peak must not grow with the input) or
``"held"`` (a value that needs whole conversion: the peak may grow linearly,
bounded by a small multiple of the input).
"""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import dataclass
from typing import Any

from deltaflow import ResponseParser

__all__ = ("CASES", "CHUNK", "TOOLS", "VIOLATIONS", "Case", "Measure", "measure", "within_bound")

CHUNK = 4096

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "q": {"type": "string"},
                    "n": {"type": "integer"},
                    "obj": {"type": "object"},
                },
            },
        },
    }
]


@dataclass(frozen=True)
class Case:
    """One adversarial stream shape for one dialect."""

    name: str
    tool_parser: str | None
    reasoning_parser: str | None
    head: str
    unit: str
    kind: str  # "streams" or "held"
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.tool_parser or '-'}:{self.name}"


@dataclass(frozen=True)
class Measure:
    """What one run measured (bytes)."""

    input_bytes: int
    peak_bytes: int
    retained_bytes: int
    deltas: int


def measure(case: Case, size: int, *, chunk: int = CHUNK) -> Measure:
    """Feed ``case`` up to ``size`` characters in ``chunk``-sized pieces; measure the tracemalloc peak."""
    reps = max(1, (size - len(case.head)) // len(case.unit))
    body = case.unit * ((chunk // len(case.unit)) + 1)
    # Pre-build the chunk texts lazily from a window so the input itself is never allocated whole.
    window = case.head + case.unit * reps
    total = len(window)
    del window
    parser = ResponseParser(case.tool_parser, case.reasoning_parser, TOOLS)
    gc.collect()
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    deltas = 0
    pos = 0
    head = case.head
    period = len(case.unit)
    while pos < total:
        n = min(chunk, total - pos)
        if pos < len(head):
            text = (head + body)[pos : pos + n]
        else:
            off = (pos - len(head)) % period
            text = body[off : off + n]
            if len(text) < n:  # body shorter than the chunk + offset: rebuild
                text = (case.unit * (n // period + 2))[off : off + n]
        pos += n
        deltas += len(parser.feed(text))
    retained, _ = tracemalloc.get_traced_memory()
    deltas += len(parser.feed("", final=True, finish_reason="stop"))
    _, peak = tracemalloc.get_traced_memory()
    if not was:
        tracemalloc.stop()
    return Measure(input_bytes=total, peak_bytes=peak - base, retained_bytes=retained - base, deltas=deltas)


X = "x"
ARG_JSON_FIELD = {"llama3_json": "parameters", "internlm": "parameters"}


def _cases() -> list[Case]:
    out: list[Case] = []

    def add(tp: str | None, rp: str | None, name: str, head: str, unit: str, kind: str, note: str = "") -> None:
        out.append(Case(name, tp, rp, head, unit, kind, note))

    # -- JSON envelope family ------------------------------------------------------
    for tp, opener, field in (
        ("hermes", "<tool_call>\n", "arguments"),
        ("internlm", "<|action_start|><|plugin|>\n", "parameters"),
        ("llama3_json", "<|python_tag|>", "parameters"),
    ):
        rp = "qwen3" if tp == "hermes" else None
        add(tp, rp, "open-string-arg", f'{opener}{{"name": "search", "{field}": {{"q": "', X, "streams")
        add(tp, rp, "open-name", f'{opener}{{"name": "', X, "held", "a name is held whole (name filter)")
        add(tp, rp, "open-number-arg", f'{opener}{{"name": "search", "{field}": {{"n": 1', "1", "held",
            "a partial number is held")
        add(tp, rp, "whitespace-in-block", f'{opener}{{"name": "search", "{field}": {{', " ", "streams")
        add(tp, rp, "opener-prefix-repeat", "", opener.strip()[:-1] + X, "streams")
        add(tp, rp, "open-key-in-args", f'{opener}{{"name": "search", "{field}": {{"', X, "held",
            "an object key is held whole")
        add(tp, rp, "stringified-args", f'{opener}{{"name": "search", "{field}": "{{\\"q\\": \\"', X, "held",
            "arguments written as a JSON string are decoded whole")
    add("hermes", "qwen3", "unclosed-reasoning", "<think>", X, "streams")
    add("hermes", "qwen3", "reasoning-end-prefix-repeat", "<think>", "</think" + X, "streams")
    add("hermes", "qwen3", "closer-prefix-repeat-in-string", '<tool_call>\n{"name": "search", "arguments": {"q": "',
        "</tool_call" + X, "streams")

    # -- Mistral / pythonic ------------------------------------------------------------
    add("mistral", "mistral", "open-string-arg", '[TOOL_CALLS]search[ARGS]{"q": "', X, "streams")
    add("mistral", "mistral", "open-name", "[TOOL_CALLS]", X, "held", "a name is held whole (name filter)")
    add("mistral", "mistral", "stringified-args", '[TOOL_CALLS]search[ARGS]"{\\"q\\": \\"', X, "held",
        "arguments written as a JSON string are decoded whole")
    add("mistral", "mistral", "opener-prefix-repeat", "", "[TOOL_CALL" + X, "streams")
    add("mistral", "mistral", "unclosed-reasoning", "[THINK]", X, "streams")
    for tp, opener in (("pythonic", ""), ("llama4_pythonic", "<|python_start|>")):
        add(tp, None, "open-string-arg", f'{opener}[search(q="', X, "held", "a keyword value is held until it ends")
        add(tp, None, "open-name", f"{opener}[", X, "held", "a name is held whole (name filter)")
        add(tp, None, "opener-prefix-repeat", "", "<|python_star" + X, "streams")

    # -- special-token families -------------------------------------------------------
    ds_call = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
    add("deepseek_v3", "deepseek_r1", "open-string-arg",
        ds_call + 'function<｜tool▁sep｜>search\n```json\n{"q": "', X, "streams")
    add("deepseek_v3", "deepseek_r1", "opener-prefix-repeat", "", "<｜tool▁calls▁beg" + X, "streams")
    add("deepseek_v3", "deepseek_r1", "unclosed-reasoning", "<think>", X, "streams")
    add("deepseek_v31", "deepseek_v3", "open-string-arg", ds_call + 'search<｜tool▁sep｜>{"q": "', X, "streams")
    add("deepseek_v31", "deepseek_v3", "open-name", ds_call, X, "held", "a name is held whole (name filter)")
    add("deepseek_v31", "deepseek_v3", "opener-prefix-repeat", "", "<｜tool▁calls▁beg" + X, "streams")
    add("kimi_k2", "kimi_k2", "open-string-arg",
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{"q": "', X,
        "streams")
    add("kimi_k2", "kimi_k2", "open-name", "<|tool_calls_section_begin|><|tool_call_begin|>functions.", X, "held",
        "a name is held whole (name filter)")
    add("kimi_k2", "kimi_k2", "opener-prefix-repeat", "", "<|tool_calls_sec" + X, "streams")
    add("kimi_k2", "kimi_k2", "unclosed-reasoning", "<think>", X, "streams")

    # -- DSML / XML function-first ---------------------------------------------------------
    dsml = '<｜DSML｜function_calls>\n<｜DSML｜invoke name="search">\n'
    add("deepseek_v32", "deepseek_r1", "open-string-param",
        dsml + '<｜DSML｜parameter name="q" string="true">', X, "streams")
    add("deepseek_v32", "deepseek_r1", "open-typed-param", dsml + '<｜DSML｜parameter name="n" string="false">', "1",
        "held", "a typed value is converted whole")
    add("deepseek_v32", "deepseek_r1", "opener-prefix-repeat", "", "<｜DSML｜function_cal" + X, "streams")
    for tp, rp, block in (
        ("qwen3_coder", "qwen3", "<tool_call>\n<function=search>\n"),
        ("seed_oss", "seed_oss", "<seed:tool_call>\n<function=search>\n"),
    ):
        add(tp, rp, "open-string-param", block + "<parameter=q>\n", X, "streams")
        add(tp, rp, "open-typed-param", block + "<parameter=n>\n", "1", "held", "a typed value is converted whole")
        add(tp, rp, "open-object-param", block + "<parameter=obj>\n{", " ", "held", "a typed value is converted whole")
        add(tp, rp, "blank-typed-param", block + "<parameter=obj>\n", " ", "held", "a typed value is converted whole")
        add(tp, rp, "closer-prefix-repeat-in-string", block + "<parameter=q>\n", "</paramete" + X, "streams")
        add(tp, rp, "open-function-name", block.split("<function=")[0] + "<function=", X, "streams",
            "a header longer than the longest offered name + 64 is no call: surfaced as it comes")
        add(tp, rp, "opener-prefix-repeat", "", block.split("\n")[0][:-1] + X, "streams")
    add("seed_oss", "seed_oss", "unclosed-reasoning", "<seed:think>", X, "streams")
    add("minimax_m2", "minimax_m2", "open-string-param",
        '<minimax:tool_call>\n<invoke name="search">\n<parameter name="q">', X, "streams")
    add("minimax_m2", "minimax_m2", "open-typed-param",
        '<minimax:tool_call>\n<invoke name="search">\n<parameter name="n">', "1", "held",
        "a typed value is converted whole")
    add("minimax_m2", "minimax_m2", "opener-prefix-repeat", "", "<minimax:tool_cal" + X, "streams")
    add("minimax_m2", "minimax_m2", "open-invoke-name", '<minimax:tool_call>\n<invoke name="', X, "streams",
        "a header longer than the longest offered name + 64 is no call: surfaced as it comes")
    add("deepseek_v32", "deepseek_r1", "open-invoke-name", '<｜DSML｜function_calls>\n<｜DSML｜invoke name="', X,
        "streams", "a header longer than the longest offered name + 64 is no call: surfaced as it comes")
    add("qwen3_coder", "qwen3", "blank-run-before-typed-value", "<tool_call>\n<function=search>\n<parameter=n>\n", " ",
        "held", "a typed value is converted whole (a blank run is checked once, not rescanned per chunk)")
    add("hermes", "qwen3", "huge-number-arg", '<tool_call>\n{"name": "search", "arguments": {"n": -1', "7", "streams",
        "a number is held up to MAX_NUMBER characters; the rest is surfaced as content")
    for tp in ("glm45", "glm47"):
        add(tp, "glm45", "open-string-param", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>", X, "streams")
        add(tp, "glm45", "open-typed-param", "<tool_call>search\n<arg_key>n</arg_key>\n<arg_value>", "1", "held",
            "a typed value is converted whole")
        add(tp, "glm45", "open-key", "<tool_call>search\n<arg_key>", X, "held", "a key is held whole")
        add(tp, "glm45", "open-name", "<tool_call>", X, "held", "a name is held whole (name filter)")
        add(tp, "glm45", "opener-prefix-repeat", "", "<tool_ca" + X, "streams")
    add("glm45", "glm45", "unclosed-reasoning", "<think>", X, "streams")

    # -- Harmony ----------------------------------------------------------------------
    add("openai", "openai_gptoss", "open-string-arg",
        '<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"q": "', X, "streams")
    add("openai", "openai_gptoss", "unclosed-reasoning", "<|channel|>analysis<|message|>", X, "streams")
    add("openai", "openai_gptoss", "unclosed-final", "<|channel|>final<|message|>", X, "streams")
    add("openai", "openai_gptoss", "open-header", "<|channel|>commentary to=functions.", X, "held",
        "a header is held whole")
    add("openai", "openai_gptoss", "marker-prefix-repeat", "<|channel|>final<|message|>", "<|en" + X, "streams")

    # -- tag-per-tool (Cline style) -------------------------------------------------------
    add("xml_tools", None, "open-string-param", "<search>\n<q>", X, "streams")
    add("xml_tools", None, "opener-prefix-repeat", "", "<searc" + X, "streams")
    add("xml_tools", None, "closer-prefix-repeat-in-param", "<search>\n<q>", "</" + X, "streams")

    # -- Gemma 4 and prose reasoning markers (Granite) ---------------
    g4 = "<|tool_call>call:search{"
    add("gemma4", None, "open-string-arg", g4 + 'q:<|"|>', X, "streams")
    add("gemma4", None, "open-name", "<|tool_call>call:", X, "held", "a name is held whole (name filter)")
    add("gemma4", None, "open-key", g4, X, "held", "an object key is held whole")
    add("gemma4", None, "open-scalar-arg", g4 + "n:", "1", "held", "a bare scalar is converted whole")
    add("gemma4", None, "opener-prefix-repeat", "", "<|tool_cal" + X, "streams")
    add("gemma4", None, "closer-prefix-repeat-in-string", g4 + 'q:<|"|>', "<tool_call" + X, "streams")
    add("gemma4", None, "whitespace-in-block", g4, " ", "streams")
    add("gemma4", "gemma4", "unclosed-reasoning", "<|channel>thought\n", X, "streams")
    add("gemma4", "gemma4", "reasoning-end-prefix-repeat", "<|channel>", "<channel" + X, "streams")
    add("gemma4", "gemma4", "channel-prefix-repeat-in-content", "<|channel><channel|>", "<|channe" + X, "streams")
    add("hunyuan_a13b", "hunyuan_a13b", "answer-closer-prefix-repeat", "<think>\nr\n</think>\n<answer>\n",
        "\n</answer" + X, "streams")
    add("ernie45", "ernie45", "blanks-before-response", "r</think>", " ", "streams",
        "blank beyond the opener's length gives the wrapper up")
    add(None, "granite", "unclosed-reasoning", "Here is my thought process:", X, "streams")
    add(None, "granite", "reasoning-end-prefix-repeat",
        "Here is my thought process:", "Here is my respons" + X, "streams")

    # -- insignificant whitespace inside an open block, in every family ----------------------
    for tp, rp, head in (
        ("mistral", "mistral", "[TOOL_CALLS]search[ARGS]{"),
        ("pythonic", None, "[search("),
        ("deepseek_v31", "deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"),
        ("kimi_k2", "kimi_k2",
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{"),
        ("qwen3_coder", "qwen3", "<tool_call>\n<function=search>\n<parameter=q>\na\n</parameter>\n"),
        ("glm47", "glm45", "<tool_call>search<arg_key>q</arg_key><arg_value>a</arg_value>"),
        ("openai", "openai_gptoss", "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"),
    ):
        add(tp, rp, "whitespace-in-block", head, " ", "streams")

    # -- LFM2, OLMo 3, Step3, Step-3.5, Ling 3, DeepSeek-V4 ---------------
    lfm2 = "<|tool_call_start|>"
    add("lfm2", None, "open-string-arg", lfm2 + '[search(q="', X, "held", "a keyword value is held until it ends")
    add("lfm2", None, "open-json-arg", lfm2 + '[{"name": "search", "arguments": {"q": "', X, "streams")
    add("lfm2", None, "blanks-after-quote", lfm2 + "[search(q='a'", " ", "held",
        "a keyword value is held until it ends")
    add("lfm2", None, "opener-prefix-repeat", "", "<|tool_call_sta" + X, "streams")
    add("olmo3", None, "open-string-arg", '<function_calls>search(q="', X, "held",
        "a keyword value is held until it ends")
    add("olmo3", None, "opener-prefix-repeat", "", "<function_call" + X, "streams")
    step3 = '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="search">'
    add("step3", None, "open-string-param", step3 + '<steptml:parameter name="q">', X, "streams")
    add("step3", None, "open-typed-param", step3 + '<steptml:parameter name="n">', "1", "held",
        "a typed value is converted whole")
    add("step3", None, "opener-prefix-repeat", "", "<｜tool_calls_beg" + X, "streams")
    add("step3p5", None, "open-string-param", "<tool_call>\n<function=search>\n<parameter=q>\n", X, "streams")
    add("step3p5", None, "opener-prefix-repeat", "", "<tool_cal" + X, "streams")
    add("ling3", None, "open-string-param", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>", X, "streams")
    add("ling3", None, "opener-prefix-repeat", "", "<tool_ca" + X, "streams")
    dsml4 = '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="search">\n'
    add("deepseek_v4", None, "open-string-param", dsml4 + '<｜DSML｜parameter name="q" string="true">', X, "streams")
    add("deepseek_v4", None, "opener-prefix-repeat", "", "<｜DSML｜tool_cal" + X, "streams")

    # -- JSON-array family ------------------------------------------------------
    for tp, opener, prefix in (
        ("granite", "<|tool_call|>[", "<tool_cal"),
        ("granite4", "<tool_call>", "<tool_cal"),
        ("granite-20b-fc", "<function_call> ", "<function_cal"),
        ("hunyuan_a13b", "<tool_calls>[", "<tool_call"),
        ("ernie45", "<tool_call>\n", "<tool_cal"),
        ("xlam", "```json\n[", "[TOOL_CALL"),
        ("jamba", "<tool_calls>[", "<tool_call"),
        ("apriel", "<tool_calls>[", "<tool_call"),
        ("nemotron", "<TOOLCALL>[", "<TOOLCAL"),
        ("phi4_mini_json", "functools[", "functool"),
        ("firefunction_v2", "functools[", "functool"),
        ("longcat", "<longcat_tool_call>", "<longcat_tool_cal"),
        ("gigachat3", "<|message_sep|>\n\nfunction call<|role_sep|>\n", "<|function_cal"),
    ):
        add(tp, None, "open-string-arg", f'{opener}{{"name": "search", "arguments": {{"q": "', X, "streams")
        add(tp, None, "opener-prefix-repeat", "", prefix + X, "streams")
        add(tp, None, "whitespace-in-block", f'{opener}{{"name": "search", "arguments": {{', " ", "streams")
    add("apertus", None, "open-string-arg", '<|tools_prefix|>[{"search": {"q": "', X, "streams")
    add("apertus", None, "opener-prefix-repeat", "", "<|tools_prefi" + X, "streams")
    add("apertus", None, "open-name", '<|tools_prefix|>[{"', X, "held", "a name is held whole (name filter)")
    add("qwen3_coder", None, "blanks-after-header", "<tool_call>\n<function=search>", " ", "streams",
        "blanks after a call header are held up to 256; a longer run means no call")
    add("minimax_m2", None, "blanks-after-call", '<minimax:tool_call>\n<invoke name="search">\n</invoke>', " ",
        "streams", "blanks after a call are held up to 256; a longer run ends the block")
    add("command_r7b", None, "open-string-arg", '<|START_ACTION|>[{"tool_name": "search", "parameters": {"q": "', X,
        "streams")
    add("command_r7b", None, "opener-prefix-repeat", "", "<|START_ACTIO" + X, "streams")
    add("command_r7b", None, "open-name", '<|START_ACTION|>[{"tool_name": "', X, "held",
        "a name is held whole (name filter)")
    add("hunyuan_a13b", None, "blanks-between-elements", '<tool_calls>[{"name": "search", "arguments": {}}', " ",
        "streams", "blanks after an array element are held up to 256; a longer run is raw text of the last call")
    add("ernie45", None, "blanks-after-closer", '<tool_call>{"name": "search", "arguments": {}}</tool_call>', " ",
        "streams")

    # -- Kimi K3 XTML ----------------------------------------------------------
    k3 = '<|open|>tools<|sep|><|open|>call tool="search" index="1"<|sep|>'
    add("kimi_k3", "kimi_k3", "open-string-arg", k3 + '<|open|>argument key="q" type="string"<|sep|>', X, "streams")
    add("kimi_k3", "kimi_k3", "open-typed-arg", k3 + '<|open|>argument key="obj" type="object"<|sep|>{"a": ', X,
        "held", "an object value is converted whole")
    add("kimi_k3", None, "opener-prefix-repeat", "", "<|open|>too" + X, "streams")
    add("kimi_k3", "kimi_k3", "whitespace-in-block", k3, " ", "streams")
    add("kimi_k3", "kimi_k3", "unclosed-reasoning", "", X, "streams")

    # -- MiniCPM5, MiniMax-M3 ------------------------------------------------------
    cpm = '<function name="search">'
    add("minicpm5", None, "open-string-param", cpm + '<param name="q">', X, "streams")
    add("minicpm5", None, "open-cdata-param", cpm + '<param name="q"><![CDATA[', X, "streams")
    add("minicpm5", None, "open-typed-param", cpm + '<param name="n">', "1", "held", "a typed value is converted whole")
    add("minicpm5", None, "opener-prefix-repeat", "", "<functio" + X, "streams")
    add("minicpm5", None, "whitespace-in-call", cpm, " ", "streams")
    mm = "]<]minimax[>["
    m3 = f'{mm}<tool_call>\n{mm}<invoke name="search">'
    add("minimax_m3", "minimax_m3", "open-string-param", m3 + f"{mm}<q>", X, "streams")
    add("minimax_m3", "minimax_m3", "open-typed-param", m3 + f"{mm}<n>", "1", "held",
        "a typed value is converted whole")
    add("minimax_m3", "minimax_m3", "open-object-param", m3 + f"{mm}<obj>{mm}<a>", X, "streams")
    add("minimax_m3", None, "opener-prefix-repeat", "", f"{mm}<tool_ca" + X, "streams")
    add("minimax_m3", None, "whitespace-in-block", m3, " ", "streams")
    add("minimax_m3", "minimax_m3", "unclosed-reasoning", "", X, "streams")

    # -- Functionary v3.1, Command R+ -------------------------------------------
    add("functionary_v3_1", None, "open-string-arg", '<function=search>{"q": "', X, "streams")
    add("functionary_v3_1", None, "opener-prefix-repeat", "", "<functio" + X, "streams")
    add("functionary_v3_1", None, "blanks-after-header", "<function=search>", " ", "streams",
        "blanks after a call header are held up to 256; a longer run means no call")
    add("command_r_plus", None, "open-string-arg", 'Action:\n```json\n[{"tool_name": "search", "parameters": {"q": "',
        X, "streams")
    add("command_r_plus", None, "opener-prefix-repeat", "", "Action" + X, "streams")
    add("command_r_plus", None, "open-name", 'Action:\n```json\n[{"tool_name": "', X, "held",
        "a name is held whole (name filter)")
    add("functionary_v3_2", None, "open-string-arg", 'search\n{"q": "', X, "streams")
    add("functionary_v3_2", None, "content", "all\n", X, "streams")
    add("functionary_v3_2", None, "opener-prefix-repeat", "all\n", ">>" + X, "streams")
    add("functionary_v3_2", None, "long-first-line", "", X, "streams",
        "a first line longer than the longest offered name plus 16 is content")
    add("functionary_v3_2", None, "blanks-after-call", 'search\n{"q": "a"}', " ", "streams",
        "blanks after a call are held up to 256; a longer run is content")

    # -- no tool parser ---------------------------------------------------------------------
    add(None, "qwen3", "reasoning-start-prefix-repeat", "", "<thin" + X, "streams")
    return out


CASES: list[Case] = _cases()

#: Cases whose measured peak breaks the documented bound (see the report in the test module).
#: None now: whitespace inside an open block streams in every family (the JSON scanner's safe
#: position moves over it; a run of blanks between pythonic arguments or XML parameters longer
#: than ``BLANK_RUN_MAX`` becomes raw text of the call as it is read).
VIOLATIONS: dict[str, str] = {}


STREAM_BOUND = 256 * 1024
"""What a streaming case may hold at its peak: the 4 KB chunk, its deltas and a marker prefix, with slack."""


def held_bound(input_bytes: int) -> int:
    """What a held case may hold at its peak: the held value, one join copy and one growth copy, with slack."""
    return 4 * input_bytes + STREAM_BOUND


def within_bound(case: Case, m: Measure) -> bool:
    """Whether ``m`` stays within the documented bound of ``case``'s kind."""
    limit = STREAM_BOUND if case.kind == "streams" else held_bound(m.input_bytes)
    return m.peak_bytes <= limit
