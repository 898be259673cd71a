"""Frame pipelines for video and cameras: run them, measure every frame at every stage, name the
bottleneck and predict what a faster stage would give.

    from hookmagic.pipeline import Pipeline, Stage, video_file
    pipe = Pipeline([Stage("preprocess", prep), Stage("infer", model, batch=8, device="cuda"),
                     Stage("postprocess", post)], queue_size=8)
    run = pipe.run(video_file("clip.mp4"))
    run.stages(); run.bottleneck(); run.what_if("infer", 2.0); run.gantt()

Layers inside: sources (``sources``, ``runner``) → data (``run``) → pure analyses
(``analysis``, ``model``) → views (``views``, ``export``) → front doors (``metrics``, ``sweep``,
this module, which attaches the analyses and views to :class:`PipelineRun`).
"""
from __future__ import annotations

from hookmagic.pipeline import analysis as _analysis
from hookmagic.pipeline import model as _model
from hookmagic.pipeline.run import PipelineRun, load_run
from hookmagic.pipeline.runner import Pipeline, Stage
from hookmagic.pipeline.sources import (Source, frames, image_folder, nvdec_video, probe_video,
                                        synthetic_cameras, video_file, write_synthetic_video)

__all__ = ["Pipeline", "Stage", "PipelineRun", "load_run", "Source", "frames", "image_folder",
           "probe_video", "synthetic_cameras", "video_file", "write_synthetic_video", "nvdec_video"]


def _attach() -> None:
    """Give PipelineRun its analysis and view methods (attached from above, as pandas attaches
    ``.plot``: the data model imports nothing above it)."""

    def stages(self: PipelineRun):
        """Per stage: latency p50/p90/p99, fps, utilisation (per worker), capacity, queue wait,
        blocked fraction, input-queue depth and full/empty fractions (a DataFrame)."""
        return _analysis.stage_stats(self)

    def frames_(self: PipelineRun):
        """One row per frame: outcome, end-to-end ms, and per stage its ms, queue wait, GPU ms."""
        return _analysis.frames_table(self)

    def bottleneck(self: PipelineRun):
        """The limiting stage and the evidence for it (utilisation, queues either side)."""
        return _analysis.bottleneck(self)

    def what_if(self: PipelineRun, stage, speedup: float = 2.0, seed: int = 0):
        """Predicted fps and latency if ``stage`` were ``speedup``× faster (queueing model of the
        measured service times; see :func:`hookmagic.pipeline.model.what_if`)."""
        return _model.what_if(self, stage, speedup, seed)

    def throughput(self: PipelineRun) -> dict:
        """Done frames per second and end-to-end latency p50/p90/p99 (ms)."""
        return _analysis.throughput(self)

    def per_batch(self: PipelineRun):
        """batch, frames, <stage>_ms..., e2e_ms, fps: the classic per-batch table."""
        return _analysis.per_batch(self)

    def queue_depth(self: PipelineRun, stage: str):
        """Frames waiting in ``stage``'s input queue over time."""
        return _analysis.queue_depth(self, stage)

    def to_csv(self: PipelineRun, path, per: str = "batch") -> str:
        """Write the per-batch table (``per="batch"``) or the per-frame table (``"frame"``)."""
        from hookmagic.pipeline.export import write_csv
        return write_csv(self, path, per)

    def to_parquet(self: PipelineRun, path, per: str = "frame") -> str:
        """Write the per-frame (``per="frame"``), per-batch or raw event table as Parquet."""
        from hookmagic.pipeline.export import write_parquet
        return write_parquet(self, path, per)

    def to_chrome_trace(self: PipelineRun, path) -> str:
        """Chrome/Perfetto JSON: a track per stage worker, each frame a flow across stages."""
        from hookmagic.pipeline.export import write_chrome_trace
        return write_chrome_trace(self, path)

    def gantt(self: PipelineRun, **kw):
        """Per-frame Gantt chart (Plotly): each frame's stages, waits and GPU spans; with
        ``trace=`` (a capture around the run) its GPU kernels too."""
        from hookmagic.pipeline.views import gantt_figure
        return gantt_figure(self, **kw)

    def plot_stages(self: PipelineRun, **kw):
        """Stage latency and utilisation bars, bottleneck highlighted (Plotly)."""
        from hookmagic.pipeline.views import stages_figure
        return stages_figure(self, **kw)

    def to_sched(self: PipelineRun, **kw):
        """The measured service times as scheduler models and the sources as a workload."""
        from hookmagic.pipeline.to_sched import to_sched
        return to_sched(self, **kw)

    for fn, name in ((stages, "stages"), (frames_, "frames"), (bottleneck, "bottleneck"),
                     (what_if, "what_if"), (throughput, "throughput"), (per_batch, "per_batch"),
                     (queue_depth, "queue_depth"), (to_csv, "to_csv"), (to_parquet, "to_parquet"),
                     (to_chrome_trace, "to_chrome_trace"), (gantt, "gantt"),
                     (plot_stages, "plot_stages"), (to_sched, "to_sched")):
        fn.__name__ = name
        fn.__qualname__ = f"PipelineRun.{name}"
        setattr(PipelineRun, name, property(fn) if name == "frames" else fn)


_attach()

from hookmagic.pipeline.adaptive import AdaptiveBatch  # noqa: E402
from hookmagic.pipeline.sweep import sweep  # noqa: E402  (after the attach: sweep uses analyses)
from hookmagic.pipeline.to_sched import cameras_that_fit  # noqa: E402

__all__ += ["sweep", "cameras_that_fit", "AdaptiveBatch"]
