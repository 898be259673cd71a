"""Prometheus conventions shared by the pipeline exporter and the scheduler's real driver.

Names follow Prometheus practice: the one-word prefix ``hookmagic_``, base units (seconds,
bytes), ``_total`` on counters, histograms rather than summaries (they aggregate across
processes and cost less), and no high-cardinality labels (never kernel names).
``prometheus_client`` is imported only when a metric object is made.
"""
from __future__ import annotations

from typing import Any

from hookmagic.common.errors import InvalidArgument, Unavailable

#: histogram buckets in seconds, dense below 5 ms where per-frame stages live
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02,
                   0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)
#: batch-size buckets
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def client() -> Any:
    """The ``prometheus_client`` module (Unavailable with the install line if missing)."""
    try:
        import prometheus_client
    except ImportError as err:
        raise Unavailable("metrics need prometheus_client: pip install prometheus-client") from err
    return prometheus_client


class Server:
    """An HTTP ``/metrics`` endpoint for one registry, on ``addr:port`` (port 0: any free one).
    ``stop()`` shuts it down; also a context manager."""

    def __init__(self, registry: Any, port: int = 0, addr: str = "127.0.0.1") -> None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise InvalidArgument(f"port must be an int in 0..65535, got {port!r}")
        if not isinstance(addr, str) or not addr:
            raise InvalidArgument(f"addr must be a host name or address, got {addr!r}")
        prom = client()
        try:
            self._server, self._thread = prom.start_http_server(port, addr=addr,
                                                                registry=registry)
        except OSError as err:  # busy port, unknown host, an address not on this machine
            raise Unavailable(f"cannot serve metrics on {addr}:{port}: {err}") from err
        self.addr = addr
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def own_registry(prom: Any, registry: Any) -> Any:
    """``registry`` when it is a prometheus_client CollectorRegistry, a new one for None,
    else :class:`InvalidArgument`."""
    if registry is None:
        return prom.CollectorRegistry()
    if not isinstance(registry, prom.CollectorRegistry):
        raise InvalidArgument(f"registry must be a prometheus_client CollectorRegistry, not "
                              f"{type(registry).__name__}")
    return registry


class InferenceMetrics:
    """Per-inference metrics of a serving loop: ``hookmagic_inference_duration_seconds{model}``
    (histogram of batch compute time), ``hookmagic_inference_batch_size{model}`` (histogram)
    and ``hookmagic_inferences_total{model}`` (requests served). Pass as ``metrics=`` to
    :func:`hookmagic.sched.run`; ``serve(port)`` exposes them."""

    def __init__(self, registry: Any = None) -> None:
        prom = client()
        self.registry = own_registry(prom, registry)
        try:
            self.duration = prom.Histogram("hookmagic_inference_duration_seconds",
                                           "Compute time of one inference batch", ["model"],
                                           buckets=LATENCY_BUCKETS, registry=self.registry)
            self.batch = prom.Histogram("hookmagic_inference_batch_size", "Requests per batch",
                                        ["model"], buckets=BATCH_BUCKETS, registry=self.registry)
            self.count = prom.Counter("hookmagic_inferences", "Requests served", ["model"],
                                      registry=self.registry)
        except ValueError as err:   # prometheus_client: duplicated timeseries in the registry
            raise InvalidArgument(f"this registry already holds the inference metrics (one set "
                                  f"per registry; {err})") from None

    def observe_batch(self, model: str, seconds: float, size: int) -> None:
        """One batch of ``size`` requests of ``model`` took ``seconds`` on the device."""
        self.duration.labels(model=str(model)).observe(seconds)
        self.batch.labels(model=str(model)).observe(size)
        self.count.labels(model=str(model)).inc(size)

    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> Server:
        return Server(self.registry, port, addr)
