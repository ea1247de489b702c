"""The garbage collector of a server process with many open streams.

CPython's cyclic collector looks at every tracked object in a full
collection, and a full collection comes after every ten of the middle
generation by default. A gateway holding a thousand streams holds about a
million objects (its own per-stream state, the sockets', the HTTP clients'),
so at the default thresholds full collections took a quarter of its CPU in
the benchmark (``python -m benchmarks gateway``, 1,000 streams: 22 full
collections of about 230 ms in 27.6 s of CPU), and that share grows with
the streams held.

:func:`tune_collector` moves everything alive once the server has started
(modules, tokenizers, templates, the engine) out of the collector's reach
for good (:func:`gc.freeze`) and collects ten times less often in the
youngest generation and twice less often in the others. Cycles of garbage
live a little longer before they are found; nothing that is collected now
is kept.
"""

from __future__ import annotations

import gc

__all__ = ("SERVER_GC_THRESHOLDS", "tune_collector")

SERVER_GC_THRESHOLDS: tuple[int, int, int] = (7000, 20, 20)
"""The collector's thresholds in a server process (CPython's defaults: 700, 10, 10)."""


def tune_collector(thresholds: tuple[int, int, int] = SERVER_GC_THRESHOLDS) -> None:
    """Tune this process's garbage collector for serving: collect, freeze what is alive, raise the thresholds.

    Call it once the server's long-lived objects exist (the app does at
    startup with ``create_app(..., tune_gc=True)``, as ``deltaflow serve``
    and :func:`deltaflow.gateway.app.create_gateway_app` make it). It acts on
    the whole process: an application that embeds the app and tunes its own
    collector should leave it off.

    Args:
        thresholds: the three generations' thresholds (:func:`gc.set_threshold`).

    Raises:
        ValueError: a threshold that is not a positive integer.
    """
    if len(thresholds) != 3 or not all(isinstance(t, int) and t > 0 for t in thresholds):
        raise ValueError(f"thresholds must be three positive integers, got {thresholds!r}")
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
