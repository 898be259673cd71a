"""Frame pipelines for video and cameras: run them, measure every frame at every stage, name the
bottleneck and predict what a faster stage would give.

    from hookmagic.pipeline import Pipeline, Stage, video_file
    pipe = Pipeline([Stage("preprocess", prep), Stage("infer", model, batch=8, device="cuda"),
                     Stage("postprocess", post)], queue_size=8)
    run = pipe.run(video_file("clip.mp4"))
    run.stages(); run.bottleneck(); run.what_if("infer", 2.0); run.gantt()
    run.summary(); run.stage_chart(); run.save("run.hmpipe")

Layers inside: sources (``sources``, ``runner``) → data (``run``) → pure analyses
(``analysis``, ``model``) → views (``views``, ``export``) → front doors (``metrics``, ``sweep``,
this module, which registers the analyses and charts on :class:`PipelineRun`).
"""
from __future__ import annotations

from hookmagic.common.accessors import call_with, register_method
from hookmagic.pipeline import analysis as _analysis
from hookmagic.pipeline import model as _model
from hookmagic.pipeline.run import PipelineRun, load_run
from hookmagic.pipeline.live import StreamUnavailable, camera, live_stream
from hookmagic.pipeline.runner import Pipeline, Stage
from hookmagic.pipeline.sources import (Source, frames, image_folder, nvdec_video, probe_video,
                                        synthetic_cameras, video_file, write_synthetic_video)

__all__ = ["Pipeline", "Stage", "PipelineRun", "load_run", "Source", "frames", "image_folder",
           "probe_video", "synthetic_cameras", "video_file", "write_synthetic_video", "nvdec_video",
           "live_stream", "camera", "StreamUnavailable"]

# PipelineRun's analysis and chart methods, registered from above through
# hookmagic.common.accessors (the data model imports nothing above it).
_register = register_method("PipelineRun")


@_register
def summary(self: PipelineRun):
    """The headline (a :class:`hookmagic.common.results.Headline`: done fps, frames by outcome,
    end-to-end latency p50/p99 in ms, the bottleneck stage; ``.to_frame()`` for a DataFrame)."""
    return _analysis.headline(self)


@_register
def stages(self: PipelineRun):
    """Per stage: latency p50/p90/p99, fps, utilisation (per worker), capacity, queue wait,
    blocked fraction, input-queue depth and full/empty fractions (a DataFrame)."""
    return _analysis.stage_stats(self)


def _frames(self: PipelineRun):
    """One row per frame: outcome, end-to-end ms, and per stage its ms, queue wait, GPU ms."""
    return _analysis.frames_table(self)


register_method("PipelineRun", "frames")(property(_frames))


@_register
def bottleneck(self: PipelineRun):
    """The limiting stage and the evidence for it (utilisation, queues either side)."""
    return _analysis.bottleneck(self)


@_register
def what_if(self: PipelineRun, stage, speedup: float = 2.0, seed: int = 0,
            gil: bool = False):
    """Predicted fps and latency if ``stage`` were ``speedup``× faster (queueing model of the
    measured service times; ``gil=True`` shares one GIL between the stages' CPU parts; see
    :func:`hookmagic.pipeline.model.what_if`)."""
    return _model.what_if(self, stage, speedup, seed, gil)


@_register
def throughput(self: PipelineRun) -> dict:
    """Done frames per second and end-to-end latency p50/p90/p99 (ms)."""
    return _analysis.throughput(self)


@_register
def warmup(self: PipelineRun):
    """The warm-up executions (first batches of a size far slower than the steady state):
    stage, worker, size, t_ms, ms, steady_p50_ms (a DataFrame; the what-if model replays
    them once instead of sampling them as steady-state service times)."""
    return _analysis.warmup(self)


@_register
def per_batch(self: PipelineRun):
    """batch, frames, <stage>_ms..., e2e_ms, fps: the classic per-batch table."""
    return _analysis.per_batch(self)


@_register
def queue_depth(self: PipelineRun, stage: str):
    """Frames waiting in ``stage``'s input queue over time (InvalidArgument for a stage the run
    does not have, or the read stage, which has no input queue)."""
    return _analysis.queue_depth(self, stage)


@_register
def to_csv(self: PipelineRun, path, per: str = "batch") -> str:
    """Write the per-batch table (``per="batch"``) or the per-frame table (``"frame"``)."""
    from hookmagic.pipeline.export import write_csv
    return write_csv(self, path, per)


@_register
def to_parquet(self: PipelineRun, path, per: str = "frame") -> str:
    """Write the per-frame (``per="frame"``), per-batch or raw event table as Parquet."""
    from hookmagic.pipeline.export import write_parquet
    return write_parquet(self, path, per)


@_register
def to_chrome_trace(self: PipelineRun, path) -> str:
    """Chrome/Perfetto JSON: a track per stage worker, each frame a flow across stages."""
    from hookmagic.pipeline.export import write_chrome_trace
    return write_chrome_trace(self, path)


@_register
def gantt(self: PipelineRun, **kw):
    """Per-frame Gantt chart (Plotly): each frame's stages, waits and GPU spans; with
    ``trace=`` (a capture around the run) its GPU kernels too."""
    from hookmagic.pipeline.views import frame_gantt_figure
    return call_with(frame_gantt_figure, self, **kw)


@_register
def stage_chart(self: PipelineRun, **kw):
    """Stage latency and utilisation bars, bottleneck highlighted (Plotly)."""
    from hookmagic.pipeline.views import stages_figure
    return call_with(stages_figure, self, **kw)


@_register
def to_sched(self: PipelineRun, **kw):
    """The measured service times as scheduler models and the sources as a workload."""
    from hookmagic.pipeline.to_sched import to_sched as _to_sched
    return call_with(_to_sched, self, **kw)

from hookmagic.pipeline.adaptive import AdaptiveBatch  # noqa: E402
from hookmagic.pipeline.sweep import sweep  # noqa: E402  (after the attach: sweep uses analyses)
from hookmagic.pipeline.to_sched import cameras_that_fit  # noqa: E402

__all__ += ["sweep", "cameras_that_fit", "AdaptiveBatch"]
