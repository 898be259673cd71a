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
T = 60  # seconds: the bound on every wait


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
