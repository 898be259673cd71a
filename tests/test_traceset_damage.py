"""Rank folders that are damaged in their tables, repeated, or asked impossible things: the
damaged rank is marked so (the others analysed), a repeat is reported, bad arguments are the
project's own errors. The rank folders are written by capture(dir=...)'s own writer from
synthetic traces whose stragglers are known by construction (tests/synthetic_ranks.py)."""
from __future__ import annotations

import json
import shutil
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hookmagic
from hookmagic.common.errors import InvalidArgument
from hookmagic.trace.folder import save_trace_folder
from tests.synthetic_ranks import synthetic_rank_traces

pytest.importorskip("duckdb")
HOST = [[0.4, 0, 0, 0.4], [0, 0, 0, 0], [0, 5, 0, 0], [0, 0, 0, 0]]
EXTRA = [[0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 0, 0], [0, 0, 0, 0]]


@pytest.fixture
def four_ranks(tmp_path):
    for r, t in enumerate(synthetic_rank_traces(HOST, EXTRA)):
        save_trace_folder(t, tmp_path / f"rank={r}")
    return tmp_path


def _analysed(folder, match):
    with pytest.warns(UserWarning, match=match):
        ts = hookmagic.load_many(folder)
    return ts


def test_corrupt_parquet_in_one_rank_marks_it_damaged_and_the_others_are_analysed(four_ranks):
    path = four_ranks / "rank=3" / "kernels.parquet"
    path.write_bytes(path.read_bytes()[:200] + b"synthetic garbage")
    ts = _analysed(four_ranks, "rank 3")
    with ts:
        assert ts.member(3).status == "damaged"
        assert ts.data_ranks == [0, 1, 2]
        st = ts.stragglers()
        assert st["straggler_rank"].tolist() == [0, 2, 1, 0]
        assert len(ts.sql("SELECT DISTINCT rank FROM kernels")) == 3   # views leave it out


def test_a_kernels_table_without_duration_is_damaged_not_null(four_ranks):
    path = four_ranks / "rank=1" / "kernels.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["duration_ns"]), path)
    ts = _analysed(four_ranks, "lacks duration_ns")
    with ts:
        assert ts.member(1).status == "damaged" and "duration_ns" in ts.member(1).reason
        assert set(ts.per_rank().dropna(subset=["busy_ns"])["rank"]) == {0, 2, 3}


def test_a_copy_of_a_rank_under_another_name_is_reported(four_ranks):
    shutil.copytree(four_ranks / "rank=2", four_ranks / "copy-of-rank-2")
    with pytest.warns(UserWarning, match="copy-of-rank-2"):
        ts = hookmagic.load_many(four_ranks)
    with ts:
        assert [(r, p.endswith("copy-of-rank-2")) for r, p, _ in ts.duplicates] == [(2, True)]
        assert ts.summary()["duplicates_left_out"] == 1


@pytest.mark.parametrize("field,value", [("local_rank", "abc"), ("device", None),
                                         ("device", {"x": 1})])
def test_odd_identity_values_do_not_break_the_rank_table(four_ranks, field, value):
    meta_path = four_ranks / "rank=0" / "meta.json"
    doc = json.loads(meta_path.read_text())
    doc["meta"]["rank"][field] = value
    doc["meta"]["devices"] = [{"index": "zero"}, "not a device"]
    meta_path.write_text(json.dumps(doc))
    with hookmagic.load_many(four_ranks) as ts:
        assert ts.ranks["rank"].tolist() == [0, 1, 2, 3]
        assert ts.ranks.set_index("rank").loc[0, field] == -1


def test_impossible_analysis_arguments_are_refused(four_ranks):
    with hookmagic.load_many(four_ranks) as ts:
        for top in (-1, 0, 2.5, True, "3"):
            with pytest.raises(InvalidArgument, match="top"):
                ts.vs_median(top=top)
        for err in (-1, float("nan"), float("inf"), "1"):
            with pytest.raises(InvalidArgument, match="max_error_ns"):
                ts.clock(max_error_ns=err)


def test_rank_with_empty_tables_is_analysed_from_its_kernels_only(tmp_path):
    # an empty table has no file in the views: the set still answers every table
    t = synthetic_rank_traces(HOST[:2], EXTRA[:2])
    for r in range(2):
        save_trace_folder(t[r], tmp_path / f"rank={r}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with hookmagic.load_many(tmp_path) as ts:
            assert len(ts.sql("SELECT * FROM memcpy")) == 0
            assert pa.Table.from_pandas(ts.sql("SELECT * FROM kernels")).num_rows == 24


@pytest.mark.parametrize("how", ["link", "subfolder", "absolute"])
def test_a_table_leading_outside_its_folder_is_refused(four_ranks, tmp_path_factory, how):
    outside = tmp_path_factory.mktemp("outside") / "secret.parquet"
    shutil.copyfile(four_ranks / "rank=0" / "kernels.parquet", outside)
    folder = four_ranks / "rank=2"
    doc = json.loads((folder / "meta.json").read_text())
    if how == "link":
        (folder / "kernels.parquet").unlink()
        (folder / "kernels.parquet").symlink_to(outside)
    else:
        doc["tables"]["kernels"]["file"] = "sub/../../x" if how == "subfolder" else str(outside)
        (folder / "meta.json").write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="rank 2"):
        ts = hookmagic.load_many(four_ranks)
    with ts:
        assert ts.member(2).status == "damaged" and "outside" in ts.member(2).reason
        assert ts.data_ranks == [0, 1, 3]
