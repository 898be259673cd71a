"""hookmagic.pipeline's own cost, and how well what_if() predicts a faster stage (CPU only).

    python -m benchmarks run pipeline

Each measurement runs in a fresh Python process (``--worker``), ``--processes`` times; the
tables give min–max over the processes.

- Overhead: N frames through S no-op stages (``lambda x: x``) with ``Pipeline.run`` vs a bare
  Python loop calling the same functions; overhead per frame per stage = (pipeline − loop) /
  (N × S), host time, with ``instrument=True`` (a ``hookmagic.range`` per stage execution
  while a capture records ranges, none outside one) and ``False``. This is the framework's
  cost per hand-over (queue put/get, thread switch, the records), the figure the issue bounds
  at 30 µs.
- What-if: a pipeline of sleeping stages (2, 8, 3 ms) is measured, ``what_if("infer", 4)``
  predicts fps and p50; then the pipeline is run with infer really 4× faster (2 ms). Error =
  predicted / measured − 1.

Writes ``pipeline_overhead.md`` and ``pipeline_overhead.csv``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def worker(frames: int, stages: int) -> dict:
    from hookmagic.pipeline import Pipeline, Stage

    fns = [lambda x: x for _ in range(stages)]
    out: dict = {}
    # bare loop: the same calls, no pipeline
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        for i in range(frames):
            x = i
            for f in fns:
                x = f(x)
        best = min(best, time.perf_counter() - t)
    out["loop_s"] = best
    for inst in (False, True):
        pipe = Pipeline([Stage(f"s{k}", fns[k]) for k in range(stages)], queue_size=64,
                        instrument=inst)
        pipe.run(range(200))  # warm-up
        best = np.inf
        for _ in range(3):
            t = time.perf_counter()
            pipe.run(range(frames))
            best = min(best, time.perf_counter() - t)
        key = "on" if inst else "off"
        out[f"pipeline_{key}_s"] = best
        out[f"overhead_{key}_us"] = (best - out["loop_s"]) / (frames * stages) * 1e6

    def sleeper(ms):
        return lambda x: time.sleep(ms / 1e3) or x

    slow = Pipeline([Stage("pre", sleeper(2)), Stage("infer", sleeper(8)),
                     Stage("post", sleeper(3))], queue_size=4).run(range(150))
    table = slow.what_if("infer", 4.0)
    fast = Pipeline([Stage("pre", sleeper(2)), Stage("infer", sleeper(2)),
                     Stage("post", sleeper(3))], queue_size=4).run(range(150))
    m = fast.throughput()
    p = table.iloc[-1]
    out.update(whatif_pred_fps=float(p["fps"]), whatif_meas_fps=m["fps"],
               whatif_fps_err=float(p["fps"] / m["fps"] - 1),
               whatif_pred_p50=float(p["p50_ms"]), whatif_meas_p50=m["p50_ms"],
               whatif_p50_err=float(p["p50_ms"] / m["p50_ms"] - 1))
    return out


DESCRIPTION = ("hookmagic.pipeline on the CPU: framework overhead per frame per stage against a "
               "bare loop, and what-if accuracy against a pipeline really made faster")
PARAMS = {"frames": 5000, "stages": 4}
NEEDS: tuple[str, ...] = ()


def measure(frames: int, stages: int) -> dict[str, float]:
    return {k: v for k, v in worker(frames, stages).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
