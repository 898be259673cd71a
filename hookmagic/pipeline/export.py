"""Files other tools read: the per-batch/per-frame CSV and a Chrome/Perfetto trace of a run."""
from __future__ import annotations

import json
import os
from pathlib import Path

from hookmagic.common import files
from hookmagic.common.errors import InvalidArgument
from hookmagic.pipeline.analysis import frames_table, per_batch
from hookmagic.pipeline.run import PipelineRun


def write_csv(run: PipelineRun, path: str | os.PathLike, per: str = "batch") -> str:
    """``per="batch"``: batch, frames, <stage>_ms..., e2e_ms, fps (the columns classic frame
    profilers write; stages named read/preprocess/infer/postprocess give read_ms, preprocess_ms,
    infer_ms, postprocess_ms). ``per="frame"``: the per-frame table."""
    if per == "batch":
        table = per_batch(run)
    elif per == "frame":
        table = frames_table(run).reset_index()
    else:
        raise InvalidArgument(f"per must be 'batch' or 'frame', got {per!r}")
    path = files.export_path(path, (".csv",), "the CSV table")
    table.to_csv(path, index=False, float_format="%.4f")
    return str(path)


def write_parquet(run: PipelineRun, path: str | os.PathLike, per: str = "frame") -> str:
    """One Parquet file: the per-frame table (``per="frame"``), the per-batch table
    (``"batch"``) or the raw per-frame-per-stage events (``"event"``)."""
    if per == "frame":
        table = frames_table(run).reset_index()
    elif per == "batch":
        table = per_batch(run)
    elif per == "event":
        table = run.events
    else:
        raise InvalidArgument(f"per must be 'frame', 'batch' or 'event', got {per!r}")
    path = files.export_path(path, (".parquet",), "the Parquet table")
    table.to_parquet(path, index=False)
    return str(path)


def chrome_trace(run: PipelineRun) -> dict:
    """The run as Chrome trace-event JSON (a dict): one track per stage worker (and one per GPU
    stage worker for its CUDA-event spans), each stage execution a slice, each frame a flow
    from stage to stage. Times in µs from the run's start."""
    ev = run.events
    t0 = int(min(ev["enqueue_ns"].min(), ev["start_ns"].min())) if len(ev) else 0
    pid = 1
    out: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name",
                        "args": {"name": f"pipeline {run.meta.get('pipeline', '')}"}}]
    tids: dict[tuple[str, int, bool], int] = {}
    order = {s: i for i, s in enumerate(run.stage_names)}

    def tid(stage: str, worker: int, gpu: bool = False) -> int:
        key = (stage, worker, gpu)
        if key not in tids:
            tids[key] = 1 + len(tids)
            label = f"{stage} {'stream' if stage == run.stage_names[0] else 'worker'} {worker}"
            out.append({"ph": "M", "pid": pid, "tid": tids[key], "name": "thread_name",
                        "args": {"name": label + (" (GPU)" if gpu else "")}})
            out.append({"ph": "M", "pid": pid, "tid": tids[key], "name": "thread_sort_index",
                        "args": {"sort_index": order[stage] * 1000 + worker * 2 + gpu}})
        return tids[key]

    us = lambda ns: (int(ns) - t0) / 1e3  # noqa: E731
    seen_batches: set = set()
    for r in ev.sort_values(["stage_index", "worker", "start_ns"]).itertuples(index=False):
        key = (r.stage, r.worker, r.start_ns)
        if key not in seen_batches:
            seen_batches.add(key)
            out.append({"ph": "X", "pid": pid, "tid": tid(r.stage, r.worker), "name": r.stage,
                        "ts": us(r.start_ns), "dur": (r.end_ns - r.start_ns) / 1e3,
                        "args": {"batch": int(r.batch), "batch_size": int(r.batch_size),
                                 "status": r.status}})
            if r.gpu_start_ns >= 0:
                out.append({"ph": "X", "pid": pid, "tid": tid(r.stage, r.worker, True),
                            "name": f"{r.stage} (GPU)", "ts": us(r.gpu_start_ns),
                            "dur": (r.gpu_end_ns - r.gpu_start_ns) / 1e3})
    for fid, grp in ev.sort_values("start_ns").groupby("frame", sort=False):
        rows = list(grp.itertuples(index=False))
        for a, b in zip(rows, rows[1:]):
            out.append({"ph": "s", "pid": pid, "tid": tid(a.stage, a.worker), "name": "frame",
                        "cat": "frame", "id": int(fid), "ts": us(a.end_ns) - 0.001})
            out.append({"ph": "f", "bp": "e", "pid": pid, "tid": tid(b.stage, b.worker),
                        "name": "frame", "cat": "frame", "id": int(fid), "ts": us(b.start_ns)})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"source": "hookmagic.pipeline", "label": run.label}}


def write_chrome_trace(run: PipelineRun, path: str | os.PathLike) -> str:
    """Write :func:`chrome_trace` to ``path`` (open it in ui.perfetto.dev or chrome://tracing)."""
    path = files.export_path(path, (".json",), "the Chrome trace")
    Path(path).write_text(json.dumps(chrome_trace(run)))
    return str(path)
