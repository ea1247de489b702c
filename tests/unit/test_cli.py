"""The command line: ``deltaflow parse`` / ``deltaflow parsers`` via main() and ``python -m deltaflow``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import deltaflow
from deltaflow.cli import main
from deltaflow.parsers import registry

SAMPLE_ARGS = [
    '{"city": "Paris", "unit": "celsius"}',
    '{"city": "東京", "unit": "celsius"}',
]


def run(argv: list[str], stdin: str = "") -> tuple[int, str]:
    """Run main() with ``argv``; return (status, stdout)."""
    out = io.StringIO()
    status = main(argv, stdin=io.StringIO(stdin), stdout=out)
    return status, out.getvalue()


def essentials(message: dict[str, Any]) -> tuple[Any, ...]:
    """The parts of a JSON message that do not depend on random call ids."""
    return (
        message["content"],
        message["reasoning_content"],
        [(c["type"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]],
    )


def test_parse_without_file_parses_the_bundled_sample() -> None:
    """``parse`` with no FILE parses the bundled sample: reasoning, content, two get_weather calls."""
    status, out = run(["parse"])
    assert status == 0
    msg = json.loads(out)
    assert msg["reasoning_content"].strip().startswith("The user wants the weather in Paris and in Tokyo.")
    assert msg["content"].strip() == "I'll check both cities for you."
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather", "get_weather"]
    assert [c["function"]["arguments"] for c in msg["tool_calls"]] == SAMPLE_ARGS
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in msg["tool_calls"])
    assert "<tool_call>" not in msg["content"] and "<think>" not in msg["reasoning_content"]


def test_parse_stdin() -> None:
    """``parse -`` reads the output from standard input."""
    status, out = run(["parse", "-", "--reasoning-parser", "qwen3"], stdin="why</think>because")
    assert status == 0
    assert essentials(json.loads(out)) == ("because", "why", [])


def test_parse_file(tmp_path: Path) -> None:
    """``parse FILE`` parses the file with the given parsers."""
    f = tmp_path / "out.txt"
    f.write_text('hi<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', encoding="utf-8")
    status, out = run(["parse", str(f), "--tool-parser", "hermes"])
    assert status == 0
    assert essentials(json.loads(out)) == ("hi", None, [("function", "f", '{"a": 1}')])


def test_deltas_output_rebuilds_the_json_output() -> None:
    """``--output deltas --chunk-size 3`` prints one JSON delta per line; they rebuild the json output."""
    status, out = run(["parse", "--output", "deltas", "--chunk-size", "3"])
    assert status == 0
    lines = out.splitlines()
    assert len(lines) > 10
    deltas = [json.loads(line) for line in lines]
    content = "".join(d.get("content", "") for d in deltas)
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    calls: dict[int, list[str]] = {}
    for d in deltas:
        assert set(d) <= {"content", "reasoning_content", "tool_calls"}  # unset fields are omitted
        for tc in d.get("tool_calls", []):
            if "id" in tc:
                assert tc["index"] not in calls and tc["type"] == "function" and tc["function"]["name"]
                calls[tc["index"]] = ["function", tc["function"]["name"], ""]
            calls[tc["index"]][2] += tc["function"].get("arguments", "")
    _, whole = run(["parse"])
    rebuilt = (content, reasoning, [tuple(c) for _, c in sorted(calls.items())])
    assert rebuilt == essentials(json.loads(whole))


def test_tools_file_filters_calls(tmp_path: Path) -> None:
    """``--tools FILE`` offers only the listed tools: the sample's calls become content."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps({"tools": [{"name": "search", "input_schema": {"type": "object"}}]}), encoding="utf-8")
    status, out = run(["parse", "--tools", str(tools)])
    assert status == 0
    msg = json.loads(out)
    assert msg["tool_calls"] == []
    assert msg["content"].count("<tool_call>") == 2 and "get_weather" in msg["content"]


def test_tools_file_allowing_the_call(tmp_path: Path) -> None:
    """A tools file listing get_weather (OpenAI format, bare list) keeps the sample's calls."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "get_weather"}}]), encoding="utf-8")
    status, out = run(["parse", "--tools", str(tools)])
    assert status == 0 and len(json.loads(out)["tool_calls"]) == 2


@pytest.mark.parametrize(
    ("flag", "reasoning", "content"),
    [
        ([], "why", "answer"),
        (["--reasoning-starts-open"], "why", "answer"),
        (["--no-reasoning-starts-open"], None, "why</think>answer"),
    ],
)
def test_reasoning_starts_open_flag(tmp_path: Path, flag: list[str], reasoning: str | None, content: str) -> None:
    """``--no-reasoning-starts-open``: output without a written <think> is content."""
    f = tmp_path / "out.txt"
    f.write_text("why</think>answer", encoding="utf-8")
    status, out = run(["parse", str(f), "--reasoning-parser", "qwen3", *flag])
    assert status == 0
    m = json.loads(out)
    assert (m["reasoning_content"], m["content"]) == (reasoning, content)


def test_no_thinking_makes_reasoning_content() -> None:
    """``--no-thinking`` turns reasoning off: the think block is content."""
    status, out = run(["parse", "--no-thinking"])
    assert status == 0
    msg = json.loads(out)
    assert msg["reasoning_content"] is None
    assert msg["content"].startswith("<think>\nThe user wants")
    assert len(msg["tool_calls"]) == 2


@pytest.mark.parametrize(("chunking", "size"), [("any", "1"), ("any", "7"), ("tokens", None)])
def test_chunking_option(chunking: str, size: str | None) -> None:
    """``--chunking`` accepts both modes; re-chunked ("any") or whole ("tokens") the sample gives the same message."""
    _, base = run(["parse"])
    status, out = run(["parse", "--chunking", chunking] + (["--chunk-size", size] if size else []))
    assert status == 0 and essentials(json.loads(out)) == essentials(json.loads(base))


def test_parsers_lists_names() -> None:
    """``parsers`` lists the tool and reasoning parsers."""
    status, out = run(["parsers"])
    assert status == 0
    for name in ("hermes", "internlm", "llama3_json", "qwen3", "deepseek_r1"):
        assert name in out
    assert out.index("tool parsers") < out.index("hermes") < out.index("reasoning parsers") < out.index("  qwen3 ")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["parse", "-", "--tool-parser", "nope"], ", ".join(registry.tool_dialect_names())),
        (["parse", "-", "--reasoning-parser", "nope"], ", ".join(registry.reasoning_dialect_names())),
    ],
    ids=["tool", "reasoning"],
)
def test_unknown_parser_is_a_usage_error(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown parser name exits with status 2 and an error on stderr listing the names."""
    status, out = run(argv)
    err = capsys.readouterr().err
    assert status == 2 and out == ""
    assert "error" in err and fragment in err


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing FILE exits with status 2 and an error naming it."""
    missing = tmp_path / "absent.txt"
    status, _ = run(["parse", str(missing)])
    assert status == 2
    err = capsys.readouterr().err
    assert "error" in err and "absent.txt" in err


def test_bad_tools_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tools file that is not JSON, not a list, or holds a bad entry exits with status 2."""
    for i, content in enumerate(["{not json", '{"x": 1}', '[{"nope": 1}]']):
        f = tmp_path / f"tools{i}.json"
        f.write_text(content, encoding="utf-8")
        status, _ = run(["parse", "--tools", str(f)])
        assert status == 2, content
        assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("size", ["0", "-1", "x"])
def test_bad_chunk_size_exits_2(size: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--chunk-size must be a positive integer (argparse exits with status 2)."""
    with pytest.raises(SystemExit) as info:
        main(["parse", "--chunk-size", size], stdin=io.StringIO(), stdout=io.StringIO())
    assert info.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the version and exits 0."""
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"deltaflow {deltaflow.__version__}"


def test_missing_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a command, usage goes to stderr with status 2."""
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_python_dash_m_runs_the_sample() -> None:
    """``python -m deltaflow parse`` works as a subprocess and prints the sample's message."""
    proc = subprocess.run(
        [sys.executable, "-m", "deltaflow", "parse"], check=False, capture_output=True, text=True, encoding="utf-8", timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    msg = json.loads(proc.stdout)
    assert [c["function"]["arguments"] for c in msg["tool_calls"]] == SAMPLE_ARGS


def test_python_dash_m_usage_error() -> None:
    """``python -m deltaflow`` reports usage errors on stderr with status 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "deltaflow", "parse", "-", "--tool-parser", "nope"],
        check=False, input="", capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == "" and "error" in proc.stderr and "hermes" in proc.stderr


def _serve(monkeypatch: pytest.MonkeyPatch, argv: list[str], env_key: str | None = None) -> tuple[int, Any]:
    """Run ``deltaflow serve`` with uvicorn.run replaced; return (status, the app it would have served)."""
    import structlog
    import uvicorn

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app))
    monkeypatch.setattr(structlog, "configure", lambda **kwargs: None)  # keep the test process's logging as it is
    if env_key is None:
        monkeypatch.delenv("DELTAFLOW_SIGNING_KEY", raising=False)
    else:
        monkeypatch.setenv("DELTAFLOW_SIGNING_KEY", env_key)
    status = main(["serve", "--tokens-per-second", "0", *argv])
    return status, served.get("app")


@pytest.mark.parametrize(
    ("argv", "env_key", "key"),
    [(["--signing-key", "opt-secret-1"], None, "opt-secret-1"), ([], "env-secret-2", "env-secret-2"),
     (["--signing-key", "opt-secret-1"], "env-secret-2", "opt-secret-1")],
    ids=["option", "environment", "option over environment"],
)
def test_serve_signing_key_from_option_or_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], env_key: str | None, key: str
) -> None:
    """--signing-key KEY (default $DELTAFLOW_SIGNING_KEY) is the app's signing key; neither key is printed or logged."""
    from structlog.testing import capture_logs

    from deltaflow import ReasoningSigner

    with capture_logs() as logs:
        status, app = _serve(monkeypatch, argv, env_key)
    assert status == 0
    signature = app.state.deltaflow.signer.sign("thought")
    assert ReasoningSigner(key).verify("thought", signature)
    err = capsys.readouterr().err
    assert "signing key set" in err
    everything = err + repr(logs) + repr(app.state.deltaflow.signer)
    assert "opt-secret-1" not in everything and "env-secret-2" not in everything


def test_serve_without_signing_key_uses_the_process_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """No option and no (or an empty) environment variable: the per-process key."""
    from deltaflow import ReasoningSigner

    for env_key in (None, ""):
        status, app = _serve(monkeypatch, [], env_key)
        assert status == 0
        assert ReasoningSigner().verify("t", app.state.deltaflow.signer.sign("t"))
        assert "per-process signing key" in capsys.readouterr().err


def test_serve_empty_signing_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--signing-key '' exits 2 with a clear message and serves nothing."""
    status, app = _serve(monkeypatch, ["--signing-key", ""])
    assert status == 2 and app is None
    assert "--signing-key must not be empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "calls", "reasoning"),
    [
        ([], [], 'Check. <tool_call>{"name": "f", "arguments": {}}</tool_call> Then.'),
        (["--tool-calls-in-reasoning", "always"], [("f", "{}")], "Check.  Then."),
        (["--tool-calls-in-reasoning", "never"], [], 'Check. <tool_call>{"name": "f", "arguments": {}}</tool_call> Then.'),
    ],
)
def test_tool_calls_in_reasoning_flag(
    tmp_path: Path, flag: list[str], calls: list[tuple[str, str]], reasoning: str
) -> None:
    """``--tool-calls-in-reasoning`` picks what a block inside reasoning is."""
    f = tmp_path / "out.txt"
    f.write_text('Check. <tool_call>{"name": "f", "arguments": {}}</tool_call> Then.</think>ok', encoding="utf-8")
    status, out = run(["parse", str(f), "--tool-parser", "hermes", "--reasoning-parser", "qwen3", *flag])
    assert status == 0
    m = json.loads(out)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]] == calls
    assert (m["reasoning_content"], m["content"]) == (reasoning, "ok")


def test_tool_calls_in_reasoning_bad_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown policy is a usage error naming the accepted ones."""
    with pytest.raises(SystemExit) as exc:
        run(["parse", "-", "--tool-calls-in-reasoning", "sometimes"])
    assert exc.value.code == 2
    assert "trailing" in capsys.readouterr().err


def test_serve_tool_calls_in_reasoning(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve --tool-calls-in-reasoning always`` configures the app."""
    status, app = _serve(monkeypatch, ["--tool-calls-in-reasoning", "always"])
    assert status == 0 and app.state.deltaflow.tool_calls_in_reasoning == "always"
    status, app = _serve(monkeypatch, [])
    assert status == 0 and app.state.deltaflow.tool_calls_in_reasoning == "trailing"
