"""Live TensorRT backend against a faithful stand-in of the TensorRT 10.x and 11.x Python API
(tests/trt_standin.py; it is not TensorRT). The stand-in replays the mobilenet trtexec
sample, so the live path must reproduce the importer's numbers. Real TensorRT: marked tensorrt."""
from __future__ import annotations

import json

import pytest

from hookmagic.layers import from_trtexec
from hookmagic.layers.tensorrt_live import (INSTALL_HINT, TensorRTUnavailable, build_engine,
                                            engine_cache_key, import_tensorrt, profile_engine,
                                            timing_rows)

from .layers_samples import mobilenet_files
from .trt_standin import StandInBackend, make_standin


def _sample():
    files = mobilenet_files()
    graph = json.loads(files["layers"].read_text())
    ms = {r["name"]: r["averageMs"] for r in json.loads(files["profile"].read_text())[1:]}
    return graph, ms


@pytest.mark.parametrize("version", ["10.8.0", "11.1.0"])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_profile_engine_reproduces_the_sample(version, cuda_graph):
    graph, ms = _sample()
    trt = make_standin(version, graph, ms)
    backend = StandInBackend()
    p = profile_engine(b"standin-engine", iterations=6, warmup=2, cuda_graph=cuda_graph,
                       input_shapes={"input1": (1, 3, 224, 224)}, trt=trt, backend=backend)
    ref = from_trtexec(profile=mobilenet_files()["profile"], layers=mobilenet_files()["layers"])
    assert len(p.layers) == 72
    assert p.layers["name"].tolist() == ref.layers["name"].tolist()
    assert p.layers["precision"].tolist() == ref.layers["precision"].tolist()
    assert round(p.weight_bytes / 2**20, 1) == 3.3
    # stand-in jitter is +0/+1/+2 % in turn, so the mean over 6 runs is 1.01x the sample's
    assert p.total_ms == pytest.approx(ref.total_ms * 1.01, rel=1e-9)
    assert (p.layers["p90_ms"] >= p.layers["median_ms"]).all()
    assert p.meta["latency_ms"]["mean"] == pytest.approx(0.35)
    assert p.meta["tensorrt_version"] == version and p.meta["source"] == "tensorrt"
    assert backend.graphs == (2 if cuda_graph else 0)
    assert backend.allocated[0] == ((1, 3, 224, 224), "FLOAT")


def test_dynamic_input_without_shape_is_a_clear_error():
    graph, ms = _sample()
    with pytest.raises(ValueError, match="dynamic shape .* input_shapes"):
        profile_engine(b"standin-engine", trt=make_standin("10.8.0", graph, ms),
                       backend=StandInBackend())


def test_bad_engine_blob():
    graph, ms = _sample()
    with pytest.raises(ValueError, match="could not deserialize"):
        profile_engine(b"junk", trt=make_standin("10.8.0", graph, ms), backend=StandInBackend())


def test_build_engine_flags_and_cache(tmp_path):
    graph, ms = _sample()
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx-bytes")
    trt10 = make_standin("10.8.0", graph, ms)
    lines = []
    blob = build_engine(model, fp16=True, workspace_mb=64, shapes={"input1": (1, 3, 224, 224)},
                        cache_dir=tmp_path / "cache", gpu="stand-in", progress=lines.append, trt=trt10)
    cfg = trt10.Builder.last_config
    assert blob == b"standin-engine"
    assert trt10.BuilderFlag.FP16 in cfg.flags and cfg.pools[trt10.MemoryPoolType.WORKSPACE] == 64 << 20
    assert cfg.profiles[0]["input1"] == ((1, 3, 224, 224),) * 3
    trt10.Builder.last_config = None
    assert build_engine(model, fp16=True, workspace_mb=64, shapes={"input1": (1, 3, 224, 224)},
                        cache_dir=tmp_path / "cache", gpu="stand-in", progress=lines.append,
                        trt=trt10) == blob
    assert trt10.Builder.last_config is None and "engine cache hit" in lines[-1]
    trt11 = make_standin("11.1.0", graph, ms)
    with pytest.raises(ValueError, match="strongly typed"):
        build_engine(model, fp16=True, trt=trt11)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="could not parse"):
        build_engine(bad, trt=trt10)


def test_cache_key_changes_with_each_input():
    base = engine_cache_key(b"m", {"fp16": True}, "A100", "10.8.0")
    assert len({base, engine_cache_key(b"m2", {"fp16": True}, "A100", "10.8.0"),
                engine_cache_key(b"m", {"fp16": False}, "A100", "10.8.0"),
                engine_cache_key(b"m", {"fp16": True}, "H100", "10.8.0"),
                engine_cache_key(b"m", {"fp16": True}, "A100", "11.1.0")}) == 5


def test_timing_rows_sums_repeated_names_within_an_iteration():
    rows = timing_rows([(0, "a", 1.0), (0, "b", 2.0), (0, "a", 1.0), (1, "a", 3.0), (1, "b", 2.0)], 2)
    assert [r["name"] for r in rows] == ["a", "b"]
    assert rows[0]["mean_ms"] == pytest.approx(2.5)


def test_missing_tensorrt_says_how_to_get_it(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_trt(name, *a, **k):
        if name == "tensorrt":
            raise ImportError("No module named 'tensorrt'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_trt)
    with pytest.raises(TensorRTUnavailable) as e:
        import_tensorrt()
    assert str(e.value) == INSTALL_HINT and "--exportProfile" in INSTALL_HINT


@pytest.mark.tensorrt
def test_real_tensorrt_is_importable():
    trt = pytest.importorskip("tensorrt")
    assert hasattr(trt, "IProfiler")
