"""Does the GIL-aware pipeline model hold on real Python stages? CPU only, no GPU needed.

    python lab/pipeline/pipeline_gil.py --out DIR [--processes 3] [--frames 300]

Stages of four shapes, each a real Python function run by the real runner:

- ``gil_heavy``: pure-Python loops (a fixed count of bytecodes: the GIL is held throughout);
- ``gil_free``: ``time.sleep`` (the GIL is released throughout);
- ``mixed``: a Python loop, then a sleep, in the same stage, next to pure-Python stages;
- ``numpy``: a Python loop, then a NumPy matrix product (which releases the GIL), next to
  pure-Python stages.

In each fresh process and for each shape: one run of the pipeline; ``what_if(stage, 2)`` on it,
with the GIL modelled and without it (independent servers); and one run of the same pipeline
with that stage really made twice as light (half the loop count and half the sleep or matrix
work). Checks: the model "as measured" against the run it models (target within 5 %) and the
prediction against the lighter run (target within 10 %). Writes ``DIR/pipeline_gil.json`` and
``DIR/pipeline_gil.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _loops_per_ms() -> float:
    """Iterations of an empty Python loop per ms of this thread's CPU time."""
    n = 300_000
    best = 0.0
    for _ in range(3):
        t = time.thread_time()
        for _ in range(n):
            pass
        best = max(best, n / max(time.thread_time() - t, 1e-9) / 1e3)
    return best


def shapes(per_ms: float) -> dict:
    """Per shape: the stages as (name, (loop ms, sleep ms, matmul side)) and the stage the
    what-if makes twice as light."""
    return {
        "gil_heavy": ([("pre", (2, 0, 0)), ("infer", (3, 0, 0)), ("post", (1, 0, 0))], "infer"),
        "gil_free": ([("pre", (0, 2, 0)), ("infer", (0, 4, 0)), ("post", (0, 3, 0))], "infer"),
        "mixed": ([("pre", (1, 0, 0)), ("infer", (1, 4, 0)), ("post", (1.5, 0, 0))], "infer"),
        "numpy": ([("pre", (1, 0, 0)), ("infer", (0.5, 0, 384)), ("post", (1.5, 0, 0))],
                  "infer"),
    }


def make(per_ms: float, spec: tuple, light: float = 1.0):
    loop_ms, sleep_ms, side = spec
    n = int(loop_ms * per_ms / light)
    sleep_s = sleep_ms / 1e3 / light
    if side:  # half the work: half the rows of the left matrix
        rows = max(1, int(side / light))
        a, b = np.random.rand(rows, side), np.random.rand(side, side)

    def fn(x):
        for _ in range(n):
            pass
        if sleep_s:
            time.sleep(sleep_s)
        if side:
            a @ b
        return x
    return fn


def worker(frames: int, save: Path) -> dict:
    """Run every shape's pipeline and its lighter twin; save both runs in ``save``."""
    from hookmagic.pipeline import Pipeline, Stage

    per_ms = _loops_per_ms()
    out = {"loops_per_ms": per_ms, "shapes": {}}
    for name, (stages, target) in shapes(per_ms).items():
        def build(light: float):
            return Pipeline([Stage(s, make(per_ms, spec, light if s == target else 1.0))
                             for s, spec in stages], queue_size=4, name=f"gil_{name}")
        row = {"target": target}
        for light, key in ((1.0, "heavy"), (2.0, "light")):
            pipe = build(light)
            pipe.run(range(20))  # warm the threads and NumPy
            run = pipe.run(range(frames))
            pipe.close()
            run.save(save / f"{name}_{key}")
            row[f"{key}_fps"] = run.throughput()["fps"]
        out["shapes"][name] = row
        print(json.dumps({name: row}), file=sys.stderr, flush=True)
    return out


def analyse(rows: list[dict], folder: Path) -> None:
    """The model's figures for the saved runs (``folder/p<i>/<shape>_heavy|light.hmpipe``),
    added to ``rows`` in place."""
    import hookmagic

    for i, proc in enumerate(rows):
        for name, row in proc["shapes"].items():
            run = hookmagic.load(folder / f"p{i}" / f"{name}_heavy.hmpipe")
            row["fps"], row["light_fps"] = row["heavy_fps"], row["light_fps"]
            row["cpu_share"] = {s: _share(run, s) for s in run.stage_names}
            for gil, key in ((True, ""), (False, "_nogil")):
                t = run.what_if(row["target"], 2.0, gil=gil)
                row["model_fps" + key] = float(t.iloc[1]["fps"])
                row["model_err" + key] = row["model_fps" + key] / row["fps"] - 1
                row["pred_fps" + key] = float(t.iloc[2]["fps"])
                row["pred_err" + key] = row["pred_fps" + key] / row["light_fps"] - 1


def _share(run, stage: str) -> float:
    ev = run.events[run.events["stage"] == stage]
    g = ev.groupby(["worker", "start_ns"]).agg(end=("end_ns", "first"), cpu=("cpu_ns", "first"))
    dur = (g["end"] - g.index.get_level_values("start_ns")).sum()
    return float(g["cpu"].sum() / dur) if dur > 0 else float("nan")


def report(rows: list[dict], info: dict, args: argparse.Namespace) -> str:
    def mm(vals, fmt="{:+.1f}"):
        a, b = fmt.format(min(vals)), fmt.format(max(vals))
        return a if a == b else f"{a} … {b}"

    lines = [f"# GIL-aware pipeline model against real Python stages ({info['cpus']} CPUs, "
             f"Python {info['python']}, {info['date']})", "",
             f"{len(rows)} fresh processes, {args.frames} frames a run; ranges are min–max over "
             "the processes (per process in parentheses). Re-run: `python "
             f"lab/pipeline/pipeline_gil.py --processes {args.processes} --frames {args.frames}`."
             "", "",
             "| shape | fps measured | model as measured: error (GIL / no GIL) | "
             "fps of the lighter run | what-if ×2 error (GIL / no GIL) | CPU share of the "
             "stages |", "|---|---|---|---|---|---|"]
    for name in rows[0]["shapes"]:
        rs = [r["shapes"][name] for r in rows]
        per = ", ".join(f"{100 * r['pred_err']:+.1f}" for r in rs)
        lines.append(
            f"| {name} | {mm([r['fps'] for r in rs], '{:.0f}')} | "
            f"{mm([100 * r['model_err'] for r in rs])} % / "
            f"{mm([100 * r['model_err_nogil'] for r in rs])} % | "
            f"{mm([r['light_fps'] for r in rs], '{:.0f}')} | "
            f"{mm([100 * r['pred_err'] for r in rs])} % ({per}) / "
            f"{mm([100 * r['pred_err_nogil'] for r in rs])} % | "
            + ", ".join(f"{s} {np.mean([r['cpu_share'][s] for r in rs]):.2f}"
                        for s in rs[0]["cpu_share"]) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--save", help="(worker) the folder its runs are saved in")
    ap.add_argument("--collect-only", action="store_true",
                    help="run and save the pipelines; model them later with --analyse-only")
    ap.add_argument("--analyse-only", action="store_true",
                    help="model the runs a --collect-only call saved in --out")
    args = ap.parse_args()
    if args.worker:
        save = Path(args.save)
        save.mkdir(parents=True, exist_ok=True)
        print(json.dumps(worker(args.frames, save)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    js = out / "pipeline_gil.json"
    if not args.analyse_only:
        info = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "python": platform.python_version(), "cpus": os.cpu_count()}
        rows = []
        # NumPy's BLAS on one thread: its GIL-free work takes one core, as the other stages do
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        for p in range(args.processes):
            res = subprocess.run([sys.executable, __file__, "--worker", "--frames",
                                  str(args.frames), "--save", str(out / "runs_gil" / f"p{p}")],
                                 capture_output=True, text=True, env=env)
            if res.returncode != 0:
                print(res.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"process {p} failed (rc {res.returncode})")
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
            js.write_text(json.dumps({"machine": info, "args": vars(args), "processes": rows},
                                     indent=1))
        if args.collect_only:
            return 0
    data = json.loads(js.read_text())
    rows, info = data["processes"], data["machine"]
    analyse(rows, out / "runs_gil")
    js.write_text(json.dumps({"machine": info, "args": data.get("args"), "processes": rows},
                             indent=1))
    text = report(rows, info, argparse.Namespace(**data.get("args") or vars(args)))
    (out / "pipeline_gil.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
