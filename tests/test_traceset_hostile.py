"""Hostile rank folders and arguments: load_many refuses them with its own errors, reads nothing
outside a rank's folder, builds nothing per claimed rank, and puts nothing from a file into the
notebook's HTML unescaped."""
from __future__ import annotations

import json
import warnings

import pytest

import hookmagic
from hookmagic.common.errors import HookmagicError, InvalidArgument

pytest.importorskip("duckdb")


def _rank_folder(tmp_path, rank=0, world_size=1, job_id="synthetic-job", host="synthetic-host"):
    """A real rank folder written by capture(dir=...)'s own writer, from a synthetic trace."""
    from pathlib import Path

    from hookmagic.distributed.identity import RankIdentity
    from hookmagic.distributed.output import save_rank_trace
    from tests.synthetic import synthetic

    ident = RankIdentity(rank=rank, world_size=world_size, job_id=job_id, host=host)
    return Path(save_rank_trace(synthetic(), tmp_path, ident))


def _load(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hookmagic.load_many(folder)


def test_a_manifest_pointing_outside_its_folder_is_refused_and_nothing_outside_is_read(tmp_path):
    runs = tmp_path / "runs"
    folder = _rank_folder(runs)
    secret = tmp_path / "outside" / "secret.parquet"
    secret.parent.mkdir()
    meta_path = folder / "meta.json"
    doc = json.loads(meta_path.read_text())
    (name, info), = [(n, i) for n, i in doc["tables"].items() if n == "kernels"]
    secret.write_bytes((folder / info["file"]).read_bytes())   # a valid table, outside
    info["file"] = "../../outside/secret.parquet"
    meta_path.write_text(json.dumps(doc))
    ts = _load(runs)
    row = ts.ranks.set_index("rank").loc[0]
    assert row["status"] == "damaged" and "outside" in row["reason"]
    with ts:
        assert len(ts.sql("SELECT * FROM kernels")) == 0


def test_html_of_a_set_escapes_what_the_files_say(tmp_path):
    _rank_folder(tmp_path, job_id="<img src=x onerror=alert(1)>", host="<script>x</script>")
    ts = _load(tmp_path)
    page = ts._repr_html_()
    assert "<img" not in page and "<script>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize("field,value", [("world_size", 10**9), ("rank", 10**12),
                                         ("rank", "abc"), ("rank", None), ("world_size", "x")])
def test_impossible_rank_values_make_one_damaged_member_not_a_billion(tmp_path, field, value):
    folder = _rank_folder(tmp_path)
    meta_path = folder / "meta.json"
    doc = json.loads(meta_path.read_text())
    doc["meta"]["rank"][field] = value
    meta_path.write_text(json.dumps(doc))
    ts = _load(tmp_path)
    assert len(ts.members) == 1
    assert ts.members[0].status == "damaged" and field.replace("_", " ") in ts.members[0].reason


def test_arguments_are_checked_before_anything_is_opened(tmp_path):
    _rank_folder(tmp_path)
    with pytest.raises(InvalidArgument):
        hookmagic.load_many(tmp_path, memory_limit="1GB'; ATTACH 'x")
    with pytest.raises(InvalidArgument):
        hookmagic.load_many(tmp_path, threads=0)
    with pytest.raises(HookmagicError, match="no paths"):
        hookmagic.load_many([])


def _kernels_file(folder):
    doc = json.loads((folder / "meta.json").read_text())
    return folder / doc["tables"]["kernels"]["file"]


def _two_rank_traces():
    from tests.synthetic_ranks import synthetic_rank_traces
    return synthetic_rank_traces([[0.4, 0], [0, 0]], [[0, 0], [0, 0]], world_size=2)


def _two_ranks(tmp_path):
    """Two rank folders with kernels (SYNTHETIC, tests/synthetic_ranks.py)."""
    from hookmagic.trace.folder import save_trace_folder
    runs = tmp_path / "runs"
    folders = []
    for r, t in enumerate(_two_rank_traces()):
        save_trace_folder(t, runs / f"rank={r}")
        folders.append(runs / f"rank={r}")
    return runs, folders


def test_a_rank_whose_kernels_file_is_a_fifo_is_damaged_without_blocking(tmp_path):
    import os
    runs, (_, one) = _two_ranks(tmp_path)
    path = _kernels_file(one)
    path.unlink()
    os.mkfifo(path)        # reading it would wait forever for a writer
    ts = _load(runs)
    row = ts.ranks.set_index("rank").loc[1]
    assert row["status"] == "damaged" and "not a regular file" in row["reason"]
    with ts:
        assert set(ts.sql("SELECT DISTINCT rank FROM kernels")["rank"]) == {0}


@pytest.mark.parametrize("change, why", [
    (lambda d: d.assign(duration_ns=-d["duration_ns"] - 1), "negative durations"),
    (lambda d: d.assign(duration_ns=d["duration_ns"].astype(str)), "not integer nanoseconds"),
])
def test_a_rank_whose_kernel_times_cannot_be_summed_is_damaged(tmp_path, change, why):
    import pandas as pd
    runs, (_, one) = _two_ranks(tmp_path)
    path = _kernels_file(one)
    pd.read_parquet(path).pipe(change).to_parquet(path, index=False)
    ts = _load(runs)
    row = ts.ranks.set_index("rank").loc[1]
    assert row["status"] == "damaged" and why in row["reason"]
    with ts:   # the analyses run over the rank left
        assert set(ts.sql("SELECT DISTINCT rank FROM kernels")["rank"]) == {0}


def test_an_hmtrace_whose_kernels_entry_is_a_decompression_bomb_is_damaged_cheaply(tmp_path):
    import resource
    import zipfile

    traces = _two_rank_traces()
    good = traces[0].save(tmp_path / "rank0.hmtrace")
    plain = traces[1].save(tmp_path / "plain1.hmtrace")
    bomb = tmp_path / "rank1.hmtrace"
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith("kernels"):
                # SYNTHETIC: 1 GiB of zeros compresses about 1000x; a real table, 3-30x
                with dst.open(info.filename, "w", force_zip64=True) as fh:
                    chunk = bytes(1 << 24)
                    for _ in range(64):
                        fh.write(chunk)
            else:
                dst.writestr(info, src.read(info))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ts = _load([good, bomb])
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    row = ts.ranks.set_index("rank").loc[1]
    assert row["status"] == "damaged" and "expands more than" in row["reason"]
    assert grown_mb < 256, f"{grown_mb:.0f} MB more at peak"


def test_a_huge_claimed_world_gives_a_short_warning_quickly(tmp_path):
    from hookmagic.traceset.members import MAX_RANKS
    _rank_folder(tmp_path, world_size=MAX_RANKS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ts = hookmagic.load_many(tmp_path)
    assert len(ts) == MAX_RANKS and len(ts.problems) == MAX_RANKS - 1
    assert max(len(str(w.message)) for w in caught) < 5_000
    assert any(f"... and {MAX_RANKS - 1 - 20:,} more" in str(w.message) for w in caught)


@pytest.mark.parametrize("bad", [5, [None], {"rank=0": 1}, b"runs"])
def test_load_many_takes_paths_only(bad):
    with pytest.raises(HookmagicError, match="load_many takes"):
        hookmagic.load_many(bad)


def test_a_rank_block_that_is_not_an_object_makes_the_rank_damaged(tmp_path):
    runs, (_, one) = _two_ranks(tmp_path)
    doc = json.loads((one / "meta.json").read_text())
    doc["meta"]["rank"] = [1, 2]
    (one / "meta.json").write_text(json.dumps(doc))
    row = _load(runs).ranks.set_index("rank").loc[1]
    assert row["status"] == "damaged" and "rank block is list" in row["reason"]


@pytest.mark.parametrize("kw", [{"memory_limit": "1B"}, {"memory_limit": "9999999TB"},
                                {"memory_limit": "0"}, {"threads": 4096}])
def test_duckdb_settings_out_of_range_are_refused_before_duckdb(tmp_path, kw):
    runs, _ = _two_ranks(tmp_path)
    with pytest.raises(InvalidArgument):
        hookmagic.load_many(runs, **kw)


def test_a_query_duckdb_refuses_is_the_sets_own_error(tmp_path):
    from hookmagic.traceset.members import TraceSetQueryError
    runs, _ = _two_ranks(tmp_path)
    with _load(runs) as ts:
        with pytest.raises(TraceSetQueryError, match="syntax error"):
            ts.sql("selec 1")
        with pytest.raises(TraceSetQueryError):
            ts.sql("SELECT no_such_column FROM kernels")
        assert ts.sql("SELECT count(*) AS n FROM kernels")["n"][0] > 0


def test_a_temporary_folder_with_glob_characters_in_its_path(tmp_path, monkeypatch):
    import tempfile
    runs, _ = _two_ranks(tmp_path)
    odd = tmp_path / "tmp[1]*?'q"
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))   # where the set stages its files
    with _load(runs) as ts:
        assert "[1]" in ts._stage
        assert set(ts.sql("SELECT DISTINCT rank FROM kernels")["rank"]) == {0, 1}
        assert len(ts.stragglers()) > 0


def test_a_set_whose_every_rank_is_damaged_answers_with_empty_tables(tmp_path):
    from hookmagic.traceset.members import MAX_RANKS
    paths = []
    for i, t in enumerate(_two_rank_traces()):
        t.meta["rank"]["rank"] = MAX_RANKS + i        # beyond what a set may hold: damaged
        paths.append(t.save(tmp_path / f"r{i}.hmtrace"))
    with _load(paths) as ts:
        assert set(ts.ranks["status"]) == {"damaged"}
        per = ts.per_rank()    # one row per rank, each saying it is damaged
        assert len(per) == 2 and set(per["status"]) == {"damaged"}
        assert len(ts.stragglers()) == 0 and len(ts.overlap()) == 0
        assert ts.summary()["with_data"] == 0 and "damaged" in ts._repr_html_()


@pytest.mark.parametrize("capture", [-1, "0", 1.5, True])
def test_load_many_capture_is_a_whole_number(tmp_path, capture):
    runs, _ = _two_ranks(tmp_path)
    with pytest.raises(InvalidArgument, match="capture="):
        hookmagic.load_many(runs, capture=capture)


def test_a_rank_whose_meta_json_links_outside_is_damaged(tmp_path):
    import shutil
    runs, (_, one) = _two_ranks(tmp_path)
    outside = tmp_path / "outside"
    shutil.copytree(one, outside)
    doc = json.loads((outside / "meta.json").read_text())
    doc["meta"]["label"] = "SYNTHETIC_SECRET_LABEL"
    (outside / "meta.json").write_text(json.dumps(doc))
    (one / "meta.json").unlink()
    (one / "meta.json").symlink_to(outside / "meta.json")
    ts = _load(runs)
    row = ts.ranks.set_index("rank").loc[1]
    assert row["status"] == "damaged" and "link to a file outside" in row["reason"]
    assert "SYNTHETIC_SECRET_LABEL" not in repr(ts.members)
