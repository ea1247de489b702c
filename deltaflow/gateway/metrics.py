"""The gateway's Prometheus metrics (``GET /metrics``), in a registry of its own.

Counted per served model: requests by protocol and outcome, streams in
flight, prompt and generated tokens, time to first token and the time
between two chunks of text (histograms, seconds), and upstream failures by
kind (``connect``, ``timeout``, ``status``, ``protocol``, ``closed``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ("GatewayMetrics", "LightHistogram", "ModelMetrics")

# Latency buckets (seconds): first tokens from 5 ms to a minute; gaps between chunks from 0.5 ms.
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_ITL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GatewayMetrics:
    """The gateway's metrics (``prometheus-client``, imported when the first one is built).

    Raises:
        ImportError: ``prometheus-client`` is not installed (``pip install 'deltaflow[gateway]'``).
    """

    def __init__(self) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - the gateway extra installs it
            raise ImportError(
                "the gateway's metrics need prometheus-client: pip install 'deltaflow[gateway]'"
            ) from exc
        self._prom: Any = prom
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.requests = prom.Counter(
            "deltaflow_requests", "Requests by protocol and outcome.", ["model", "protocol", "outcome"], registry=r
        )
        self.in_flight = prom.Gauge("deltaflow_streams_in_flight", "Upstream streams open now.", ["model"], registry=r)
        self.prompt_tokens = prom.Counter("deltaflow_prompt_tokens", "Prompt tokens sent.", ["model"], registry=r)
        self.generated_tokens = prom.Counter(
            "deltaflow_generated_tokens", "Tokens the upstream generated.", ["model"], registry=r
        )
        self.ttft = prom.Histogram(
            "deltaflow_time_to_first_token_seconds", "From the upstream request to its first text.", ["model"],
            buckets=_TTFT_BUCKETS, registry=r,
        )
        self.itl = LightHistogram(
            "deltaflow_inter_token_latency_seconds", "Between two chunks of upstream text.", "model",
            _ITL_BUCKETS,
        )
        r.register(self.itl)
        self.upstream_errors = prom.Counter(
            "deltaflow_upstream_errors", "Upstream failures by kind.", ["model", "kind"], registry=r
        )
        self._models: dict[str, ModelMetrics] = {}

    def model(self, name: str) -> ModelMetrics:
        """One model's metrics, found once per model (``labels()`` takes a lock and checks its
        values at every call: seven calls were about 35 µs of each request's CPU)."""
        found = self._models.get(name)
        if found is None:
            found = self._models[name] = ModelMetrics(self, name)
        return found

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return self._prom.generate_latest(self.registry), self._prom.CONTENT_TYPE_LATEST


class ModelMetrics:
    """The children of :class:`GatewayMetrics`' per-model metrics for one model (see :meth:`GatewayMetrics.model`).

    Attributes:
        in_flight, prompt_tokens, generated_tokens, ttft, itl: the metrics of that name, for this model.
    """

    __slots__ = ("_name", "_requests", "_by_protocol", "in_flight", "prompt_tokens", "generated_tokens", "ttft", "itl")

    def __init__(self, metrics: GatewayMetrics, name: str) -> None:
        self._name = name
        self._requests = metrics.requests
        self._by_protocol: dict[tuple[str, str], Any] = {}
        self.in_flight: Any = metrics.in_flight.labels(name)
        self.prompt_tokens: Any = metrics.prompt_tokens.labels(name)
        self.generated_tokens: Any = metrics.generated_tokens.labels(name)
        self.ttft: Any = metrics.ttft.labels(name)
        self.itl = metrics.itl.labels(name)

    def request(self, protocol: str, outcome: str) -> None:
        """Count one request of ``protocol`` with ``outcome`` (``accepted`` or ``refused``)."""
        key = (protocol, outcome)
        child = self._by_protocol.get(key)
        if child is None:
            child = self._by_protocol[key] = self._requests.labels(self._name, protocol, outcome)
        child.inc()


class _HistogramChild:
    """One label value's counts (see :class:`LightHistogram`)."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.total = 0.0

    def observe(self, amount: float) -> None:
        """Count one value (seconds)."""
        self.counts[bisect_left(self._bounds, amount)] += 1
        self.total += amount


class LightHistogram:
    """A histogram with one label, observed once per token: a Prometheus collector of plain counters.

    ``prometheus_client.Histogram.observe`` takes a lock and updates a value
    object per bucket and for the sum (about 4 us); this is a bisection and two
    additions, for one event loop (observe from one thread). The exposition is
    the same ``_bucket``/``_count``/``_sum`` series (no ``_created``).

    Args:
        name: the metric's name.
        documentation: its help text.
        label: the label's name.
        buckets: the upper bounds (sorted; +Inf is added).
    """

    def __init__(self, name: str, documentation: str, label: str, buckets: Sequence[float]) -> None:
        from prometheus_client.utils import floatToGoString  # the le="..." text prometheus_client writes

        self._name = name
        self._doc = documentation
        self._label = label
        self._bounds = tuple(float(b) for b in buckets)
        self._les = [str(floatToGoString(b)) for b in self._bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._children: dict[str, _HistogramChild] = {}

    def labels(self, value: str) -> _HistogramChild:
        """The counts of one label value (made on first use)."""
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = _HistogramChild(self._bounds)
        return child

    def collect(self) -> Iterator[Any]:
        """The metric family, for the registry."""
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(self._name, self._doc, labels=[self._label])
        for value, child in list(self._children.items()):
            running = 0
            buckets: list[tuple[str, float]] = []
            for le, n in zip(self._les, list(child.counts), strict=True):
                running += n
                buckets.append((le, float(running)))
            family.add_metric([value], buckets, child.total)
        yield family

    def describe(self) -> list[Any]:
        """No description up front (the registry then calls :meth:`collect` to learn the names)."""
        return []
