"""The exporter's per-stream metrics read from its own /metrics text (no Prometheus server
needed; tests/test_pipeline_prometheus.py checks the same names through a real one)."""
from __future__ import annotations

import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from hookmagic.pipeline import Pipeline, Stage, frames  # noqa: E402
from hookmagic.pipeline.metrics import PipelineExporter  # noqa: E402


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def test_per_stream_latency_and_fps_follow_the_run():
    with PipelineExporter("synthetic", port=0, gpu_memory=False) as exporter:
        run = Pipeline([Stage("a", lambda x: None if x % 4 == 0 else x)]).run(
            frames(range(40), name="cam7"), observers=[exporter])
        text = _get(f"http://127.0.0.1:{exporter.port}/metrics").decode()
    done = int(run.outcomes["done"])
    assert done == 30  # every fourth frame dropped by construction
    assert (f'hookmagic_stream_latency_seconds_count{{pipeline="synthetic",source="cam7"}} '
            f'{float(done)}') in text
    fps_line = [ln for ln in text.splitlines() if ln.startswith("hookmagic_stream_fps{")]
    assert len(fps_line) == 1 and float(fps_line[0].split()[-1]) > 0
