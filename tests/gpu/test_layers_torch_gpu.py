"""Live PyTorch layer profile on a GPU. Runs on the GPU machine only (tests/gpu/conftest.py marks
it ``gpu`` and skips it, saying why, without CUDA); about 10-20 s on an H100.

How it is checked (hookmagic/layers/torch_modules.py says how launch gaps are counted):
* the layer sum is within 5% of the model's end-to-end latency, measured with CUDA events over
  runs without hooks or capture (medians: host jitter puts a tail on single iterations);
* in the hooked run, GPU busy time equals the layer sum: every kernel is attributed to a layer
  (none outside the iterations, little outside leaf modules) and nothing is counted twice;
* the hooked run's idle GPU time is all in the ``gap_ms`` column: it sums to the hooked
  latency minus the layer sum.

Set HOOKMAGIC_RECORD_DIR to keep the profile as ``torch_convnet.layers.json`` (the recording
that notebooks/03_layers.ipynb shows, labelled with its GPU, driver and date).
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())


def _convnet():
    nn = torch.nn

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True))

    return nn.Sequential(block(3, 64, 2), block(64, 128, 2), block(128, 256, 2), block(256, 256, 1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000))


def test_layer_sum_within_5_percent_of_end_to_end():
    from hookmagic.layers import profile_module
    from hookmagic.layers.attribution import OUTSIDE
    from hookmagic.layers.reconcile import reconcile

    model = _convnet().cuda().half()
    x = torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.half)
    p = profile_module(model, x, iterations=30, warmup=10, name="convnet fp16 b64")
    table = reconcile(p)
    why = f"\n{table.to_string()}\n{p.layers[['name', 'mean_ms', 'median_ms', 'gap_ms']].to_string()}"
    names = p.layers["name"].tolist()
    assert "0.0" in names and "6" in names                  # qualified leaf names
    assert (p.layers.loc[p.layers["name"] == "0.0", "type"] == "Conv2d").all()
    assert p.layers["precision"].iloc[0] == "FP16"
    meta = p.meta
    assert meta["latency_clean_ms"]["n"] == meta["latency_hooked_ms"]["n"] == 30
    assert table.attrs["stat"] == "median"

    # 1. the layer sum against the model's own latency (no hooks, no capture), on medians
    layer_sum = meta["layer_sum_ms"]["median"]
    clean = meta["latency_clean_ms"]["median"]
    assert abs(layer_sum - clean) / clean < 0.05, why

    # 2. every kernel attributed: busy time of the hooked run is the layer sum
    assert meta["unattributed_activities"] == 0, why
    assert OUTSIDE not in names or p.layers.set_index("name").loc[OUTSIDE, "pct"] < 5
    assert abs(meta["gpu_busy_ms"]["mean"] - p.total_ms) <= 0.01 * p.total_ms, why
    assert abs(meta["gpu_busy_ms"]["median"] - layer_sum) <= 0.01 * layer_sum, why

    # 3. nothing hidden: the gap column holds the hooked run's idle time (means add up exactly
    #    per iteration; the tolerance covers stream overlap, which busy time counts once)
    hooked = meta["latency_hooked_ms"]["mean"]
    gaps = float(p.layers["gap_ms"].sum())
    assert abs(gaps - (hooked - p.total_ms)) <= max(0.01, 0.01 * hooked), why
    # the same idle time summed two ways (per layer, per iteration): equal to within 1 µs
    assert gaps == pytest.approx(meta["launch_gap_ms"]["mean"], abs=1e-3), why
    # per iteration: CUDA events and CUPTI timestamps agree to a few microseconds
    assert p.times["gap_ms"].add(p.times["busy_ms"]).to_numpy() == pytest.approx(
        p.times["latency_hooked_ms"].to_numpy(), abs=5e-3)

    out = os.environ.get("HOOKMAGIC_RECORD_DIR")
    if out:
        import pynvml  # nvidia-ml-py, a hookmagic dependency

        pynvml.nvmlInit()
        p.meta["driver"] = pynvml.nvmlSystemGetDriverVersion()
        p.meta["recorded"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        p.meta["how_to_rerun"] = ("HOOKMAGIC_RECORD_DIR=<dir> python3 -m pytest "
                                  "tests/gpu/test_layers_torch_gpu.py")
        p.save(Path(out) / "torch_convnet.layers.json")
