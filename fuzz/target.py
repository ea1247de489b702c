"""Coverage-guided fuzz targets (atheris), one per parser family; a plain random loop without atheris.

    python fuzz/target.py FAMILY [-max_total_time=60]    # atheris (libFuzzer flags pass through)
    python fuzz/target.py FAMILY --iterations N          # random bytes, no atheris needed

The first input byte picks the dialect of the family (and a reasoning parser) and the chunk
size; the rest, decoded as UTF-8 (surrogatepass, then replace), is fed whole and in chunks.
Properties: no exception escapes, both chunkings rebuild parse_complete, every call's
arguments parse as one JSON object, names are offered.
"""

from __future__ import annotations

import json
import random
import sys

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.testing import message_key

FAMILIES = {
    "json_envelope": (("hermes", "qwen3"), ("internlm", None), ("llama3_json", "deepseek_r1")),
    "xml": (("qwen3_coder", "qwen3"), ("glm45", "glm45"), ("glm47", None), ("minimax_m2", "minimax_m2"),
            ("seed_oss", "seed_oss"), ("deepseek_v32", "deepseek_v3")),
    "special_tokens": (("deepseek_v3", "deepseek_r1"), ("deepseek_v31", None), ("kimi_k2", "kimi_k2")),
    "mistral_pythonic": (("mistral", "mistral"), ("pythonic", None), ("llama4_pythonic", None)),
    "harmony": (("openai", "openai_gptoss"), ("openai", None)),
    "xml_tools": (("xml_tools", "qwen3"), ("xml_tools", None)),
    "xtml": (("kimi_k3", "kimi_k3"), ("kimi_k3", None)),
    "xml_element": (("minimax_m3", "minimax_m3"), ("minicpm5", "qwen3"), ("minimax_m3", None)),
    "recipient": (("functionary_v3_2", None), ("functionary_v3_1", None), ("command_r_plus", None)),
}
NAMES = ("get_weather", "f", "search")
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "n": {"type": "integer"}, "content": {"type": "string"}}}}} for n in NAMES]


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


def _stream(text: str, size: int, kw: dict) -> tuple:
    p = ResponseParser(**kw)
    deltas = []
    for i in range(0, len(text), size):
        deltas += p.feed(text[i : i + size])
    deltas += p.feed("", final=True)
    return deltas


def check(family: str, data: bytes) -> None:
    if not data:
        return
    head, text = data[0], _decode(data[1:])
    dialects = FAMILIES[family]
    tool_parser, reasoning = dialects[head % len(dialects)]
    kw = {"tool_parser": tool_parser, "reasoning_parser": reasoning if head & 0x80 else None, "tools": TOOLS}
    size = 1 + (head >> 3) % 16
    want = message_key(parse_complete(text, **kw))
    for s in (size, 1):
        deltas = _stream(text, s, kw)
        got = accumulate(deltas)
        assert message_key(got) == want, (s, got, want)
        for c in got.tool_calls:
            assert c.function.name in NAMES
            assert isinstance(json.loads(c.function.arguments), dict)


def main(argv: list[str]) -> None:
    family = argv[1]
    if "--iterations" in argv:
        n = int(argv[argv.index("--iterations") + 1])
        rnd = random.Random(int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 0)
        import deltaflow.parsers.registry as registry

        markers = [m for tp, _ in FAMILIES[family] for m in registry.get_tool_dialect(tp).markers] or ["<f>", "</f>"]
        pieces = markers + ['{"name": "f", "arguments": {"a": "', "}", "]", '"', "\\", "\n", "f(", "é", "\ud800"]
        for _ in range(n):
            text = "".join(rnd.choice(pieces) if rnd.random() < 0.5 else chr(rnd.randrange(32, 0x3000))
                           for _ in range(rnd.randrange(0, 40)))
            check(family, bytes([rnd.randrange(256)]) + text.encode("utf-8", "surrogatepass"))
        print(f"{family}: {n} executions, no failure")
        return
    import atheris

    # deltaflow is imported at the top of this module (the random loop needs no atheris), so its
    # code is instrumented now, after the import: instrument_imports() would see nothing new.
    atheris.instrument_all()
    atheris.Setup([argv[0], *argv[2:]], lambda data: check(family, data))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
