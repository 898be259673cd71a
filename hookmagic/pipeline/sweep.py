"""Experiments: run one pipeline builder over a grid of settings and tabulate fps and latency.

    def build(pre_device, batch, amp):
        return Pipeline([Stage("preprocess", ..., device=pre_device),
                         Stage("infer", make_infer(amp), batch=batch, device="cuda"), ...])
    table = sweep(build, {"pre_device": ["cpu", "cuda"], "batch": [1, 8, 32],
                          "amp": ["fp32", "fp16"]}, source=lambda: video_file("clip.mp4"))
    sweep_figure(table)       # fps vs p99, one point per configuration

The settings are whatever the builder takes: preprocessing on CPU or GPU, autocast precision,
torch.compile, channels_last, CUDA graphs, batch size, workers per stage, CPU affinity (set it
inside the stage's fn with ``os.sched_setaffinity(0, cpus)``), decode on CPU or NVDEC (through
the source factory). A progress bar (tqdm.auto) shows while it runs.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from hookmagic.common.errors import InvalidArgument
from hookmagic.pipeline.analysis import bottleneck, throughput
from hookmagic.pipeline.runner import Pipeline


def sweep(build: Callable[..., Pipeline], grid: Mapping[str, Sequence[Any]],
          source: Callable[..., Any], frames: int | None = None, seconds: float | None = None,
          repeats: int = 1, progress: bool = True) -> pd.DataFrame:
    """Run ``build(**setting)`` on ``source(**setting)`` (or ``source()`` if it takes no
    arguments) for every combination of ``grid``, ``repeats`` times each.

    One row per run: the settings, ``repeat``, ``fps``, ``p50_ms``, ``p90_ms``, ``p99_ms``,
    ``frames_done``, ``bottleneck`` and ``config`` (a short label). ``table.attrs["runs"]``
    holds the :class:`PipelineRun` of each row. A setting whose build or run raises is
    recorded with its ``error`` and the sweep goes on.
    """
    if not grid:
        raise InvalidArgument("grid must name at least one setting with a list of values")
    keys = list(grid)
    combos = list(itertools.product(*(list(grid[k]) for k in keys)))
    if not combos:
        raise InvalidArgument("every setting in grid needs at least one value")
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(combos) * repeats, desc="pipeline sweep", leave=False)
    rows, runs = [], []
    try:
        for values in combos:
            setting = dict(zip(keys, values))
            label = ", ".join(f"{k}={v}" for k, v in setting.items())
            for rep in range(repeats):
                row: dict[str, Any] = {**setting, "repeat": rep, "config": label}
                try:
                    pipe = build(**setting)
                    try:
                        src = source(**setting)
                    except TypeError:
                        src = source()
                    run = pipe.run(src, frames=frames, seconds=seconds)
                    row.update(throughput(run))
                    row["bottleneck"] = bottleneck(run).stage
                    row["error"] = ""
                    runs.append(run)
                except Exception as err:  # noqa: BLE001 - recorded per setting
                    row.update(error=f"{type(err).__name__}: {err}")
                    runs.append(getattr(err, "pipeline_run", None))
                rows.append(row)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    table = pd.DataFrame(rows)
    table.attrs["runs"] = runs
    return table
