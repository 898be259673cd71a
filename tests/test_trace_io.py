"""Saving and loading traces: exact round trips, clear errors, forward compatibility."""
from __future__ import annotations

import io
import json
import os
import stat
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hookmagic.trace.io import TraceFileError, load_trace, save_trace
from hookmagic.trace.model import Trace


def test_round_trip_preserves_tables_dtypes_and_meta(tmp_path, synthetic_trace):
    path = tmp_path / "synthetic.hmtrace"
    assert synthetic_trace.save(path) == path
    assert isinstance(synthetic_trace.save(str(path)), Path)
    loaded = load_trace(path)
    for name, frame in synthetic_trace.tables.items():
        pd.testing.assert_frame_equal(getattr(loaded, name), frame, check_exact=True)
    assert loaded.meta == synthetic_trace.meta
    # above 2**63: an int64 detour would have turned it negative or failed
    assert int(loaded.memory["address"].iloc[0]) == 0xFFFF_8000_0000_1000
    assert loaded.memory["address"].dtype == "uint64"


def test_file_is_stored_zip_of_zstd_parquet(tmp_path, synthetic_trace):
    path = save_trace(synthetic_trace, tmp_path / "t.hmtrace")
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        # empty tables (here: counters, from captures with counters=) are not stored
        assert set(infos) == {"meta.json"} | {f"{n}.parquet" for n, frame
                                              in synthetic_trace.tables.items() if len(frame)}
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos.values())
        manifest = json.loads(zf.read("meta.json"))
        assert manifest["hookmagic_kind"] == "trace"
        meta = pq.read_metadata(pa.BufferReader(zf.read("kernels.parquet")))
        assert meta.row_group(0).column(0).compression == "ZSTD"
    assert manifest["format"] == "hookmagic.trace"
    assert manifest["tables"]["kernels"]["rows"] == 3


def test_empty_tables_are_not_written_and_load_empty(tmp_path):
    trace = Trace.empty("synthetic: no GPU")
    loaded = load_trace(trace.save(tmp_path / "empty.hmtrace"))
    with zipfile.ZipFile(tmp_path / "empty.hmtrace") as zf:
        assert zf.namelist() == ["meta.json"]
    assert loaded.meta == trace.meta and loaded.meta["status"] == "unavailable"
    assert all(frame.empty for frame in loaded.tables.values())


def test_numpy_values_in_meta_are_saved_as_plain_json(tmp_path):
    import numpy as np
    trace = Trace(meta={"start_ns": np.int64(5), "devices": [{"index": np.int32(0)}]})
    loaded = load_trace(trace.save(tmp_path / "np.hmtrace"))
    assert loaded.meta["start_ns"] == 5 and type(loaded.meta["start_ns"]) is int
    assert loaded.meta["devices"] == [{"index": 0}]


def test_missing_file(tmp_path):
    with pytest.raises(TraceFileError, match="no trace file"):
        load_trace(tmp_path / "nope.hmtrace")


def test_not_a_zip(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(TraceFileError, match="not a hookmagic trace") as err:
        load_trace(path)
    assert "Kineto" in str(err.value)  # says what it can open instead


def test_chrome_json_gets_a_hint(tmp_path):
    path = tmp_path / "kineto.json"
    path.write_text('{"traceEvents": []}')
    with pytest.raises(TraceFileError, match="Chrome/Kineto"):
        load_trace(path)


def test_hookmagic_load_tells_saved_traces_from_kineto_json_by_content(tmp_path, synthetic_trace):
    import hookmagic
    saved = synthetic_trace.save(tmp_path / "t.anyname")
    assert hookmagic.load(saved).meta == synthetic_trace.meta
    # a minimal synthetic Kineto trace: one kernel, named in the file
    path = tmp_path / "kineto.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "synthetic_kernel", "pid": 0, "tid": 7,
         "ts": 10.0, "dur": 2.5, "args": {"device": 0, "stream": 7, "correlation": 1}}]}))
    imported = hookmagic.load(path)
    assert imported.kernels["name"].tolist() == ["synthetic_kernel"]
    assert imported.kernels["duration_ns"].tolist() == [2500]
    assert imported.meta["source"].startswith("import:kineto")
    with pytest.raises(TraceFileError, match="no trace file"):
        hookmagic.load(tmp_path / "missing.hmtrace")


def test_hookmagic_load_opens_saved_trace(tmp_path, synthetic_trace):
    import hookmagic
    loaded = hookmagic.load(synthetic_trace.save(tmp_path / "t.hmtrace"))
    pd.testing.assert_frame_equal(loaded.kernels, synthetic_trace.kernels)


def test_zip_without_meta(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("readme.txt", "hi")
    with pytest.raises(TraceFileError, match="no meta.json"):
        load_trace(path)


def test_truncated_file(tmp_path, synthetic_trace):
    path = tmp_path / "t.hmtrace"
    data = open(synthetic_trace.save(path), "rb").read()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFileError, match="damaged"):
        load_trace(path)


def test_corrupt_parquet(tmp_path, synthetic_trace):
    path = tmp_path / "t.hmtrace"
    synthetic_trace.save(path)
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    entries["kernels.parquet"] = b"PAR1 this is not parquet PAR1"
    _rewrite(path, entries)
    with pytest.raises(TraceFileError, match="damaged.*kernels"):
        load_trace(path)


def test_bad_manifest_json(tmp_path, synthetic_trace):
    path = tmp_path / "t.hmtrace"
    _rewrite(path, {"meta.json": b"{not json"})
    with pytest.raises(TraceFileError, match="not valid JSON"):
        load_trace(path)


def test_trace_file_error_is_a_value_error():
    assert issubclass(TraceFileError, ValueError)


def test_newer_file_unknown_tables_and_columns_warn_and_are_left_out(tmp_path, synthetic_trace):
    path = tmp_path / "t.hmtrace"
    synthetic_trace.save(path)
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(entries["meta.json"])
    manifest["format_version"] = 99
    # a table from the future, a column from the future, and a table left out
    entries["power_events.parquet"] = _parquet(pd.DataFrame({"x": [1, 2]}))
    manifest["tables"]["power_events"] = {"file": "power_events.parquet", "rows": 2}
    kernels = pq.read_table(pa.BufferReader(entries["kernels.parquet"])).to_pandas()
    entries["kernels.parquet"] = _parquet(kernels.assign(cluster_x=1))
    del manifest["tables"]["samples"], entries["samples.parquet"]
    entries["meta.json"] = json.dumps(manifest).encode()
    _rewrite(path, entries)
    with pytest.warns(UserWarning) as record:
        loaded = load_trace(path)
    messages = " | ".join(str(w.message) for w in record)
    assert "newer hookmagic" in messages and "power_events" in messages
    assert "cluster_x" in messages
    assert "cluster_x" not in loaded.kernels.columns and len(loaded.kernels) == 3
    assert loaded.samples.empty


def test_newer_file_unknown_allocator_actions_warn_and_are_left_out(tmp_path, synthetic_trace):
    path = tmp_path / "t.hmtrace"
    synthetic_trace.save(path)
    with zipfile.ZipFile(path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    events = pq.read_table(pa.BufferReader(entries["allocator_events.parquet"])).to_pandas()
    events.loc[1, "action"] = "synthetic_future_action"
    entries["allocator_events.parquet"] = _parquet(events)
    _rewrite(path, entries)
    with pytest.warns(UserWarning, match="synthetic_future_action"):
        loaded = load_trace(path)
    assert len(loaded.allocator_events) == len(events) - 1
    assert "synthetic_future_action" not in set(loaded.allocator_events["action"])


def test_writer_extra_columns_survive_round_trip(tmp_path, synthetic_trace, recwarn):
    tables = synthetic_trace.tables
    tables["kernels"] = tables["kernels"].assign(import_note=["a", "b", "c"])
    trace = Trace(tables, synthetic_trace.meta)
    loaded = load_trace(trace.save(tmp_path / "x.hmtrace"))
    assert loaded.kernels["import_note"].tolist() == ["a", "b", "c"]
    assert not [w for w in recwarn if "unknown" in str(w.message)]


def test_failed_save_leaves_previous_file(tmp_path, synthetic_trace):
    path = tmp_path / "t.hmtrace"
    synthetic_trace.save(path)
    before = path.read_bytes()
    bad = Trace(meta={"oops": object()})
    with pytest.raises(TypeError):
        bad.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.hmtrace"]


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf)
    return buf.getvalue()


def _rewrite(path, entries: dict) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_saved_file_has_the_users_default_permissions(tmp_path, synthetic_trace):
    # A trace is meant to be shared: readable by whoever the umask allows, not private (0600).
    old = os.umask(0o022)
    try:
        path = Path(synthetic_trace.save(tmp_path / "shared.hmtrace"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
