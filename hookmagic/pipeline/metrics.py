"""Prometheus metrics of running pipelines.

    exporter = PipelineExporter("cameras", port=9108)      # serves http://127.0.0.1:9108/metrics
    pipe.run(source, observers=[exporter])
    exporter.stop()

Metrics (histograms in seconds with buckets below 5 ms, counters ending ``_total``, bytes):
``hookmagic_stage_duration_seconds{pipeline,stage}`` (one observation per execution of a stage's
fn: per frame, or per batch), ``hookmagic_stage_frames_total{pipeline,stage}``,
``hookmagic_frames_total{pipeline,source,outcome}`` (done, dropped, failed),
``hookmagic_queue_depth{pipeline,stage}`` (frames waiting in each stage's input queue),
per stream as DeepStream's per-source performance report reads (current fps over the last
:data:`FPS_WINDOW_S` seconds, end-to-end latency): ``hookmagic_stream_fps{pipeline,source}``
and ``hookmagic_stream_latency_seconds{pipeline,source}`` (histogram, from the frame's capture,
or the time it was due, to its result), and
``hookmagic_gpu_memory_used_bytes{gpu}`` (NVML, when a GPU and driver are present). The
exporter binds 127.0.0.1 unless told otherwise.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any

from hookmagic.common.errors import InvalidArgument
from hookmagic.common.prometheus import LATENCY_BUCKETS, Server, client, own_registry


#: the window of ``hookmagic_stream_fps`` (DeepStream's default perf-measurement interval)
FPS_WINDOW_S = 5.0


class PipelineExporter:
    """Observer for :meth:`Pipeline.run` that keeps Prometheus metrics (see the module).

    ``port=None`` serves nothing (use :attr:`registry` with your own server); ``port=0`` picks
    a free port (:attr:`port` says which). One exporter may observe many runs; totals add up.
    """

    def __init__(self, pipeline: str = "pipeline", port: int | None = 0,
                 addr: str = "127.0.0.1", registry: Any = None, gpu_memory: bool = True) -> None:
        prom = client()
        self.pipeline = pipeline
        self.registry = own_registry(prom, registry)
        try:
            self._make_metrics(prom)
        except ValueError as err:  # prometheus_client: "Duplicated timeseries in registry"
            raise InvalidArgument(f"this registry already holds the pipeline metrics (one "
                                  f"exporter per registry; {err})") from err
        self._done: dict[str, collections.deque] = {}   # source -> done times in the window
        self._first: dict[str, float] = {}
        self._nvml = _nvml_handles() if gpu_memory else []
        self._last_gpu = 0.0
        self._lock = threading.Lock()
        self.server = Server(self.registry, port, addr) if port is not None else None

    def _make_metrics(self, prom: Any) -> None:
        r = self.registry
        self.stage_duration = prom.Histogram(
            "hookmagic_stage_duration_seconds", "Time of one execution of a pipeline stage",
            ["pipeline", "stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.stage_frames = prom.Counter("hookmagic_stage_frames", "Frames through a stage",
                                         ["pipeline", "stage"], registry=r)
        self.frames = prom.Counter("hookmagic_frames", "Frames by source and outcome",
                                   ["pipeline", "source", "outcome"], registry=r)
        self.queue_depth = prom.Gauge("hookmagic_queue_depth",
                                      "Frames waiting in a stage's input queue",
                                      ["pipeline", "stage"], registry=r)
        self.stream_fps = prom.Gauge("hookmagic_stream_fps",
                                     f"Done frames per second of one stream over the last "
                                     f"{FPS_WINDOW_S:g} s", ["pipeline", "source"], registry=r)
        self.stream_latency = prom.Histogram(
            "hookmagic_stream_latency_seconds",
            "End-to-end latency of one stream's frames, capture to result",
            ["pipeline", "source"], buckets=LATENCY_BUCKETS, registry=r)
        self.gpu_memory = prom.Gauge("hookmagic_gpu_memory_used_bytes",
                                     "Device memory in use (NVML)", ["gpu"], registry=r)

    @property
    def port(self) -> int | None:
        return self.server.port if self.server else None

    # -- the observer interface Pipeline.run calls --------------------------------------
    def on_stage(self, stage: str, seconds: float, n: int) -> None:
        self.stage_duration.labels(self.pipeline, stage).observe(seconds)
        self.stage_frames.labels(self.pipeline, stage).inc(n)

    def on_frame(self, source: str, outcome: str) -> None:
        self.frames.labels(self.pipeline, source, outcome).inc()

    def on_latency(self, source: str, seconds: float) -> None:
        now = time.monotonic()
        self.stream_latency.labels(self.pipeline, source).observe(seconds)
        with self._lock:
            done = self._done.setdefault(source, collections.deque())
            self._first.setdefault(source, now)
            done.append(now)
        self._update_fps(now)

    def _update_fps(self, now: float) -> None:
        with self._lock:
            for source, done in self._done.items():
                while done and done[0] < now - FPS_WINDOW_S:
                    done.popleft()
                span = min(FPS_WINDOW_S, now - self._first[source])
                self.stream_fps.labels(self.pipeline, source).set(
                    len(done) / span if span > 0 else 0.0)

    def on_queues(self, depths: dict[str, int]) -> None:
        for stage, depth in depths.items():
            self.queue_depth.labels(self.pipeline, stage).set(depth)
        now = time.monotonic()
        self._update_fps(now)
        if self._nvml and now - self._last_gpu > 0.5:
            self._last_gpu = now
            self.sample_gpu_memory()

    def sample_gpu_memory(self) -> None:
        """Set ``hookmagic_gpu_memory_used_bytes`` from NVML for every GPU (no-op without)."""
        import pynvml

        for i, h in self._nvml:
            try:
                self.gpu_memory.labels(str(i)).set(pynvml.nvmlDeviceGetMemoryInfo(h).used)
            except pynvml.NVMLError:
                pass

    def stop(self) -> None:
        """Stop serving (the metrics stay readable in :attr:`registry`)."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def __enter__(self) -> "PipelineExporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _nvml_handles() -> list[tuple[int, Any]]:
    try:
        import pynvml

        pynvml.nvmlInit()
        return [(i, pynvml.nvmlDeviceGetHandleByIndex(i))
                for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - no driver, no GPU: the gauge stays empty
        return []
