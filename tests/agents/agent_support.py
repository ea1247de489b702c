"""What the agent tests share: the gateway in front of the scripted llama.cpp double, recorded; npm installs.

* :func:`start_gateway` (the ``agent_gateway`` fixture of conftest.py) starts :class:`engine_double.EngineDouble` with that script and
  deltaflow's gateway in front of it (``ModelConfig(upstream_kind="llamacpp", model=<shared Qwen3
  tokenizer folder>, tool_parser="hermes", reasoning_parser="qwen3", context_length=32768)``), the
  app wrapped in :class:`Recorder`, which keeps every request the gateway saw (method, path, query,
  headers, JSON body, status, and the error body of a refused one): what a report of a gateway gap
  quotes.
* :func:`npm_install` installs pinned npm packages into a folder (the conventions of
  ``tests/integration/node``: ``--no-audit --no-fund --prefer-offline``, short fetch retries,
  a skip with npm's last lines when the registry cannot be reached, a failure otherwise).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from engine_double import EngineDouble, Rule, start_server

from deltaflow.gateway.config import ModelConfig, build_engine
from deltaflow.server import create_app

MODEL = "qwen3-agent"
API_KEY = "sk-deltaflow-agent-tests"
"""The gateway's API key in these tests (``x-api-key`` from Claude Code, ``Authorization: Bearer`` from the others)."""
CONTEXT = 32768
INSTALL_TIMEOUT = 300
NETWORK_ERRORS = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|"
    r"ERR_SOCKET_TIMEOUT|ENETWORK|getaddrinfo|socket hang up|npm error network|request to \S+ failed",
    re.IGNORECASE,
)


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# -- the gateway, recorded -----------------------------------------------------------------------


@dataclass
class Seen:
    """One request the gateway saw."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any = None
    status: int | None = None
    error: str = ""

    def brief(self) -> str:
        line = f"{self.method} {self.path}{'?' + self.query if self.query else ''} -> {self.status}"
        return line + (f": {self.error}" if self.error else "")


class Recorder:
    """ASGI middleware that keeps every HTTP request (and the body of every error answer) in :attr:`seen`."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[Seen] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        entry = Seen(
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode(),
            headers={k.decode(): v.decode() for k, v in scope["headers"]
                     if k.decode() not in ("authorization", "x-api-key")},
        )
        self.seen.append(entry)
        body: list[bytes] = []
        answer: list[bytes] = []

        async def receive_() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))
            return message

        async def send_(message: Any) -> None:
            if message["type"] == "http.response.start":
                entry.status = message["status"]
            elif message["type"] == "http.response.body" and (entry.status or 200) >= 400:
                answer.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive_, send_)
        finally:
            raw = b"".join(body)
            try:
                entry.body = json.loads(raw) if raw else None
            except ValueError:
                entry.body = raw.decode(errors="replace")
            entry.error = b"".join(answer).decode(errors="replace")


@dataclass
class AgentGateway:
    """A running double + gateway: :attr:`url` is the gateway's root, :attr:`seen` what it received."""

    double: EngineDouble
    recorder: Recorder
    url: str
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    @property
    def seen(self) -> list[Seen]:
        return self.recorder.seen

    def refused(self) -> list[Seen]:
        return [s for s in self.seen if (s.status or 0) >= 400]

    def story(self) -> str:
        """What happened, for an assertion message: the requests, the rules that answered, the misses."""
        lines = [s.brief() for s in self.seen]
        lines += [f"double: {c.rule}" for c in self.double.completions]
        lines += [f"double: no rule for a prompt ending {p[-300:]!r}" for p in self.double.unmatched]
        return "\n".join(lines)

    def stop(self) -> None:
        for stop in self.stoppers:
            stop()
        self.stoppers.clear()

    def save(self, folder: Path) -> None:
        """Write what the gateway received and what the double was asked (for a report of a gap)."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "gateway_requests.json").write_text(json.dumps([s.__dict__ for s in self.seen], indent=1))
        (folder / "engine_prompts.json").write_text(json.dumps([c.__dict__ for c in self.double.completions], indent=1))


def start_gateway(tokenizer_folder: Path, script: list[Rule], **app_options: Any) -> AgentGateway:
    """Start the double with ``script`` and the gateway in front of it (stop with :meth:`AgentGateway.stop`).

    ``app_options`` go to :func:`~deltaflow.server.create_app` (``api_key``: :data:`API_KEY` unless given).
    """
    double = EngineDouble(tokenizer_folder / "tokenizer.json.gz", script)
    double.start()
    config = ModelConfig(name=MODEL, upstream=double.url, upstream_kind="llamacpp", model=str(tokenizer_folder),
                         tool_parser="hermes", reasoning_parser="qwen3", context_length=CONTEXT)
    try:
        engine = anyio.run(build_engine, [config])
    except BaseException:
        double.stop()
        raise
    # No signing key: the framers and the engine's reasoning check share the per-process key (with a key,
    # the engine must be given the server's signer too, see GatewayEngine.use_keys).
    recorder = Recorder(create_app(engine, **{"heartbeat": 5.0, "api_key": API_KEY, **app_options}))
    server, thread, url = start_server(recorder, lifespan="on")

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
        double.stop()

    return AgentGateway(double=double, recorder=recorder, url=url, stoppers=[stop])


def xfail_on_gap(gw: AgentGateway, pattern: str, gap: str) -> None:
    """``pytest.xfail`` when the gateway refused a request with an error matching ``pattern`` (a known gap).

    Called after a run that is otherwise asserted to succeed: the day the gateway serves what it
    lacks, the test passes by itself; a refusal for another reason still fails it.
    """
    for s in gw.refused():
        if re.search(pattern, s.error):
            pytest.xfail(f"gateway gap: {gap}; refused: {s.brief()}")


# -- npm -----------------------------------------------------------------------------------------


def npm_install(folder: Path, packages: dict[str, str]) -> None:
    """``npm install`` the pinned ``packages`` into ``folder``; skips without npm or the registry."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip(f"node and npm are needed on PATH (node: {shutil.which('node') or 'absent'}, "
                    f"npm: {npm or 'absent'})")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(
        json.dumps({"name": "deltaflow-agent-tests", "private": True, "dependencies": packages})
    )
    env = {
        **os.environ,
        "npm_config_update_notifier": "false",
        "npm_config_fetch_retries": "1",
        "npm_config_fetch_retry_mintimeout": "2000",
        "npm_config_fetch_retry_maxtimeout": "5000",
        "npm_config_fetch_timeout": "60000",
        "npm_config_loglevel": "error",
        "npm_config_engine_strict": "false",
    }
    cmd = [npm, "install", "--no-audit", "--no-fund", "--no-progress", "--prefer-offline"]
    try:
        proc = subprocess.run(cmd, check=False, cwd=folder, env=env, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.skip(f"npm install of {packages} took over {INSTALL_TIMEOUT} s (no network?): {tail(out)}")
    if proc.returncode != 0:
        output = proc.stdout + "\n" + proc.stderr
        if NETWORK_ERRORS.search(output):
            code = re.search(r"npm error code (\S+)", output)
            what = f" ({code.group(1)})" if code else ""
            pytest.skip(f"npm install of {packages} failed for lack of network{what}:\n{tail(output)}")
        pytest.fail(f"npm install of {packages} failed (exit {proc.returncode}):\n{tail(output, 30)}")


def run_agent(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run an agent CLI with no standard input; a timeout fails the test with what it printed."""
    try:
        return subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"{Path(cmd[0]).name} ran over {timeout} s:\n{tail(out, 20)}\n{tail(err, 20)}")


def base_env(home: Path) -> dict[str, str]:
    """A minimal environment for an agent: PATH, a fresh HOME, no proxy, no inherited API keys."""
    home.mkdir(parents=True, exist_ok=True)
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               NO_COLOR="1", CI="true")
    return env


def work_folder(root: Path) -> Path:
    """The agent's working folder: a README and a notes file."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("# Hello project\n\nThe answer is 42.\n")
    (root / "notes.txt").write_text("some notes\n")
    return root
