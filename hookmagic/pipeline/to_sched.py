"""From a measured pipeline run to the scheduler: "how many 30 fps cameras fit under 50 ms p99?"

The run's model stage (the batched stage, else the bottleneck) becomes a
:class:`hookmagic.sched.ModelSpec` whose latency table is the measured median time per batch
size (and ``service_cv`` the measured spread); the run's streams become
:class:`hookmagic.sched.Cameras`. The scheduler's simulator then serves N cameras; the other
stages are added as their measured median per-frame time (they run beside the model stage on
their own workers, so below saturation they add latency, not queueing).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument
from hookmagic.pipeline.analysis import batches, bottleneck, require_events, stage_stats
from hookmagic.pipeline.run import PipelineRun


@dataclass
class SchedModel:
    """The model stage as a scheduler model, the sources as cameras, and the batching policy."""

    spec: object          # hookmagic.sched.ModelSpec
    cameras: list         # [hookmagic.sched.Cameras]
    policy: object        # hookmagic.sched.Policy
    other_stages_ms: float
    stage: str


def to_sched(run: PipelineRun, stage: str | None = None, slo_ms: float = 66.0,
             fps: float | None = None, max_delay_ms: float = 2.0) -> SchedModel:
    """Turn ``run`` into scheduler inputs (see the module). ``fps`` overrides the cameras' rate
    (default: each stream's pacing, or the run's measured fps per stream when unpaced)."""
    import hookmagic.sched as S

    require_events(run, "to_sched")
    if stage is None:
        batched = [s["name"] for s in run.meta["stages"] if s.get("batch")]
        stage = batched[0] if batched else (bottleneck(run).stage or run.stage_names[-1])
    if stage not in run.stage_names:
        raise InvalidArgument(f"no stage {stage!r} in this run; stages: {run.stage_names}")
    b = batches(run, stage)
    dur = (b["end_ns"] - b["start_ns"]) / 1e6
    table = dur.groupby(b["size"]).median()
    cv = float(np.std(dur / b["size"].map(table)) if len(b) > 1 else 0.0)
    meta = next(s for s in run.meta["stages"] if s["name"] == stage)
    spec = S.ModelSpec(stage, tuple(int(x) for x in table.index),
                       tuple(max(float(x), 1e-6) for x in table.to_numpy()),
                       service_cv=cv, max_batch=int(meta.get("batch") or table.index.max()),
                       meta={"from": f"pipeline run {run.meta.get('pipeline', '')}",
                             "label": run.label})
    st = stage_stats(run)
    others = float(st.drop(index=stage)["p50_ms"].fillna(0).sum())
    streams = run.meta.get("streams") or [{"name": "frames", "fps": None}]
    rate = fps or streams[0].get("fps") or float(st.loc[stage, "fps"]) / len(streams)
    cams = [S.Cameras(stage, n=len(streams), fps=float(rate), slo_ms=slo_ms)]
    policy = S.Policy(batching=S.Batching(spec.max_batch, max_delay_ms),
                      streams=int(meta.get("workers", 1)))
    return SchedModel(spec, cams, policy, others, stage)


def cameras_that_fit(run: PipelineRun, fps: float = 30.0, slo_ms: float = 50.0,
                     quantile: str = "p99_ms", max_cameras: int = 64, duration_s: float = 10.0,
                     stage: str | None = None, seed: int = 0) -> pd.DataFrame:
    """Simulate 1..``max_cameras`` cameras at ``fps`` through the run's model stage; per N:
    throughput, the model stage's latency quantile, that plus the other stages, and whether it
    stays under ``slo_ms``. ``table.attrs["fit"]`` is the largest N that does."""
    import hookmagic.sched as S

    if not (fps > 0) or not (slo_ms > 0):
        raise InvalidArgument("fps and slo_ms must be > 0")
    m = to_sched(run, stage, slo_ms, fps)
    rows, fit = [], 0
    for n in range(1, max_cameras + 1):
        res = S.simulate([m.spec], [S.Cameras(m.stage, n=n, fps=fps, slo_ms=slo_ms)], m.policy,
                         duration_s=duration_s, seed=seed)
        met = res.metrics(warmup_s=min(1.0, duration_s / 5)).iloc[0]
        total = float(met[quantile]) + m.other_stages_ms
        ok = total <= slo_ms and met["throughput_rps"] >= 0.97 * n * fps
        rows.append({"cameras": n, "offered_fps": n * fps, "served_fps": float(met["throughput_rps"]),
                     f"stage_{quantile}": float(met[quantile]), f"e2e_{quantile}": total,
                     "batch_mean": float(met["batch_mean"]), "fits": bool(ok)})
        if ok:
            fit = n
        elif n > fit + 2:  # past the knee: more cameras only get worse
            break
    table = pd.DataFrame(rows)
    table.attrs["fit"] = fit
    table.attrs["model"] = m
    return table
