"""A real Prometheus server scrapes the pipeline exporter during a run; its HTTP API then
returns the run's totals. (Debian's `prometheus` package; .ci/run installs it. The server
listens on 127.0.0.1 only, with a temporary config and storage, and is stopped by the test.)

The pipeline is synthetic: sleeping stages over integer frames."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from hookmagic.pipeline import Pipeline, Stage, frames
from hookmagic.pipeline.metrics import PipelineExporter

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus server is not installed "
    "(apt-get install prometheus; .ci/run installs it where it can)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _query(base: str, expr: str) -> list:
    doc = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


@pytest.fixture
def prometheus(tmp_path):
    """Start Prometheus scraping a target every 0.5 s; yields (base_url, set_target)."""
    port = _free_port()
    exporter_port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\n"
        "scrape_configs:\n  - job_name: hookmagic\n    scrape_interval: 500ms\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
            try:
                if _get(f"{base}/-/ready").strip():
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready in 30 s")
            time.sleep(0.2)
        yield base, exporter_port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _wait_for(fn, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value is not None or time.monotonic() > deadline:
            return value
        time.sleep(0.25)


def test_prometheus_scrapes_the_run_and_its_totals_equal_the_run(prometheus):
    base, exporter_port = prometheus

    def slow_every_7th(x):
        time.sleep(0.004)
        if x % 7 == 3:
            raise ValueError("synthetic failure")
        return x

    pipe = Pipeline([Stage("preprocess", slow_every_7th),
                     Stage("infer", lambda b: [time.sleep(0.002) or v for v in b], batch=4),
                     Stage("postprocess", lambda x: None if x % 10 == 0 else x)],
                    queue_size=4, name="synthetic_cams")
    with PipelineExporter("synthetic_cams", port=exporter_port) as exporter:
        # Prometheus finds its target a few seconds after starting: wait for the first scrape,
        # then run (~2 s at a 0.5 s scrape interval: scraped while it runs)
        up = _wait_for(lambda: _query(base, 'up{job="hookmagic"}') or None, timeout=30)
        assert up and up[0]["value"][1] == "1"
        run = pipe.run(frames(range(300), name="cam0", fps=150), observers=[exporter])
        expected = run.outcomes.to_dict()

        def totals():
            res = _query(base, 'sum by (outcome) (hookmagic_frames_total{pipeline="synthetic_cams"})')
            got = {r["metric"]["outcome"]: int(float(r["value"][1])) for r in res}
            return got if got == expected else None

        got = _wait_for(totals)
        assert got == expected, (got, expected)
        assert set(expected) == {"done", "failed", "dropped"}

        # one histogram observation per execution of each stage's fn
        res = _query(base, 'hookmagic_stage_duration_seconds_count{pipeline="synthetic_cams"}')
        counts = {r["metric"]["stage"]: int(float(r["value"][1])) for r in res}
        execs = run.events.drop_duplicates(["stage", "worker", "start_ns"]).groupby("stage").size()
        assert counts == execs.to_dict()
        # the histogram has buckets below 5 ms, and the queue-depth gauge was seen during the run
        buckets = _query(base, 'hookmagic_stage_duration_seconds_bucket{stage="infer"}')
        les = sorted(float(b["metric"]["le"]) for b in buckets if b["metric"]["le"] != "+Inf")
        assert sum(le < 0.005 for le in les) >= 4
        seen = _query(base, 'count_over_time(hookmagic_queue_depth{stage="infer"}[5m])')
        assert seen and int(float(seen[0]["value"][1])) >= 2
        # per stream: one latency observation per done frame, and the stream's fps was seen
        lat = _query(base, 'hookmagic_stream_latency_seconds_count{source="cam0"}')
        assert int(float(lat[0]["value"][1])) == expected["done"]
        fps = _query(base, 'max_over_time(hookmagic_stream_fps{source="cam0"}[5m])')
        assert fps and float(fps[0]["value"][1]) > 0


def test_exporter_serves_text_format_without_a_server_running():
    with PipelineExporter("synthetic", port=0) as exporter:
        Pipeline([Stage("a", lambda x: x)]).run(range(5), observers=[exporter])
        text = _get(f"http://127.0.0.1:{exporter.port}/metrics").decode()
    assert 'hookmagic_frames_total{outcome="done",pipeline="synthetic",source="frames"} 5.0' in text
    assert "# TYPE hookmagic_stage_duration_seconds histogram" in text

