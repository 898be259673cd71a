"""Live PyTorch layer profile on a GPU: the layer sum must be within 5% of the CUDA-event
end-to-end latency. Runs on the GPU machine only (marked ``gpu``; skipped without CUDA).

Set HOOKMAGIC_RECORD_DIR to keep the profile as ``torch_convnet.layers.json`` (the recording
that notebooks/03_layers.ipynb shows, labelled with its GPU, driver and date).
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


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
    names = p.layers["name"].tolist()
    assert "0.0" in names and "6" in names                  # qualified leaf names
    assert (p.layers.loc[p.layers["name"] == "0.0", "type"] == "Conv2d").all()
    assert p.layers["precision"].iloc[0] == "FP16"
    e2e = p.latency_ms
    # launch gaps: in e2e (CUDA events bracket the whole forward), in no layer
    assert abs(p.total_ms - e2e) / e2e < 0.05, reconcile(p).to_string()
    assert OUTSIDE not in names or p.layers.set_index("name").loc[OUTSIDE, "pct"] < 5
    out = os.environ.get("HOOKMAGIC_RECORD_DIR")
    if out:
        import pynvml  # nvidia-ml-py, a hookmagic dependency

        pynvml.nvmlInit()
        p.meta["driver"] = pynvml.nvmlSystemGetDriverVersion()
        p.meta["recorded"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        p.meta["how_to_rerun"] = ("HOOKMAGIC_RECORD_DIR=<dir> pytest -m gpu "
                                  "tests/test_layers_torch_gpu.py")
        p.save(Path(out) / "torch_convnet.layers.json")
