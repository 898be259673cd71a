"""The scheduler's real driver reports every batch to Prometheus metrics
(hookmagic_inference_duration_seconds{model}, batch sizes, requests served). Synthetic CPU
backend: threads that sleep each batch's table latency."""
from __future__ import annotations

import urllib.request

from hookmagic import sched as S
from hookmagic.common.prometheus import InferenceMetrics
from hookmagic.sched.engines import SleepEngine, ThreadBackend


def test_driver_reports_each_batch_and_the_totals_match_the_result():
    metrics = InferenceMetrics()
    spec = S.ModelSpec.constant("synthetic_det", 2.0, max_batch=4)
    res = S.run({"synthetic_det": SleepEngine(spec)}, [S.Poisson("synthetic_det", 200)],
                S.Policy(batching=S.Batching(4, 1.0)), duration_s=0.3, seed=1,
                backend=ThreadBackend(), metrics=metrics)
    value = metrics.registry.get_sample_value
    label = {"model": "synthetic_det"}
    assert value("hookmagic_inference_duration_seconds_count", label) == len(res.batches)
    assert value("hookmagic_inferences_total", label) == res.batches["size"].sum()
    assert value("hookmagic_inference_batch_size_sum", label) == res.batches["size"].sum()
    # compute time summed by the histogram = the batches' compute time
    assert abs(value("hookmagic_inference_duration_seconds_sum", label)
               - res.batches["compute_ms"].sum() / 1e3) < 1e-6 * len(res.batches) + 1e-9
    with metrics.serve(port=0) as server:
        text = urllib.request.urlopen(server.url, timeout=5).read().decode()
    assert "# TYPE hookmagic_inference_duration_seconds histogram" in text
