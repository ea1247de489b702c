"""The gateway's Prometheus metrics (``GET /metrics``), in a registry of its own.

Counted per served model: requests by protocol and outcome, streams in
flight, prompt and generated tokens, time to first token and the time
between two chunks of text (histograms, seconds), and upstream failures by
kind (``connect``, ``timeout``, ``status``, ``protocol``, ``closed``).
"""

from __future__ import annotations

from typing import Any

__all__ = ("GatewayMetrics",)

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
        self.itl = prom.Histogram(
            "deltaflow_inter_token_latency_seconds", "Between two chunks of upstream text.", ["model"],
            buckets=_ITL_BUCKETS, registry=r,
        )
        self.upstream_errors = prom.Counter(
            "deltaflow_upstream_errors", "Upstream failures by kind.", ["model", "kind"], registry=r
        )

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return self._prom.generate_latest(self.registry), self._prom.CONTENT_TYPE_LATEST
