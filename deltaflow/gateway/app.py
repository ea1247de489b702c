"""The gateway as an ASGI app factory, for running several worker processes or replicas.

``deltaflow serve --config FILE`` runs one process. For several::

    DELTAFLOW_CONFIG=gateway.toml DELTAFLOW_SIGNING_KEY=... DELTAFLOW_RESPONSE_STORE=responses.sqlite3 \\
        uvicorn --factory deltaflow.gateway.app:create_gateway_app --workers 2 --port 8000

Each worker builds its own engine from the same file; the gateway keeps
per-stream state only, so any load balancer can spread requests over the
workers or over replicas on several machines (one container per replica,
the same configuration and signing key in each).
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import Any

import anyio

from ..server import create_app
from .config import ConfigError, GatewayConfig, build_engine, load_config

__all__ = ("CONFIG_ENV", "STORE_ENV", "create_gateway_app")

CONFIG_ENV = "DELTAFLOW_CONFIG"
STORE_ENV = "DELTAFLOW_RESPONSE_STORE"


def create_gateway_app(config: GatewayConfig | str | os.PathLike[str] | None = None, **options: Any) -> Any:
    """Build the gateway's ASGI app from a configuration (default: the file ``$DELTAFLOW_CONFIG`` names).

    Args:
        config: the configuration, or a TOML file's path.
        **options: :func:`~deltaflow.server.create_app` options; ``tune_gc`` defaults to True,
            ``api_key`` and ``signing_key`` to ``$DELTAFLOW_API_KEY`` and ``$DELTAFLOW_SIGNING_KEY``,
            ``response_store`` to an SQLite file at ``$DELTAFLOW_RESPONSE_STORE`` (WAL: every
            worker opens the same file, so ``previous_response_id`` resolves on any of them).

    Raises:
        ConfigError: no configuration given, or an invalid one.
    """
    if config is None:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise ConfigError(f"no gateway configuration: set ${CONFIG_ENV} to a TOML file")
        config = path
    cfg = config if isinstance(config, GatewayConfig) else load_config(config)
    # The probes are async; a factory may be called inside a running loop (uvicorn --factory): build
    # the engine on a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        engine = pool.submit(anyio.run, build_engine, cfg).result()
    store_path = os.environ.get(STORE_ENV)
    if store_path and "response_store" not in options:
        from ..server.store import SQLiteResponseStore

        options["response_store"] = SQLiteResponseStore(store_path)  # one file shared by every worker
    options.setdefault("api_key", os.environ.get("DELTAFLOW_API_KEY") or None)
    options.setdefault("signing_key", os.environ.get("DELTAFLOW_SIGNING_KEY") or None)
    options.setdefault("tune_gc", True)  # a worker process of its own (see deltaflow.server.collector)
    return create_app(engine, **options)
