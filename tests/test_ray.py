"""hookmagic.ray against a real local Ray cluster (one per module: started here, bound to
127.0.0.1, stopped at the end; every wait is bounded). Without a GPU the captures are
"unavailable" and say why; the plumbing, the gathering, analyses of sent traces (synthetic
traces whose stragglers are known by construction), and a worker dying mid-capture are real."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import pandas as pd  # noqa: E402

import hookmagic  # noqa: E402
import hookmagic.ray as hray  # noqa: E402
from hookmagic.common.errors import InvalidArgument  # noqa: E402
from tests.synthetic_ranks import MS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HOST = [[0.4, 0, 0, 0.4], [0, 0, 0, 0], [0, 5, 0, 0]]
EXTRA = [[0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 0, 0]]
T = 180  # seconds: the bound on every wait (a worker's first import of torch on a busy 2-core machine can take a minute)


@pytest.fixture(scope="module")
def cluster():
    if sys.platform != "linux":
        pytest.skip("the Ray tests run on Linux")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    for attempt in range(3):  # Ray gives its raylet 30 s to start: a busy machine can miss it
        try:
            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                     log_to_driver=False, configure_logging=False,
                     runtime_env={"env_vars": {"PYTHONPATH": path, "PYTHONWARNINGS": "ignore"}})
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    try:
        yield
    finally:
        try:
            hray.shutdown_collector()
        finally:
            ray.shutdown()


@ray.remote(num_cpus=0)
class Worker:
    def work(self, session: str, n: int) -> dict:
        import hookmagic.ray as hray

        with hray.capture(session, nvml=False) as trace:
            sum(range(n))
        return {"status": trace.status, "reason": trace.meta.get("reason", "")}

    def die_mid_capture(self, session: str) -> None:
        import hookmagic.ray as hray

        cap = hray.capture(session, nvml=False)
        cap.__enter__()
        os._exit(1)  # the worker is lost while its capture runs


@ray.remote(num_cpus=0)
def send_synthetic(session: str, rank: int) -> int:
    import hookmagic.ray as hray
    from tests.synthetic_ranks import synthetic_rank_traces

    trace = synthetic_rank_traces([[0.4, 0, 0, 0.4], [0, 0, 0, 0], [0, 5, 0, 0]],
                                  [[0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 0, 0]])[rank]
    return hray.send(trace, session, rank=rank)


def test_actor_captures_gathered_on_driver(cluster, tmp_path):
    workers = [Worker.remote() for _ in range(2)]
    try:
        results = ray.get([w.work.remote("actors", 10_000) for w in workers], timeout=T)
    finally:
        for w in workers:
            ray.kill(w)
    with pytest.warns(UserWarning) if results[0]["status"] == "unavailable" else _nothing():
        ts = hray.gather("actors", dir=tmp_path, timeout_s=T)
    with ts:
        assert sorted(m.rank for m in ts.members) == [0, 1]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["rank=0.hmtrace", "rank=1.hmtrace"]
        ranks = ts.ranks
        assert (ranks["launcher"] == "ray").all() and (ranks["world_size"] == 2).all()
        assert ts.job_id == ray.get_runtime_context().get_job_id()
        for m in ts.members:
            assert m.meta["rank"]["ray_actor_id"] and m.meta["rank"]["ray_node_id"]
            if m.status == "unavailable":
                assert m.reason == results[0]["reason"]
    with pytest.raises(hray.GatherError):  # gathered sessions are cleared
        hray.gather("actors", timeout_s=5)


def test_sent_traces_analysed_like_local_ones(cluster, tmp_path):
    ranks = ray.get([send_synthetic.remote("sent", r) for r in (2, 0, 1)], timeout=T)
    assert ranks == [2, 0, 1]
    with hray.gather("sent", dir=tmp_path, timeout_s=T) as ts:
        assert ts.data_ranks == [0, 1, 2]
        st = ts.stragglers()
        assert st["straggler_rank"].tolist() == [0, 2, 1, 0]
        assert st.loc[1, "lateness_ns"] == pytest.approx(5 * MS, abs=1)
        assert st.loc[1, "cause"] == "host" and st.loc[2, "cause"] == "compute"


def test_worker_lost_mid_capture_is_missing_and_others_kept(cluster, tmp_path):
    good, doomed = Worker.remote(), Worker.remote()
    try:
        ray.get(good.work.remote("lost", 1000), timeout=T)
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(doomed.die_mid_capture.remote("lost"), timeout=T)
    finally:
        ray.kill(good)
    with pytest.warns(UserWarning, match="died during its capture"):
        ts = hray.gather("lost", dir=tmp_path, timeout_s=T)
    with ts:
        by_rank = {m.rank: m for m in ts.members}
        assert by_rank[1].status == "missing" and "died during its capture" in by_rank[1].reason
        assert by_rank[0].layout == "file"  # the finished capture was kept


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_hostile_arguments_refused_before_anything_is_stored(cluster, tmp_path):
    trace = hookmagic.Trace.empty("synthetic: nothing")
    for rank in ("../x", -1, 2.0, True, 1 << 40):
        with pytest.raises(InvalidArgument, match="rank"):
            hray.send(trace, "hostile", rank=rank)
    coll = hray.collector(create=False)
    if coll is not None:
        assert ray.get(coll.status.remote("hostile"), timeout=T) == {}
    (tmp_path / "a-file").write_text("synthetic")
    with pytest.raises(InvalidArgument, match="not a folder"):
        hray.gather("hostile", dir=tmp_path / "a-file")
    for bad in (float("nan"), -1, 0, float("inf"), "5"):
        with pytest.raises(InvalidArgument, match="timeout_s"):
            hray.gather("hostile", timeout_s=bad)
    with pytest.raises(InvalidArgument, match="session"):
        hray.gather(None)
    for bad_session in ("../x", "a/b", "", ".."):     # the name becomes part of a folder's name
        with pytest.raises(InvalidArgument, match="session"):
            hray.send(trace, bad_session, rank=0)
    for not_a_trace in (object(), None, "rank=0.hmtrace"):
        with pytest.raises(InvalidArgument, match="takes a hookmagic Trace"):
            hray.send(not_a_trace, "hostile", rank=0)


def test_gather_never_replaces_a_file_in_its_folder(cluster, tmp_path):
    ray.get(send_synthetic.remote("kept", 0), timeout=T)
    mine = tmp_path / "rank=0.hmtrace"
    mine.write_bytes(b"SYNTHETIC: a file of the user's")
    with pytest.raises(InvalidArgument, match="already holds rank=0.hmtrace"):
        hray.gather("kept", dir=tmp_path, timeout_s=T)
    assert mine.read_bytes() == b"SYNTHETIC: a file of the user's"
    with hray.gather("kept", dir=tmp_path / "new", timeout_s=T) as ts:   # the trace was kept
        assert ts.data_ranks == [0]


def test_overlap_on_ray_equals_the_local_engine(cluster, tmp_path):
    from hookmagic.trace.folder import save_trace_folder
    from tests.synthetic_ranks import synthetic_rank_traces

    for r, t in enumerate(synthetic_rank_traces(HOST, EXTRA)):
        save_trace_folder(t, tmp_path / f"rank={r}")
    with hookmagic.load_many(tmp_path) as ts:
        local = ts.overlap()
    distributed = hray.overlap(tmp_path, ranks_per_task=2, timeout_s=T)   # two tasks
    pd.testing.assert_frame_equal(distributed, local)
    assert (distributed["overlap_ns"] == 4 * MS).all()   # by construction of the traces


# A SYNTHETIC set for the analyses on Ray: rank 4 (host "c", alone on its clock) is late by
# its host 2 ms in steps 0 and 3 and computes 3 ms longer in step 2; rank 2's host is 5 ms late
# in step 1. Rank 3's kernels file is corrupt (damaged), rank 5 is below the world size with
# no trace (missing), and a copy of rank 2 sits under another name (a duplicate). Hosts "b"
# and "c" run on clocks offset from host "a"'s.
LATE_HOST = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 5, 0, 0], [0, 0, 0, 0], [2, 0, 0, 2]]
LATE_EXTRA = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 3, 0]]
LATE_HOSTS = ["a", "a", "b", "b", "c"]
LATE_OFFSETS = [0, 0, 1_234_567_890, 1_234_567_890, -987_654_321]


@pytest.fixture
def late_set(tmp_path):
    import shutil

    from hookmagic.trace.folder import save_trace_folder
    from tests.synthetic_ranks import synthetic_rank_traces

    traces = synthetic_rank_traces(LATE_HOST, LATE_EXTRA, hosts=LATE_HOSTS,
                                   offsets_ns=LATE_OFFSETS, world_size=6)
    for r, t in enumerate(traces[:4]):
        save_trace_folder(t, tmp_path / f"rank={r}")
    traces[4].save(tmp_path / "r4.hmtrace")                      # a single-file trace too
    shutil.copytree(tmp_path / "rank=2", tmp_path / "copy-of-rank-2")
    kernels = tmp_path / "rank=3" / "kernels.parquet"
    kernels.write_bytes(kernels.read_bytes()[:200] + b"synthetic garbage")
    return tmp_path


def _local(path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = hookmagic.load_many(path)
    return ts


def test_stragglers_summary_and_overlap_on_ray_equal_the_local_engine(cluster, late_set):
    import numpy as np

    from tests.synthetic_ranks import arrivals

    with _local(late_set) as ts:
        local = {"stragglers": ts.stragglers(), "summary": ts.summary().to_frame(),
                 "overlap": ts.overlap(), "skew": ts.skew(), "per_rank": ts.per_rank()}
    # 2 paths a task: rank=2 and its copy are read by different tasks, rank 3 is damaged
    # in one task and rank 5 is missing from all of them
    with pytest.warns(UserWarning, match=r"hookmagic.ray.stragglers: 2 of 6 ranks cannot be "
                                         r"analysed.*rank 3: damaged.*rank 5: missing"):
        st = hray.stragglers(late_set, ranks_per_task=2, timeout_s=T)
    pd.testing.assert_frame_equal(st, local["stragglers"])
    with pytest.warns(UserWarning, match="hookmagic.ray.summary: 2 of 6 ranks"):
        summary = hray.summary(late_set, ranks_per_task=2, timeout_s=T)
    pd.testing.assert_frame_equal(summary.to_frame(), local["summary"])
    with pytest.warns(UserWarning, match="hookmagic.ray.overlap: 2 of 6 ranks"):
        ov = hray.overlap(late_set, ranks_per_task=2, timeout_s=T)
    pd.testing.assert_frame_equal(ov, local["overlap"])
    with pytest.warns(UserWarning, match="hookmagic.ray.skew: 2 of 6 ranks"):
        sk = hray.skew(late_set, ranks_per_task=2, timeout_s=T)
    pd.testing.assert_frame_equal(sk, local["skew"])
    with pytest.warns(UserWarning, match="hookmagic.ray.per_rank: 2 of 6 ranks"):
        per = hray.per_rank(late_set, ranks_per_task=2, timeout_s=T)
    pd.testing.assert_frame_equal(per, local["per_rank"])

    # what the synthetic set was built to show, on clocks aligned across three hosts
    assert st["straggler_rank"].tolist() == [4, 2, 4, 4]
    assert st["cause"].tolist() == ["host", "host", "compute", "host"]
    analysed = [0, 1, 2, 4]                                     # rank 3 is damaged
    for k in range(4):
        a = arrivals(LATE_HOST, LATE_EXTRA, k)[analysed]
        last = int(np.argmax(a))
        want = a[last] - np.median(np.delete(a, last))
        assert st.loc[k, "lateness_ns"] == pytest.approx(want, abs=1)
    assert st.loc[2, "extra_compute_ns"] == pytest.approx(3 * MS, abs=1)
    assert summary["ranks"] == 6 and summary["with_data"] == 4 and summary["problems"] == 2
    assert summary["most_often_last"] == 4 and summary["times_last"] == 3
    assert summary["duplicates_left_out"] == 1
    assert summary.title == "hookmagic.TraceSet job synthetic-job"
    assert ov["rank"].tolist() == analysed and (ov["overlap_ns"] == 4 * MS).all()
    # the skew's last arrivals are the stragglers', and the per-rank table counts them
    assert sk["last_rank"].tolist() == [4, 2, 4, 4]
    assert per.set_index("rank").loc[[4, 2], "times_last"].tolist() == [3, 1]
    assert per.set_index("rank").loc[5, "status"] == "missing"


def test_stragglers_of_a_real_two_gpu_recording_on_ray_equal_the_local_engine(cluster):
    import json

    runs = ROOT / "notebooks" / "recordings" / "multirank" / "ddp_slow0_50ms"
    truth = json.loads((runs / "truth_rank=0.json").read_text())
    with _local(runs) as ts:
        local, summary = ts.stragglers(), ts.summary().to_frame()
        local_per = ts.per_rank()
    st = hray.stragglers(runs, ranks_per_task=1, timeout_s=T)     # one task per rank
    pd.testing.assert_frame_equal(st, local)
    pd.testing.assert_frame_equal(hray.per_rank(runs, ranks_per_task=1, timeout_s=T), local_per)
    pd.testing.assert_frame_equal(hray.summary(runs, ranks_per_task=1, timeout_s=T).to_frame(),
                                  summary)
    assert (st["straggler_rank"] == truth["slow_rank"]).all() and (st["cause"] == "host").all()


def test_analyses_on_ray_refuse_bad_arguments_and_mixed_jobs(cluster, tmp_path):
    from hookmagic.trace.folder import save_trace_folder
    from hookmagic.traceset import MixedJobsError
    from tests.synthetic_ranks import synthetic_rank_traces

    for analysis in (hray.summary, hray.stragglers, hray.overlap, hray.skew, hray.per_rank):
        for bad in (0, -1, 1.5, True, "2"):
            with pytest.raises(InvalidArgument, match="ranks_per_task"):
                analysis(tmp_path, ranks_per_task=bad)
        for bad in (float("nan"), 0, float("inf"), "5"):
            with pytest.raises(InvalidArgument, match="timeout_s"):
                analysis(tmp_path, timeout_s=bad)
    a = synthetic_rank_traces(HOST, EXTRA, job="job-a")
    b = synthetic_rank_traces(HOST, EXTRA, job="job-b")
    for r, t in enumerate(a[:2] + b[2:]):
        save_trace_folder(t, tmp_path / f"rank={r}")
    for per_task in (1, 3):   # the jobs met on the driver, or inside one task
        with pytest.raises(MixedJobsError, match="job-a.*job-b|job-b.*job-a"):
            hray.stragglers(tmp_path, ranks_per_task=per_task, timeout_s=T)
    # no task opens a set, reads its files and answers within a microsecond
    with pytest.raises(hray.AnalysisTimeout, match="timeout_s=1e-06"):
        hray.summary(tmp_path, timeout_s=1e-6)
