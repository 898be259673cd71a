"""ONNX Runtime profile import, on a synthetic event list shaped like ORT's profiler output."""
from __future__ import annotations

import json

import pytest

from hookmagic.layers import LayerFileError
from hookmagic.layers.onnxruntime import from_onnxruntime


def _node(name, op, ts, dur, dtype="float", provider="CUDAExecutionProvider"):
    return {"cat": "Node", "pid": 1, "tid": 1, "ph": "X", "name": f"{name}_kernel_time",
            "ts": ts, "dur": dur,
            "args": {"op_name": op, "provider": provider, "parameter_size": "1024",
                     "activation_size": "600", "output_size": "400",
                     "input_type_shape": [{dtype: [1, 3, 8, 8]}],
                     "output_type_shape": [{dtype: [1, 4, 8, 8]}]}}


def synthetic_profile():
    ev = [{"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 5}]
    for run, t0 in enumerate((100, 1000, 2000)):          # run 0 is a slow warm-up
        ev.append({"cat": "Session", "name": "model_run", "ts": t0, "dur": 500 if run else 900})
        scale = 3 if run == 0 else run
        ev.append(_node("conv_0", "Conv", t0 + 10, 100 * scale))
        ev.append({"cat": "Node", "name": "conv_0_fence_before", "ts": t0 + 9, "dur": 1})
        ev.append(_node("relu_1", "Relu", t0 + 300, 20, dtype="float16"))
    return ev


def test_from_onnxruntime(tmp_path):
    path = tmp_path / "synthetic_ort_profile.json"
    path.write_text(json.dumps(synthetic_profile()))
    p = from_onnxruntime(path)
    assert p.layers["name"].tolist() == ["conv_0", "relu_1"]
    conv = p.layers.iloc[0]
    assert conv["type"] == "Conv" and conv["tactic"] == "CUDAExecutionProvider"
    assert conv["mean_ms"] == pytest.approx((0.1 + 0.2) / 2)          # warm-up run skipped
    assert conv["weight_bytes"] == 1024 and conv["activation_bytes"] == 1000
    assert conv["in_shapes"] == "1x3x8x8" and conv["precision"] == "FP32"
    assert p.layers.iloc[1]["precision"] == "FP16"
    assert p.meta["iterations"] == 2 and p.meta["latency_ms"]["mean"] == pytest.approx(0.5)
    all_runs = from_onnxruntime(path, skip_first=False)
    assert all_runs.layers.iloc[0]["mean_ms"] == pytest.approx((0.3 + 0.1 + 0.2) / 3)


def test_wrapped_trace_events_and_errors(tmp_path):
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps({"traceEvents": synthetic_profile()}))
    assert len(from_onnxruntime(path).layers) == 2
    path.write_text(json.dumps([{"cat": "Session", "name": "model_run", "ts": 0, "dur": 1}]))
    with pytest.raises(LayerFileError, match="no '\\*_kernel_time' node events"):
        from_onnxruntime(path)
