"""LayerProfile speaks the result protocol: summary().to_frame(), save(path) -> Path paired with
hookmagic.load(path), and one project error for each kind of bad file."""
from __future__ import annotations

import json

import pytest

import hookmagic
from hookmagic.common.errors import HookmagicError, InvalidArgument
from hookmagic.layers import LayerFileError, LayerProfile
from hookmagic.layers.model import sniff
from hookmagic.layers.samples import load_sample


@pytest.fixture(scope="module")
def resnet():
    return load_sample("resnet50_fp16")


@pytest.mark.parametrize("suffix", [".parquet", ".json"])
def test_save_and_hookmagic_load_round_trip(resnet, tmp_path, suffix):
    path = resnet.save(tmp_path / f"r{suffix}")
    assert path == tmp_path / f"r{suffix}" and sniff(path)
    back = hookmagic.load(path)
    assert isinstance(back, LayerProfile)
    assert back.total_ms == pytest.approx(resnet.total_ms, rel=1e-12)
    assert list(back.layers["name"]) == list(resnet.layers["name"])
    # the same headline, read back: the layer sum equals the trtexec export's own records
    records = json.loads(open(load_sample.__globals__["sample_files"]("resnet50_fp16")["profile"]).read())
    layer_sum = sum(r["averageMs"] for r in records[1:])
    assert back.summary()["total_ms"] == pytest.approx(layer_sum, rel=1e-6)


def test_sniff_refuses_other_files(tmp_path):
    (tmp_path / "x.json").write_text('{"traceEvents": []}')
    (tmp_path / "y.parquet").write_bytes(b"PAR1 not really")
    assert not sniff(tmp_path / "x.json") and not sniff(tmp_path / "y.parquet")
    assert not sniff(tmp_path)


def test_save_refuses_an_unknown_suffix(resnet, tmp_path):
    with pytest.raises(InvalidArgument):
        resnet.save(tmp_path / "r.txt")


def test_meta_that_is_not_an_object_is_refused(resnet, tmp_path):
    path = resnet.save(tmp_path / "r.json")
    doc = json.loads(path.read_text())
    doc["meta"] = ["not", "an", "object"]
    path.write_text(json.dumps(doc))
    with pytest.raises(LayerFileError, match="meta is a list"):
        LayerProfile.load(path)


def test_a_profile_holding_only_a_count_is_refused(tmp_path):
    from hookmagic.layers import from_trtexec

    path = tmp_path / "p.profile.json"
    path.write_text('[{"count": 10}]')
    with pytest.raises(LayerFileError, match="no layer records"):
        from_trtexec(profile=path)


def test_unknown_sample_names_the_known_ones():
    with pytest.raises(HookmagicError, match="resnet50_fp16"):
        load_sample("resnet51")


@pytest.mark.parametrize("column", ["mean_ms", "median_ms"])
def test_a_saved_profile_with_negative_times_is_refused(resnet, tmp_path, column):
    from hookmagic.layers.errors import LayerNumbersError
    path = resnet.save(tmp_path / "r.json")
    doc = json.loads(path.read_text())
    doc["layers"][3][column] = -1       # SYNTHETIC damage: a value no profiler measures
    path.write_text(json.dumps(doc))
    with pytest.raises(LayerNumbersError, match=f"column {column} holds 1 negative"):
        hookmagic.load(path)


@pytest.mark.parametrize("value", [-7, "ten", float("nan")])
def test_a_saved_profile_with_an_impossible_iteration_count_is_refused(resnet, tmp_path, value):
    from hookmagic.layers.errors import LayerNumbersError
    path = resnet.save(tmp_path / "r.json")
    doc = json.loads(path.read_text())
    doc["meta"]["count"] = value           # SYNTHETIC damage
    path.write_text(json.dumps(doc))
    with pytest.raises(LayerNumbersError, match="not a count"):
        hookmagic.load(path)
