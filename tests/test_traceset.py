"""TraceSet over DuckDB and the cross-rank analyses, on synthetic traces whose stragglers,
latenesses, causes, overlaps and clock offsets are known by construction (tests/synthetic_ranks.py).
Interval unions are checked against the numpy implementation in hookmagic.analysis.intervals."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import hookmagic
from hookmagic.common.intervals import busy_ns
from hookmagic.analysis.ranks import ClockSkewWarning
from hookmagic.trace.folder import save_trace_folder
from hookmagic.traceset import MixedJobsError, TraceSetError
from tests.synthetic_ranks import MS, arrivals, synthetic_rank_traces

# rank 2's host is 5 ms late in step 1; rank 1 computes 3 ms longer in step 2; step 0 and 3:
# rank 0 is 0.4 ms late by host (small but still the last).
HOST = [[0.4, 0, 0, 0.4], [0, 0, 0, 0], [0, 5, 0, 0]]
EXTRA = [[0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 0, 0]]


def _write(tmp_path, traces, names=None):
    for i, t in enumerate(traces):
        save_trace_folder(t, tmp_path / (names[i] if names else f"rank={i}"))
    return tmp_path


@pytest.fixture
def synthetic_set(tmp_path):
    _write(tmp_path, synthetic_rank_traces(HOST, EXTRA))
    ts = hookmagic.load_many(tmp_path)
    yield ts
    ts.close()


def test_views_hold_every_rank(synthetic_set):
    ts = synthetic_set
    assert ts.data_ranks == [0, 1, 2] and ts.job_id == "synthetic-job"
    counts = ts.sql("SELECT rank, count(*) AS n FROM kernels GROUP BY rank ORDER BY rank")
    assert counts["n"].tolist() == [12, 12, 12]
    assert ts.ranks["gpu_uuid"].tolist() == [f"GPU-synthetic-{r}" for r in range(3)]
    steps = ts.sql("SELECT rank, count(*) AS n FROM steps GROUP BY rank ORDER BY rank")
    assert steps["n"].tolist() == [4, 4, 4]
    assert len(ts.sql("SELECT * FROM samples")) == 0  # empty tables are queryable too
    assert "3 ranks" in repr(ts)


def test_stragglers_named_with_lateness_and_cause(synthetic_set):
    st = synthetic_set.stragglers()
    assert st["step"].tolist() == [0, 1, 2, 3]
    assert st["straggler_rank"].tolist() == [0, 2, 1, 0]
    for k in range(4):
        a = arrivals(HOST, EXTRA, k)
        last = int(np.argmax(a))
        want = a[last] - np.median(np.delete(a, last))
        assert st.loc[k, "lateness_ns"] == pytest.approx(want, abs=1)
    assert st.loc[1, "lateness_ns"] == pytest.approx(5 * MS, abs=1)
    assert st.loc[1, "cause"] == "host" and st.loc[2, "cause"] == "compute"
    assert st.loc[1, "extra_idle_ns"] == pytest.approx(5 * MS, abs=1)
    assert st.loc[2, "extra_compute_ns"] == pytest.approx(3 * MS, abs=1)
    # the capture's first collective: measured from each rank's capture start (its first
    # step's start), rank 0's host was 0.4 ms late
    assert st.loc[0, "cause"] == "host"
    assert st.loc[0, "extra_idle_ns"] == pytest.approx(0.4 * MS, abs=1)
    assert (st["capture_start_ns"] == 0).all()  # every rank began capturing together
    # the others waited inside the collective about as long as the straggler was late
    assert st.loc[1, "others_wait_ns"] == pytest.approx(5 * MS, abs=1)


def test_collectives_matched_and_waits(synthetic_set):
    coll = synthetic_set.collectives()
    assert set(coll["collective"]) == {"all_reduce"}
    assert coll.groupby("seq")["rank"].nunique().tolist() == [3, 3, 3, 3]
    step1 = coll[coll["seq"] == 1].set_index("rank")
    assert step1.loc[2, "wait_ns"] == 0 and step1.loc[0, "wait_ns"] == 5 * MS
    skew = synthetic_set.skew()
    assert skew["last_rank"].tolist() == [0, 2, 1, 0]
    assert (skew["transfer_ns"] == 2 * MS).all()


def test_overlap_against_numpy_unions(synthetic_set):
    ov = synthetic_set.overlap().set_index("rank")
    for t_rank in range(3):
        k = synthetic_rank_traces(HOST, EXTRA)[t_rank].kernels
        comm = k["name"].str.startswith("nccl").to_numpy()
        s, e = k["start_ns"].to_numpy(), k["end_ns"].to_numpy()
        assert ov.loc[t_rank, "comm_ns"] == busy_ns(s[comm], e[comm])
        assert ov.loc[t_rank, "compute_ns"] == busy_ns(s[~comm], e[~comm])
        assert ov.loc[t_rank, "busy_ns"] == busy_ns(s, e)
    # each step, the 1 ms side kernel runs inside the collective: 4 ms overlapped per rank
    assert (ov["overlap_ns"] == 4 * MS).all()


def test_summary_and_vs_median(synthetic_set):
    summ = synthetic_set.per_rank().set_index("rank")
    assert summ.loc[0, "times_last"] == 2 and summ.loc[2, "times_last"] == 1
    assert summ.loc[1, "kernels"] == 12
    vm = synthetic_set.vs_median(top=5)
    gemm1 = vm[(vm["name"] == "synthetic_gemm_0") & (vm["rank"] == 1)]
    assert gemm1["delta_ns"].iloc[0] == pytest.approx(3 * MS)  # step 2's longer gemm


def test_clock_alignment_across_hosts(tmp_path):
    off = [0, 0, 1_234_567_890]
    traces = synthetic_rank_traces(HOST, EXTRA, hosts=["a", "a", "b"], offsets_ns=off)
    with hookmagic.load_many(_write(tmp_path, traces)) as ts:
        clock = ts.clock().set_index("rank")
        assert clock.loc[2, "offset_ns"] == off[2] and clock.loc[2, "error_ns"] == 0
        assert clock.loc[1, "offset_ns"] == 0 and clock.loc[2, "method"] == "ends of collectives"
        st = ts.stragglers()
        assert st["straggler_rank"].tolist() == [0, 2, 1, 0]
        assert st.loc[1, "lateness_ns"] == pytest.approx(5 * MS, abs=1)
        iv = ts.timeline()  # the figure draws on the aligned clock
        assert len(iv.data) == 2


def test_unresolvable_clock_warns(tmp_path):
    traces = synthetic_rank_traces(HOST, EXTRA, hosts=["a", "a", "b"])
    k = traces[2].kernels
    traces[2].kernels = k[~k["name"].str.startswith("nccl")].reset_index(drop=True)
    with hookmagic.load_many(_write(tmp_path, traces)) as ts:
        with pytest.warns(ClockSkewWarning, match="no collective in common"):
            clock = ts.clock()
        assert np.isnan(clock.set_index("rank").loc[2, "error_ns"])


def test_missing_damaged_and_unavailable_ranks_reported(tmp_path):
    traces = synthetic_rank_traces(HOST, EXTRA, world_size=5)
    _write(tmp_path, traces)
    (tmp_path / ".rank=3.0a1b2c.tmp").mkdir()                   # died while writing
    unavailable = hookmagic.Trace.empty("synthetic: no GPU", rank={"rank": 4, "world_size": 5,
                                                                   "job_id": "synthetic-job"})
    save_trace_folder(unavailable, tmp_path / "rank=4")
    with pytest.warns(UserWarning, match="2 of 5 ranks cannot be analysed"):
        ts = hookmagic.load_many(tmp_path)
    with ts:
        probs = ts.problems.set_index("rank")
        assert probs.loc[3, "status"] == "damaged" and "writing" in probs.loc[3, "reason"]
        assert probs.loc[4, "status"] == "unavailable"
        assert ts.data_ranks == [0, 1, 2]
        assert ts.stragglers()["straggler_rank"].tolist() == [0, 2, 1, 0]
    # a rank below the world size with nothing at all
    (tmp_path / "rank=4" / "meta.json").unlink()
    with pytest.warns(UserWarning, match="rank 4"):
        hookmagic.load_many(tmp_path).close()


def test_files_folders_and_globs_mix(tmp_path):
    traces = synthetic_rank_traces(HOST, EXTRA)
    traces[0].save(tmp_path / "r0.hmtrace")
    save_trace_folder(traces[1], tmp_path / "rank=1")
    traces[2].save(tmp_path / "r2.hmtrace")
    with hookmagic.load_many([tmp_path / "r0.hmtrace", tmp_path / "rank=1",
                              tmp_path / "r2.hmtrace"]) as ts:
        assert ts.data_ranks == [0, 1, 2]
        assert ts.stragglers()["straggler_rank"].tolist() == [0, 2, 1, 0]
    with pytest.warns(UserWarning, match="rank 1: missing"):
        ts = hookmagic.load_many(str(tmp_path / "*.hmtrace"))
    with ts:
        assert ts.data_ranks == [0, 2]
    full = hookmagic.load_many(tmp_path).trace(1)
    pd.testing.assert_frame_equal(full.kernels, traces[1].kernels)


def test_mixed_jobs_are_one_clear_error_or_picked(tmp_path):
    a = synthetic_rank_traces(HOST, EXTRA, job="job-a")
    b = synthetic_rank_traces(HOST, EXTRA, job="job-b")
    _write(tmp_path, a[:2] + b[2:], names=["rank=0", "rank=1", "other"])
    with pytest.raises(MixedJobsError, match="job-a.*job-b|job-b.*job-a"):
        hookmagic.load_many(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hookmagic.load_many(tmp_path, job="job-a") as ts:
            assert ts.data_ranks == [0, 1]
    with pytest.raises(TraceSetError, match="no trace of job"):
        hookmagic.load_many(tmp_path, job="job-c")


def test_empty_and_bad_paths(tmp_path):
    with pytest.raises(TraceSetError, match="holds no traces"):
        hookmagic.load_many(tmp_path)
    with pytest.raises(TraceSetError, match="no trace matches"):
        hookmagic.load_many(str(tmp_path / "*.hmtrace"))


def test_figures(synthetic_set):
    fig = synthetic_set.straggler_chart()
    assert {t.name for t in fig.data} == {"rank 0 last", "rank 1 last", "rank 2 last"}
    hm = synthetic_set.vs_median_heatmap(top=3)
    assert hm.data[0].z.shape == (3, 3)
    tl = synthetic_set.timeline()
    assert {t.name for t in tl.data} == {"compute kernels", "NCCL collectives"}
