"""Hostile and careless inputs to frame pipelines: each gets one project error (or a documented
empty-but-valid answer) before any thread starts, and a run that cannot finish still returns."""
from __future__ import annotations

import _thread
import json
import signal
import socket
import threading
import zipfile

import pytest

import hookmagic

from hookmagic.common.errors import (HookmagicError, InputFileError, InvalidArgument,
                                     Unavailable)
from hookmagic.pipeline import Pipeline, Stage, frames, synthetic_cameras
from hookmagic.pipeline.run import load_run, sniff


def _ident(x):
    return x


# -- a stage that never returns, and Ctrl-C -------------------------------------------------

def test_stuck_stage_run_returns_with_the_stuck_worker_reported():
    release = threading.Event()
    entered = []

    def stuck(x):
        if x == 3:
            entered.append(x)
            release.wait()  # blocks until the test ends: a stage that never returns
        return x

    try:
        run = Pipeline([Stage("work", stuck)]).run(frames(range(1000)), seconds=0.3)
        assert entered == [3]
        stuck_workers = run.meta["stuck_workers"]
        assert [(s["stage"], s["worker"]) for s in stuck_workers] == [("work", 0)]
        held = stuck_workers[0]["frames"]
        assert len(held) == 1
        out = run.frame_outcomes.set_index("frame")
        assert out.loc[held[0], "outcome"] == "cancelled"
        assert "did not return" in out.loc[held[0], "reason"]
        # frames 0, 1, 2 went through before the stage stuck on frame 3
        done = out[out["outcome"] == "done"]["index"].tolist()
        assert done == [0, 1, 2]
        assert any("never returned" in n for n in run.summary().notes)
    finally:
        release.set()


def test_keyboard_interrupt_stops_the_run_and_keeps_what_was_measured():
    release = threading.Event()
    seen = []

    def slow(x):
        seen.append(x)
        if len(seen) == 5:
            # Ctrl-C arrives in the caller's thread while this worker is inside its stage
            _thread.interrupt_main()
            release.wait()
        return x

    pipe = Pipeline([Stage("work", slow)])
    # interrupt_main() does nothing where SIGINT is ignored (pytest-xdist's workers ignore it):
    # Python's own handler, as in an interactive session, for the length of the run
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            pipe.run(frames(range(10_000)))
        run = info.value.pipeline_run
        assert run is pipe.last_run
        assert run.outcomes.get("done", 0) == 4  # the four frames before the interrupt
        assert [s["stage"] for s in run.meta["stuck_workers"]] == ["work"]
    finally:
        release.set()
        signal.signal(signal.SIGINT, handler)


# -- bounds and types, before any thread starts -----------------------------------------------

def test_absurd_worker_counts_are_refused_before_any_thread_starts():
    before = threading.active_count()
    with pytest.raises(InvalidArgument, match="workers"):
        Stage("s", _ident, workers=1_000_000)
    with pytest.raises(InvalidArgument, match="worker threads"):
        Pipeline([Stage(f"s{i}", _ident, workers=200) for i in range(6)])
    with pytest.raises(InvalidArgument):
        Stage("s", _ident, workers=True)
    with pytest.raises(InvalidArgument, match="batch"):
        Stage("s", _ident, batch=10**9)
    assert threading.active_count() == before


@pytest.mark.parametrize("make", [
    lambda: Pipeline(Stage("s", _ident)),
    lambda: Pipeline(None),
    lambda: Pipeline(42),
    lambda: Stage("s", _ident, batch=4, batch_wait_ms="10"),
    lambda: Stage("s", _ident, batch=4, batch_wait_ms=float("nan")),
    lambda: Pipeline([Stage("s", _ident)]).run(frames([1]), seconds="1"),
    lambda: Pipeline([Stage("s", _ident)]).run(frames([1]), seconds=float("inf")),
    lambda: Pipeline([Stage("s", _ident)]).run(frames([1]), frames=2.5),
    lambda: Pipeline([Stage("s", _ident)], queue_size=True),
], ids=["stage-not-list", "none", "int", "wait-str", "wait-nan", "seconds-str", "seconds-inf",
        "frames-float", "queue-bool"])
def test_wrong_types_are_invalid_argument(make):
    with pytest.raises(InvalidArgument):
        make()


def test_cuda_stage_without_a_gpu_is_unavailable():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    with pytest.raises(Unavailable, match="cuda"):
        Stage("infer", _ident, device="cuda")


@pytest.mark.parametrize("source, name", [
    (lambda tmp: frames([1, 2]), "read"),
    (lambda tmp: synthetic_cameras(1, 30, height=8, width=8), "capture"),
])
def test_stage_named_like_the_sources_own_stage_is_refused(tmp_path, source, name):
    with pytest.raises(InvalidArgument, match="read stage"):
        Pipeline([Stage(name, _ident)]).run(source(tmp_path), frames=1)


def test_stage_named_decode_is_refused_for_a_video(tmp_path):
    pytest.importorskip("av")
    from hookmagic.pipeline import video_file, write_synthetic_video
    clip = write_synthetic_video(tmp_path / "synthetic.mp4", frames=4, width=64, height=48)
    with pytest.raises(InvalidArgument, match="'decode'"):
        Pipeline([Stage("decode", _ident)]).run(video_file(clip))


def test_queue_depth_of_an_unknown_stage_or_the_read_stage_raises():
    run = Pipeline([Stage("a", _ident)]).run(frames(range(3)))
    with pytest.raises(InvalidArgument, match="nope"):
        run.queue_depth("nope")
    with pytest.raises(InvalidArgument):
        run.queue_depth("read")  # the source's stage has no input queue
    assert run.queue_depth("a")["depth"].min() >= 0


@pytest.mark.parametrize("kw", [{"width": 0}, {"height": -4}, {"width": 10**6},
                                {"width": 2.5}])
def test_synthetic_camera_sizes_are_checked(kw):
    with pytest.raises(InvalidArgument):
        synthetic_cameras(1, 30, **kw)


@pytest.mark.parametrize("kw", [{"frames": 0}, {"frames": -1}, {"width": 0}, {"width": 33},
                                {"fps": 0}])
def test_synthetic_video_arguments_are_checked(tmp_path, kw):
    from hookmagic.pipeline import write_synthetic_video
    with pytest.raises(InvalidArgument):
        write_synthetic_video(tmp_path / "synthetic.mp4", **kw)
    assert not (tmp_path / "synthetic.mp4").exists()


# -- analyses of runs that did nothing -------------------------------------------------------

def _failing(x):
    raise OSError("synthetic failure")


def test_empty_run_charts_and_model_are_one_clear_error_summary_is_valid():
    run = Pipeline([Stage("a", _ident)]).run(frames([]))
    for method in ("gantt", "stage_chart", "to_sched"):
        with pytest.raises(InvalidArgument, match="no frame"):
            getattr(run, method)()
    head = run.summary()
    assert head["frames_done"] == 0 and head["bottleneck"] == "-"
    assert list(head.to_frame().columns) == ["value", "unit"]


def test_all_failed_run_draws_and_summarises():
    run = Pipeline([Stage("a", _failing)]).run(frames(range(4)))
    head = run.summary()
    assert head["frames_failed"] == 4 and head["frames_done"] == 0 and head["fps"] == 0
    fig = run.stage_chart()
    assert len(fig.data) > 0
    assert len(run.gantt().data) > 0


# -- saved runs --------------------------------------------------------------------------------

def _save_small(tmp_path):
    run = Pipeline([Stage("a", _ident), Stage("b", lambda x: None if x % 3 == 0 else x)]).run(
        frames(range(9)))
    return run, run.save(tmp_path / "run.hmpipe")


def test_save_returns_a_path_recording_the_kind_and_loads_back(tmp_path):
    run, path = _save_small(tmp_path)
    assert path == tmp_path / "run.hmpipe" and path.is_file()
    with zipfile.ZipFile(path) as zf:
        assert json.loads(zf.read("manifest.json"))["hookmagic_kind"] == "pipeline_run"
    assert sniff(path)
    back = load_run(path)
    # 0, 3, 6 are dropped by stage b by construction; the rest done
    assert back.summary()["frames_dropped"] == 3
    assert back.summary()["frames_done"] == 6
    assert back.summary().to_frame().loc["frames_done", "unit"] == "frames"


def _rewrite_manifest(src, dst, manifest=None, drop_column=None, events=None):
    import io

    import pandas as pd
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "manifest.json" and manifest is not None:
                data = json.dumps(manifest(json.loads(data))).encode()
            if info.filename == "events.parquet" and (drop_column or events):
                table = pd.read_parquet(io.BytesIO(data))
                table = table.drop(columns=[drop_column]) if drop_column else events(table)
                buf = io.BytesIO()
                table.to_parquet(buf, index=False)
                data = buf.getvalue()
            zout.writestr(info.filename, data)


@pytest.mark.parametrize("manifest, drop", [
    (lambda m: [m], None),                                   # manifest is a list
    (lambda m: {**m, "meta": ["x"]}, None),                  # meta is a list
    (lambda m: {**m, "meta": {**m["meta"], "stages": None}}, None),
    (lambda m: {**m, "meta": {**m["meta"], "stages": [{"nam": 1}]}}, None),
    (None, "start_ns"),                                      # a table lacks a column
], ids=["manifest-list", "meta-list", "stages-null", "stage-unnamed", "no-start-ns"])
def test_malformed_saved_runs_fail_at_load(tmp_path, request, manifest, drop):
    _, good = _save_small(tmp_path)
    bad = tmp_path / "bad.hmpipe"
    _rewrite_manifest(good, bad, manifest, drop)
    with pytest.raises(InputFileError):
        load_run(bad)
    # a manifest that is not an object is not a pipeline run; the others claim to be one, so
    # hookmagic.load hands them to load_run, which refuses them
    assert sniff(bad) is (request.node.callspec.id != "manifest-list")


@pytest.mark.parametrize("events, why", [
    (lambda t: t.assign(start_ns=t["start_ns"].astype(float).where(t.index > 0)), "whole numbers"),
    (lambda t: t.assign(start_ns=t["start_ns"].astype(str)), "whole numbers"),
    (lambda t: t.assign(end_ns=-10**9), "never below -1"),
    (lambda t: t.assign(end_ns=t["start_ns"] - 1), "end before they start"),
], ids=["nan", "text", "negative", "backwards"])
def test_saved_runs_with_impossible_times_are_refused(tmp_path, events, why):
    # SYNTHETIC damage to a real saved run: times no run could have measured
    _, good = _save_small(tmp_path)
    bad = tmp_path / "bad.hmpipe"
    _rewrite_manifest(good, bad, events=events)
    with pytest.raises(InputFileError, match=why):
        hookmagic.load(bad)


def test_a_saved_run_claiming_another_kind_is_refused(tmp_path):
    _, good = _save_small(tmp_path)
    bad = tmp_path / "bad.hmpipe"
    _rewrite_manifest(good, bad, manifest=lambda m: {**m, "hookmagic_kind": "trace"})
    with pytest.raises(InputFileError, match="not a pipeline run"):
        load_run(bad)


# -- sources are iterable --------------------------------------------------------------------

def test_sources_iterate_their_frames():
    assert list(frames([1, 2, 3])) == [1, 2, 3]
    cams = synthetic_cameras(2, 30, height=4, width=6)
    first = next(iter(cams))
    assert first.shape == (4, 6, 3)


def test_video_source_iterates_every_written_frame(tmp_path):
    pytest.importorskip("av")
    from hookmagic.pipeline import video_file, write_synthetic_video
    clip = write_synthetic_video(tmp_path / "synthetic.mp4", frames=7, width=64, height=48)
    got = list(video_file(clip))
    assert len(got) == 7 and got[0].shape == (48, 64, 3)


# -- the Prometheus exporter -----------------------------------------------------------------

def test_exporter_bad_port_address_busy_port_and_shared_registry():
    pytest.importorskip("prometheus_client")
    from hookmagic.pipeline.metrics import PipelineExporter
    with pytest.raises(InvalidArgument):
        PipelineExporter(port=70000, gpu_memory=False)
    with pytest.raises(InvalidArgument):
        PipelineExporter(port="80", gpu_memory=False)
    with pytest.raises(Unavailable):
        PipelineExporter(port=0, addr="no-such-host.invalid", gpu_memory=False)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        with pytest.raises(Unavailable, match="cannot serve"):
            PipelineExporter(port=busy.getsockname()[1], gpu_memory=False)
    finally:
        busy.close()
    first = PipelineExporter(port=None, gpu_memory=False)
    with pytest.raises(InvalidArgument, match="registry"):
        PipelineExporter(port=None, registry=first.registry, gpu_memory=False)


def test_every_refusal_here_is_a_project_error():
    for cls in (InvalidArgument, Unavailable, InputFileError):
        assert issubclass(cls, HookmagicError)


@pytest.mark.parametrize("bad", [
    lambda: Pipeline([Stage("a", _ident)]).run(frames([1]), observers=5),
    lambda: Pipeline([Stage("a", _ident)]).run(frames([1]), observers=[object()]),
    lambda: Pipeline([Stage("a", _ident)], queue_size=10**12),
    lambda: Pipeline([Stage("a", _ident)], instrument="no"),
    lambda: Pipeline([Stage("a", _ident)], name=5),
    lambda: Pipeline([Stage("a", _ident)], name=None),
    lambda: Pipeline([Stage("a", _ident)], name=" "),
    lambda: synthetic_cameras(10**6, 30),
], ids=["observers-int", "observer-object", "queue-huge", "instrument-text", "name-int",
        "name-none", "name-blank", "cameras-million"])
def test_more_bad_arguments_are_invalid_argument(bad):
    with pytest.raises(InvalidArgument):
        bad()


def test_writing_a_synthetic_video_checks_codec_and_folder(tmp_path):
    pytest.importorskip("av")
    from hookmagic.pipeline import write_synthetic_video
    with pytest.raises(InvalidArgument, match="codec 'nope'"):
        write_synthetic_video(tmp_path / "synthetic.mp4", codec="nope")
    with pytest.raises(InvalidArgument, match="folder does not exist"):
        write_synthetic_video(tmp_path / "missing" / "synthetic.mp4")


def test_metrics_registries_are_checked():
    pytest.importorskip("prometheus_client")
    from hookmagic.common.prometheus import InferenceMetrics
    from hookmagic.pipeline.metrics import PipelineExporter
    with pytest.raises(InvalidArgument, match="CollectorRegistry"):
        PipelineExporter(registry=5, port=None, gpu_memory=False)
    first = InferenceMetrics()
    with pytest.raises(InvalidArgument, match="already holds"):
        InferenceMetrics(registry=first.registry)
