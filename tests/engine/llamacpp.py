"""A real llama.cpp server for tests: ``xllamacpp.Server`` in a child process.

``xllamacpp.Server(CommonParams)`` runs llama.cpp's own C++ HTTP server on
background threads of the process that creates it. The tests run it in a child
process (this file, run as a script), so that:

* a crash or a hang in C++ cannot take pytest down, and the server's logs go
  to a file the errors can quote;
* it can be stopped for sure: it has been seen ignoring SIGTERM
  (``../shared/GATEWAY.md`` §4), so :meth:`LlamaCppServer.stop` sends SIGKILL
  and reaps it;
* it never outlives the tests: the child exits when its stdin closes, which
  happens when the parent exits, however it exits.

The child binds port 0 (the kernel picks a free loopback port, so there is no
race between choosing a port and binding it) and reports the address it
listens on as one JSON line on stdout.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

__all__ = ("LlamaCppServer", "LlamaCppServerError")

STDERR_TAIL = 4000


class LlamaCppServerError(RuntimeError):
    """The server did not start, or did not become healthy in time."""


class LlamaCppServer:
    """llama.cpp's server on a tiny model, in a child process, on a free loopback port.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with LlamaCppServer(path) as server:
            httpx.post(f"{server.base_url}/completion", json={...})

    Args:
        model_path: the GGUF model.
        n_ctx: the whole context, split evenly over the slots.
        n_parallel: the number of slots (requests decoded at once).
        threads: CPU threads for generation and for prompt processing.
        startup_timeout: seconds to wait for the address and ``/health``.
        params: more ``CommonParams`` fields to set, by name (nested
            fields dotted: ``{"sampling.top_k": 1}``).
    """

    def __init__(
        self,
        model_path: Path | str,
        *,
        n_ctx: int = 4096,
        n_parallel: int = 2,
        threads: int = 1,
        startup_timeout: float = 60.0,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.n_ctx = n_ctx
        self.n_parallel = n_parallel
        self.threads = threads
        self.startup_timeout = startup_timeout
        self.params: dict[str, Any] = dict(params or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._base_url: str | None = None
        self.startup_seconds: float | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if self._base_url is None:
            raise LlamaCppServerError("the server is not running")
        return self._base_url

    @property
    def pid(self) -> int | None:
        """The child process's id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def config(self) -> dict[str, Any]:
        """The ``CommonParams`` fields the child sets (dotted names for nested fields)."""
        return {
            "model.path": str(self.model_path),
            "hostnames": ["127.0.0.1"],
            "port": 0,
            "n_ctx": self.n_ctx,
            "n_parallel": self.n_parallel,
            "cpuparams.n_threads": self.threads,
            "cpuparams_batch.n_threads": self.threads,
            "warmup": False,
            "special": True,
            "endpoint_slots": True,
            "endpoint_metrics": True,
            **self.params,
        }

    def start(self) -> LlamaCppServer:
        """Start the child and wait until ``/health`` answers ok.

        Raises:
            LlamaCppServerError: the child exited, or did not report an
                address or become healthy within ``startup_timeout`` (the
                message ends with the tail of its stderr). The child is
                killed first.
        """
        if self._proc is not None:
            raise LlamaCppServerError("the server is already running")
        if not self.model_path.is_file():
            raise LlamaCppServerError(f"no model file at {self.model_path}")
        began = time.monotonic()
        deadline = began + self.startup_timeout
        self._stderr = tempfile.TemporaryFile(prefix="llamacpp-stderr-")
        self._proc = subprocess.Popen(
            [sys.executable, "-u", str(Path(__file__).resolve()), json.dumps(self.config())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            self._base_url = self._read_address(deadline)
            self._wait_healthy(deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _read_address(self, deadline: float) -> str:
        """The ``base_url`` line the child prints once the server listens."""
        assert self._proc is not None and self._proc.stdout is not None
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._error(f"no address reported within {self.startup_timeout:.0f} s")
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    self._proc.wait(timeout=5)
                    raise self._error(f"the server process exited with code {self._proc.returncode} before listening")
                buf += chunk
        line = buf.split(b"\n", 1)[0]
        try:
            url = json.loads(line)["base_url"]
        except (ValueError, KeyError, TypeError) as exc:
            raise self._error(f"unexpected first line from the server process: {line!r}") from exc
        if not isinstance(url, str) or not url.startswith("http://127.0.0.1:"):
            raise self._error(f"the server listens on {url!r}, not on the loopback address")
        return url

    def _wait_healthy(self, deadline: float) -> None:
        """Poll ``/health`` until it answers ``{"status": "ok"}``."""
        assert self._proc is not None
        last = "no answer"
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while True:
                if self._proc.poll() is not None:
                    raise self._error(f"the server process exited with code {self._proc.returncode}")
                try:
                    r = client.get("/health")
                    if r.status_code == 200 and r.json().get("status") == "ok":
                        return
                    last = f"HTTP {r.status_code}: {r.text[:200]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                if time.monotonic() >= deadline:
                    raise self._error(f"/health not ok within {self.startup_timeout:.0f} s (last: {last})")
                time.sleep(0.05)

    def stderr_tail(self, limit: int = STDERR_TAIL) -> str:
        """The end of the child's stderr (llama.cpp's log)."""
        if self._stderr is None or self._stderr.closed:
            return ""
        self._stderr.flush()
        size = self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, size - limit))
        return self._stderr.read().decode("utf-8", "replace")

    def _error(self, message: str) -> LlamaCppServerError:
        return LlamaCppServerError(f"llama.cpp server for {self.model_path.name}: {message}\n--- stderr ---\n"
                                   f"{self.stderr_tail()}")

    def stop(self) -> None:
        """Kill the child with SIGKILL and reap it (idempotent)."""
        proc, self._proc = self._proc, None
        self._base_url = None
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait(timeout=30)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self._base_url or "stopped"
        return f"LlamaCppServer({self.model_path.name!r}, {state})"


def _set_field(obj: Any, dotted: str, value: Any) -> None:
    """Set ``a.b.c`` on a ``CommonParams``, refusing names it does not have (a typo must not pass silently)."""
    *parents, leaf = dotted.split(".")
    for name in parents:
        obj = getattr(obj, name)
    if not hasattr(obj, leaf):
        raise AttributeError(f"CommonParams has no field {dotted!r}")
    setattr(obj, leaf, value)


def _serve(config: Mapping[str, Any]) -> None:
    """The child: start the server, print its address, live until stdin closes."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    for name, value in config.items():
        _set_field(params, name, value)
    server = xllamacpp.Server(params)  # returns once the model is loaded and the socket listens
    sys.stdout.write(json.dumps({"base_url": server.listening_address}) + "\n")
    sys.stdout.flush()
    # The parent holds our stdin open; end of file means it is gone.
    done = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.buffer.read()
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    done.wait()
    os._exit(0)  # no interpreter teardown: the server's threads are still running


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
