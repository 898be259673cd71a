"""LayerProfile: top, save/load round trips (Parquet and JSON, no pickle), display."""
from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from hookmagic.layers import LAYER_COLUMNS, LayerFileError, LayerProfile, from_trtexec

from .layers_samples import mobilenet_files


@pytest.fixture(scope="module")
def mobilenet() -> LayerProfile:
    return from_trtexec(**mobilenet_files())


def test_columns_are_the_documented_ones(mobilenet):
    assert list(mobilenet.layers.columns) == list(LAYER_COLUMNS)
    assert mobilenet.layers["order"].tolist() == list(range(72))


def test_top_is_sorted_and_agrees_with_the_profile_file(mobilenet):
    raw = json.loads(mobilenet_files()["profile"].read_text())[1:]
    expected = sorted(raw, key=lambda r: -r["averageMs"])[:5]
    top = mobilenet.top(5)
    assert top["name"].tolist() == [r["name"] for r in expected]
    assert top["mean_ms"].is_monotonic_decreasing


@pytest.mark.parametrize("suffix", [".parquet", ".json"])
def test_save_load_round_trip(mobilenet, tmp_path, suffix):
    path = mobilenet.save(tmp_path / f"m{suffix}")
    back = LayerProfile.load(path)
    pd.testing.assert_frame_equal(back.layers, mobilenet.layers)
    assert back.total_ms == mobilenet.total_ms
    assert back.meta["latency_ms"] == mobilenet.meta["latency_ms"]
    assert len(back.times) == len(mobilenet.times)
    assert back.layers["source_nodes"].iloc[1] == mobilenet.layers["source_nodes"].iloc[1]


def test_load_rejects_foreign_files(tmp_path):
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"layers": [], "format": "something else"}))
    with pytest.raises(LayerFileError, match="not a hookmagic LayerProfile"):
        LayerProfile.load(other)
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(LayerFileError, match="no metadata"):
        LayerProfile.load(tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=".parquet or .json"):
        LayerProfile(layers=pd.DataFrame()).save(tmp_path / "x.pkl")


def test_repr_and_mimebundle(mobilenet):
    assert "72 layers" in repr(mobilenet) and "0.470 ms" in repr(mobilenet)
    bundle = mobilenet._repr_mimebundle_()
    assert "text/html" in bundle and "<table" in bundle["text/html"]


def test_summary_is_json_serialisable(mobilenet):
    s = mobilenet.summary()
    assert json.loads(json.dumps(s.to_dict()))["layers"] == 72
    assert s["weights_mib"] == pytest.approx(3.309, abs=1e-3)
    frame = s.to_frame()
    assert frame.loc["layers", "value"] == 72 and frame.loc["weights_mib", "unit"] == "MiB"


def test_shipped_samples_are_the_files_these_tests_read():
    from hookmagic.layers.samples import SAMPLES, load_sample, sample_files

    from .layers_samples import DATA
    for name, (folder, _) in SAMPLES.items():
        for key, path in sample_files(name).items():
            assert path.resolve() == (DATA / folder / path.name).resolve(), (name, key)
            raw = path.read_bytes()
            assert path.is_file() and json.loads(gzip.decompress(raw) if path.suffix == ".gz"
                                                 else raw), (name, key)
    p = load_sample("mobilenet_qat")
    assert p.meta["device"] == "NVIDIA TITAN RTX" and round(p.total_ms, 3) == 0.470
    assert (sample_files("mobilenet_qat")["profile"].parent.parent / "LICENSE-Apache-2.0.txt").is_file()
