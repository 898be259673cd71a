"""What hookmagic.pipeline's instrumentation costs: the same pipeline with ``instrument=True``
and ``instrument=False``, interleaved, in several fresh processes.

    python lab/pipeline/pipeline_instrument.py --config noop,light [--processes 5] [--out DIR]
    python lab/pipeline/pipeline_instrument.py --config resnet50_fp16 --processes 3   # GPU

Fairness: each process builds both pipelines, warms both up, then runs them alternately in
ABBA order (on, off, off, on, on, off, ...) over the *same* frames; a process's figure is the
median over its pairs of ``fps_on / fps_off - 1``, and the table gives min–max over the
processes (each process is one line of the CSV too). ``fps`` is :meth:`PipelineRun.throughput`'s
(done frames over the span from the first frame read to the last frame finished); the wall
clock of ``Pipeline.run`` (which also builds the tables) is recorded as ``wall_fps``, and the
process CPU time per frame (all threads, ``time.process_time``) as ``cpu_us``: the least
disturbed by other jobs on a shared machine.

Configs:

- ``noop``: 4 stages ``lambda x: x`` on the CPU (the worst case: nothing to hide the
  framework's cost behind).
- ``light``: 4 CPU stages each doing ~16 µs of NumPy work on a 96×96 float array.
- ``gpu_noop``: 3 ``device="cuda"`` stages that launch one tiny kernel each (GPU machine):
  what the CUDA events cost per stage execution.
- ``resnet50_fp16``: pre-decoded 256×256 frames → GPU preprocess (2 workers) → ResNet-50 FP16
  channels-last, batch 16 → top-5 postprocess on the GPU: the inference-bound pipeline of
  lab/pipeline/pipeline_gpu.py (random weights), except that the infer stage waits up to 100 ms
  to fill its batch (1440 frames: 90 batches of 16, no batch size new to the worker thread).
  Each run also records its infer stage's first batch time against the median of the others
  (host ms): the pipeline keeps its worker threads (and their CUDA streams) across runs, so a
  later run's first batch should cost what the others do.

Writes ``pipeline_instrument.md`` and ``pipeline_instrument.csv`` to ``--out``.
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

DESCRIPTIONS = {
    "noop": "4 no-op CPU stages",
    "light": "4 CPU stages of ~16 µs NumPy work each",
    "gpu_noop": "3 GPU stages, one tiny kernel each",
    "resnet50_fp16": "256×256 frames → GPU preprocess ×2 → ResNet-50 FP16 b16 → top-5 (GPU)",
}


def _build(config: str, frames: int):
    """(stages factory, frames list, sync function) for a config."""
    from hookmagic.pipeline import Stage

    if config == "noop":
        def make():
            return [Stage(f"s{k}", lambda x: x) for k in range(4)]
        return make, list(range(frames)), None
    if config == "light":
        def work(x):
            y = np.sqrt(x * x + 1.0)
            return y - y.mean() * 0.5
        data = [np.random.default_rng(i).standard_normal((96, 96)) for i in range(64)]

        def make():
            return [Stage(f"s{k}", work) for k in range(4)]
        return make, (data * (frames // len(data) + 1))[:frames], None

    import torch
    if not torch.cuda.is_available():
        raise SystemExit(f"{config} needs a CUDA device")
    if config == "gpu_noop":
        def up(x):
            return x + 1

        def make():
            return [Stage(f"g{k}", up, device="cuda") for k in range(3)]
        base = torch.zeros(16, device="cuda")
        return make, [base] * frames, torch.cuda.synchronize

    if config != "resnet50_fp16":
        raise SystemExit(f"unknown config {config!r}")
    import torchvision
    dev, half = "cuda", torch.float16
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(3, 1, 1) * 255
    model = torchvision.models.resnet50(weights=None).eval().to(dev).half()
    model = model.to(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = False

    def pre(frame):
        x = torch.from_numpy(frame).to(dev).permute(2, 0, 1).float()
        x = torch.nn.functional.interpolate(x[None], size=(224, 224), mode="bilinear",
                                            antialias=False, align_corners=False)[0]
        return ((x - mean) / std).to(half)

    def infer(batch):
        with torch.inference_mode():
            x = torch.stack(batch).contiguous(memory_format=torch.channels_last)
            return model(x)

    def post(logits):
        return torch.softmax(logits.float(), -1).topk(5).indices.cpu().numpy()

    rng = np.random.default_rng(0)
    small = [rng.integers(0, 256, (256, 256, 3), dtype=np.uint8) for _ in range(8)]
    x = [pre(small[0])] * 16
    for b in (16, 8, 4, 2, 1):
        post(infer(x[:b])[0])
    torch.cuda.synchronize()

    def make():
        return [Stage("preprocess", pre, workers=2, device="cuda"),
                Stage("infer", infer, batch=16, device="cuda", batch_wait_ms=100),
                Stage("postprocess", post, device="cuda")]
    return make, (small * (frames // len(small) + 1))[:frames], torch.cuda.synchronize


def call_costs() -> dict:
    """Host µs per call, one thread, nothing else running: cuEventRecord through ctypes.PyDLL
    (what the runner does), torch.cuda.Event.record, and Stream.synchronize after a tiny kernel."""
    import torch

    from hookmagic.pipeline import cuda_events
    s = torch.cuda.Stream()
    torch.cuda.set_stream(s)
    cuda_events.bind_context(torch.cuda.current_device())
    pairs = cuda_events.EventPairs()
    evs = [pairs.take() for _ in range(512)]
    tev = [torch.cuda.Event(enable_timing=True) for _ in range(512)]
    x = torch.zeros(16, device="cuda")
    h, rec = s.cuda_stream, pairs.record
    out = {}
    for name, one in (("driver_record_us", lambda i: rec(evs[i][0], h)),
                      ("torch_record_us", lambda i: tev[i].record(s))):
        best = float("inf")
        for _ in range(5):
            s.synchronize()
            t = time.perf_counter_ns()
            for i in range(512):
                one(i)
            best = min(best, (time.perf_counter_ns() - t) / 512 / 1e3)
        out[name] = best
    times = []
    for i in range(200):
        x.add_(1)
        t = time.perf_counter_ns()
        s.synchronize()
        times.append((time.perf_counter_ns() - t) / 1e3)
    out["sync_after_kernel_us"] = float(np.median(times))
    torch.cuda.set_stream(torch.cuda.default_stream())
    return out


def worker(config: str, frames: int, pairs: int) -> dict:
    from hookmagic.pipeline import Pipeline

    make, data, sync = _build(config, frames)
    costs = call_costs() if config == "gpu_noop" else {}
    pipes = {True: Pipeline(make(), queue_size=32, instrument=True, name=f"{config}_on"),
             False: Pipeline(make(), queue_size=32, instrument=False, name=f"{config}_off")}
    for inst in (True, False):  # warm-up (all frames): allocator, cuDNN, the event pool
        pipes[inst].run(data)
    runs: list[dict] = []
    for p in range(pairs):
        order = (True, False) if p % 2 == 0 else (False, True)
        for inst in order:
            if sync is not None:
                sync()
            t, c = time.perf_counter(), time.process_time()
            run = pipes[inst].run(data)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            thr = run.throughput()
            assert thr["frames_done"] == len(data), thr
            row = {"pair": p, "instrument": inst, "fps": thr["fps"],
                   "wall_fps": len(data) / wall, "cpu_us": cpu / len(data) * 1e6}
            if inst and sync is not None:  # the share of GPU stage executions that were timed
                gev = run.events[run.events["stage_index"] > 0]
                row["timed_share"] = float((gev["gpu_start_ns"] >= 0).mean())
            bat = [s.name for s in pipes[inst].stages if s.batch]
            if bat:
                ev = (run.events[run.events["stage"] == bat[0]].drop_duplicates("batch")
                      .sort_values("start_ns"))
                ms = ((ev["end_ns"] - ev["start_ns"]) / 1e6).to_numpy()
                if len(ms) > 2:
                    row.update(first_batch_ms=float(ms[0]), median_batch_ms=float(np.median(ms[1:])),
                               batch_sizes=sorted(set(ev["batch_size"].tolist())))
            runs.append(row)
    on = {r["pair"]: r for r in runs if r["instrument"]}
    off = {r["pair"]: r for r in runs if not r["instrument"]}
    ratio = [on[p]["fps"] / off[p]["fps"] - 1 for p in range(pairs)]
    wratio = [on[p]["wall_fps"] / off[p]["wall_fps"] - 1 for p in range(pairs)]
    cpu_on = float(np.median([on[p]["cpu_us"] for p in range(pairs)]))
    cpu_off = float(np.median([off[p]["cpu_us"] for p in range(pairs)]))
    firsts = [r["first_batch_ms"] for r in runs if "first_batch_ms" in r]
    meds = [r["median_batch_ms"] for r in runs if "median_batch_ms" in r]
    extra = ({"first_batch_ms": float(np.median(firsts)), "median_batch_ms": float(np.median(meds))}
             if firsts else {})
    timed = [r["timed_share"] for r in runs if "timed_share" in r]
    if timed:
        extra["timed_share"] = float(np.median(timed))
    return {"config": config, "frames": len(data), "pairs": pairs, **extra, **costs,
            "cpu_us_on": cpu_on, "cpu_us_off": cpu_off,
            "fps_on": float(np.median([on[p]["fps"] for p in range(pairs)])),
            "fps_off": float(np.median([off[p]["fps"] for p in range(pairs)])),
            "change": float(np.median(ratio)), "change_min": float(min(ratio)),
            "change_max": float(max(ratio)), "wall_change": float(np.median(wratio)),
            "runs": runs}


def machine() -> dict:
    info = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        import torch
        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=20)
            info["driver"] = (out.stdout.strip().splitlines() or ["unknown"])[0]
    except (ImportError, OSError, subprocess.TimeoutExpired):
        pass
    return info


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="noop,light")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--frames", type=int, default=0, help="0: a default per config")
    ap.add_argument("--pairs", type=int, default=0, help="0: a default per config")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no further process after this many seconds (0: no limit)")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    defaults = {"noop": (40000, 8), "light": (10000, 8), "gpu_noop": (3000, 8),
                "resnet50_fp16": (1440, 6)}
    configs = args.config.split(",")
    if args.worker:
        c = configs[0]
        f, p = defaults[c]
        print(json.dumps(worker(c, args.frames or f, args.pairs or p)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    done = 0
    for proc in range(args.processes):
        if args.budget_s and proc >= 2 and time.time() - t0 > args.budget_s:
            print(f"[instrument] budget: stopping after {proc} processes per config", flush=True)
            break
        done += 1
        for c in configs:  # processes interleave the configs too
            res = subprocess.run([sys.executable, *(["-S"] if sys.flags.no_site else []),
                                  __file__, "--worker", "--config", c,
                                  "--frames", str(args.frames), "--pairs", str(args.pairs)],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stdout[-2000:], res.stderr[-4000:], sep="\n", file=sys.stderr)
                raise SystemExit(f"worker {c} process {proc} failed (rc {res.returncode})")
            r = json.loads(res.stdout.strip().splitlines()[-1])
            r["process"] = proc
            rows.append(r)
            print(f"[instrument {time.strftime('%H:%M:%S')}] process {proc} {c}: on "
                  f"{r['fps_on']:.1f} fps, off {r['fps_off']:.1f} fps, change "
                  f"{100 * r['change']:+.2f} % (pairs {100 * r['change_min']:+.1f}.."
                  f"{100 * r['change_max']:+.1f} %) [{time.time() - t0:.0f}s]", flush=True)
    info = machine()
    import pandas as pd
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "runs"} for r in rows])
    df.to_csv(out / "pipeline_instrument.csv", index=False, float_format="%.5g")
    (out / "pipeline_instrument_runs.json").write_text(json.dumps(
        {"machine": info, "rows": rows}, indent=1))

    def mm(vals, fmt):
        lo, hi = min(vals), max(vals)
        a, b = fmt.format(lo), fmt.format(hi)
        return a if a == b else f"{a} – {b}"

    where = (f"{info.get('gpu')} (driver {info.get('driver')})" if info.get("gpu")
             else f"CPU only ({info['cpu']}, {info['cores']} cores)")
    lines = [f"# hookmagic.pipeline: instrumentation on vs off, {where}, {info['date']}", "",
             f"Python {info['python']}, torch {info.get('torch', '–')}. {done} fresh "
             "processes per config; in each, both pipelines warmed up, then run alternately "
             "(ABBA) over the same frames; a process's change is the median over its pairs of "
             "fps_on / fps_off − 1. Ranges are min–max over the processes. Re-run: "
             f"`python lab/pipeline/pipeline_instrument.py --config {args.config} "
             f"--processes {args.processes}`.", "",
             "| config | frames × pairs | fps on | fps off | change per process (fps) | "
             "change per process (wall clock) | process CPU µs / frame, on / off | "
             "added µs per frame (1/fps_on − 1/fps_off) |",
             "|---|---|---:|---:|---|---|---|---|"]
    for c in configs:
        d = df[df["config"] == c]
        per = ", ".join(f"{100 * v:+.1f}" for v in d["change"])
        lines.append(f"| {c}: {DESCRIPTIONS[c]} | {int(d['frames'].iloc[0])} × "
                     f"{int(d['pairs'].iloc[0])} | {mm(list(d['fps_on']), '{:.0f}')} | "
                     f"{mm(list(d['fps_off']), '{:.0f}')} | "
                     f"{mm(list(100 * d['change']), '{:+.1f}')} % ({per}) | "
                     f"{mm(list(100 * d['wall_change']), '{:+.1f}')} % | "
                     f"{mm(list(d['cpu_us_on']), '{:.1f}')} / {mm(list(d['cpu_us_off']), '{:.1f}')} | "
                     f"{mm(list(1e6 / d['fps_on'] - 1e6 / d['fps_off']), '{:+.1f}')} |")
    for c in configs:
        d = df[df["config"] == c]
        if "timed_share" in d and d["timed_share"].notna().any():
            lines += ["", f"{c}: share of GPU stage executions timed (instrumented runs, median "
                      f"per process): {mm(list(100 * d['timed_share']), '{:.1f}')} %."]
        if "driver_record_us" in d and d["driver_record_us"].notna().any():
            lines += ["", f"{c}, host µs per call on one thread with nothing else running: "
                      f"cuEventRecord through ctypes.PyDLL {mm(list(d['driver_record_us']), '{:.2f}')}"
                      f", torch.cuda.Event.record {mm(list(d['torch_record_us']), '{:.2f}')}, "
                      f"Stream.synchronize after a tiny kernel "
                      f"{mm(list(d['sync_after_kernel_us']), '{:.1f}')}."]
        if "first_batch_ms" in d and d["first_batch_ms"].notna().any():
            lines += ["", f"{c}: the batched stage's first batch of a run took "
                      f"{mm(list(d['first_batch_ms']), '{:.1f}')} ms, its later batches "
                      f"{mm(list(d['median_batch_ms']), '{:.1f}')} ms (host time, medians over "
                      "each process's runs; the worker threads are kept across runs)."]
    text = "\n".join(lines) + "\n"
    (out / "pipeline_instrument.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
