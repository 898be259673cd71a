"""What hookmagic.pipeline's instrumentation costs: the same pipeline with ``instrument=True``
and ``instrument=False``, interleaved, in several fresh processes.

    python lab/pipeline/pipeline_instrument.py --config noop,light [--processes 5] [--out DIR]
    python lab/pipeline/pipeline_instrument.py --config resnet50_fp16 --processes 3 --seconds 20   # GPU

Fairness: each process builds both pipelines, warms both up (runs not measured), then runs them
alternately in ABBA blocks (on, off | off, on | on, off, ...) over the *same* frames, with a full
garbage collection (of what the legs left: everything older is frozen) and, on the GPU, a device
synchronize before each leg; ``--seconds`` adds ABBA blocks until that much time has passed, so
the pairs are many short adjacent legs rather than a few long ones. A process's figure is the
median over its pairs of ``fps_on / fps_off - 1`` with a 95 % bootstrap interval of that median;
the table gives min–max over the processes and the median over all processes' pairs (each
process is one line of the CSV too). ``fps`` is :meth:`PipelineRun.throughput`'s
(done frames over the span from the first frame read to the last frame finished); the wall
clock of ``Pipeline.run`` (which also builds the tables) is recorded as ``wall_fps``, and the
process CPU time per frame (all threads, ``time.process_time``) as ``cpu_us``: the least
disturbed by other jobs on a shared machine. On the GPU the SM clock (NVML) is read after each
leg.

Configs:

- ``noop``: 4 stages ``lambda x: x`` on the CPU (the worst case: nothing to hide the
  framework's cost behind).
- ``light``: 4 CPU stages each doing ~16 µs of NumPy work on a 96×96 float array.
- ``gpu_noop``: 3 ``device="cuda"`` stages that launch one tiny kernel each (GPU machine):
  what the CUDA events cost per stage execution.
- ``resnet50_fp16``: pre-decoded 256×256 frames → GPU preprocess (2 workers) → ResNet-50 FP16
  channels-last, batch 16 → top-5 postprocess on the GPU: the inference-bound pipeline of
  lab/pipeline/pipeline_gpu.py (random weights), except that the infer stage waits up to 100 ms
  to fill its batch (480 frames a leg: 30 batches of 16, no batch size new to the worker
  thread; 3 warm-up runs of each pipeline).
  Each run also records its infer stage's first batch time against the median of the others
  (host ms): the pipeline keeps its worker threads (and their CUDA streams) across runs, so a
  later run's first batch should cost what the others do.

Writes ``pipeline_instrument.md`` and ``pipeline_instrument.csv`` to ``--out``.
"""
from __future__ import annotations

import argparse
import gc
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


def _sm_clock():
    """A reader of the GPU's SM clock in MHz through NVML (None where NVML is missing)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return lambda: int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - NVML absent or refused: the clock is only a diagnostic
        return None


def _ci(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of the median of ``ratios`` (resampled with replacement)."""
    r = np.asarray(ratios)
    idx = np.random.default_rng(0).integers(0, len(r), (draws, len(r)))
    meds = np.median(r[idx], axis=1)
    return float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


def worker(config: str, frames: int, pairs: int, seconds: float = 0.0, warmups: int = 1) -> dict:
    from hookmagic.pipeline import Pipeline

    t_setup = time.perf_counter()
    make, data, sync = _build(config, frames)
    costs = call_costs() if config == "gpu_noop" else {}
    clock = _sm_clock() if sync is not None else None
    pipes = {True: Pipeline(make(), queue_size=32, instrument=True, name=f"{config}_on"),
             False: Pipeline(make(), queue_size=32, instrument=False, name=f"{config}_off")}
    for _ in range(warmups):  # warm-up, not measured: allocator, cuDNN, the event pool, threads
        for inst in (True, False):
            pipes[inst].run(data)
    setup_s = time.perf_counter() - t_setup
    # what exists now lives for the whole process: a full collection before each leg then only
    # walks what the previous legs left, and no leg pays for a collection the other one caused
    gc.collect()
    gc.freeze()
    runs: list[dict] = []
    t_legs = time.perf_counter()
    p = 0
    # ABBA: on off | off on | on off | ...; whole ABBA blocks, at least `pairs` pairs, and more
    # blocks while `seconds` of legs have not passed
    while p < pairs or p % 2 or (seconds and time.perf_counter() - t_legs < seconds):
        order = (True, False) if p % 2 == 0 else (False, True)
        for inst in order:
            gc.collect()
            if sync is not None:
                sync()
            t, c = time.perf_counter(), time.process_time()
            run = pipes[inst].run(data)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            thr = run.throughput()
            assert thr["frames_done"] == len(data), thr
            row = {"pair": p, "instrument": inst, "fps": thr["fps"],
                   "wall_fps": len(data) / wall, "cpu_us": cpu / len(data) * 1e6}
            if clock is not None:
                row["sm_mhz"] = clock()
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
            del run
            runs.append(row)
        p += 1
    legs_s = time.perf_counter() - t_legs
    pairs = p
    on = {r["pair"]: r for r in runs if r["instrument"]}
    off = {r["pair"]: r for r in runs if not r["instrument"]}
    ratio = [on[p]["fps"] / off[p]["fps"] - 1 for p in range(pairs)]
    wratio = [on[p]["wall_fps"] / off[p]["wall_fps"] - 1 for p in range(pairs)]
    lo, hi = _ci(ratio)
    cpu_on = float(np.median([on[p]["cpu_us"] for p in range(pairs)]))
    cpu_off = float(np.median([off[p]["cpu_us"] for p in range(pairs)]))
    firsts = [r["first_batch_ms"] for r in runs if "first_batch_ms" in r]
    meds = [r["median_batch_ms"] for r in runs if "median_batch_ms" in r]
    extra = ({"first_batch_ms": float(np.median(firsts)), "median_batch_ms": float(np.median(meds))}
             if firsts else {})
    timed = [r["timed_share"] for r in runs if "timed_share" in r]
    if timed:
        extra["timed_share"] = float(np.median(timed))
    mhz = [r["sm_mhz"] for r in runs if "sm_mhz" in r]
    if mhz:
        extra.update(sm_mhz_min=min(mhz), sm_mhz_max=max(mhz))
    fps_all = [r["fps"] for r in runs]
    return {"config": config, "frames": len(data), "pairs": pairs, **extra, **costs,
            "cpu_us_on": cpu_on, "cpu_us_off": cpu_off,
            "fps_on": float(np.median([on[p]["fps"] for p in range(pairs)])),
            "fps_off": float(np.median([off[p]["fps"] for p in range(pairs)])),
            "change": float(np.median(ratio)), "change_ci_lo": lo, "change_ci_hi": hi,
            "change_mean": float(np.mean(ratio)),
            "change_sem": float(np.std(ratio, ddof=1) / np.sqrt(pairs)) if pairs > 1 else 0.0,
            "change_min": float(min(ratio)), "change_max": float(max(ratio)),
            "wall_change": float(np.median(wratio)),
            "leg_fps_cv": float(np.std(fps_all) / np.mean(fps_all)),
            "setup_s": setup_s, "legs_s": legs_s, "runs": runs}


def machine() -> dict:
    info = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        import torch
        info["torch"] = torch.__version__
        try:
            import torchvision
            info["torchvision"] = torchvision.__version__
        except ImportError:
            pass
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
    ap.add_argument("--seconds", type=float, default=0,
                    help="per process: add ABBA blocks while this many seconds of measured legs "
                         "have not passed (0: exactly --pairs pairs)")
    ap.add_argument("--warmups", type=int, default=0,
                    help="unmeasured runs of each pipeline before the legs (0: a default per config)")
    ap.add_argument("--interval-s", type=float, default=0,
                    help="time a GPU stage execution when this long has passed since the "
                         "worker's last timed one (0: hookmagic's default, "
                         "cuda_events.INTERVAL_S; a large value times about none: what the "
                         "rest of the instrumentation costs)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="after 3 processes per config, start another only if it is expected to "
                         "end within this many seconds of the start (0: no limit)")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    # frames per leg, least pairs, warm-up runs of each pipeline
    defaults = {"noop": (40000, 8, 1), "light": (10000, 8, 1), "gpu_noop": (3000, 8, 1),
                "resnet50_fp16": (480, 8, 3)}
    configs = args.config.split(",")
    if args.worker:
        c = configs[0]
        if args.interval_s:  # read by each worker at the start of every run
            from hookmagic.pipeline import cuda_events
            cuda_events.INTERVAL_S = args.interval_s
        f, p, w = defaults[c]
        print(json.dumps(worker(c, args.frames or f, args.pairs or p, args.seconds,
                                args.warmups or w)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    done = 0
    last = 0.0  # how long the last process (all configs) took
    for proc in range(args.processes):
        if args.budget_s and proc >= 3 and time.time() - t0 + last > args.budget_s:
            print(f"[instrument] budget: stopping after {proc} processes per config", flush=True)
            break
        done += 1
        tp = time.time()
        for c in configs:  # processes interleave the configs too
            res = subprocess.run([sys.executable, *(["-S"] if sys.flags.no_site else []),
                                  __file__, "--worker", "--config", c,
                                  "--frames", str(args.frames), "--pairs", str(args.pairs),
                                  "--seconds", str(args.seconds), "--warmups", str(args.warmups),
                                  "--interval-s", str(args.interval_s)],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stdout[-2000:], res.stderr[-4000:], sep="\n", file=sys.stderr)
                raise SystemExit(f"worker {c} process {proc} failed (rc {res.returncode})")
            r = json.loads(res.stdout.strip().splitlines()[-1])
            r["process"] = proc
            rows.append(r)
            # kept after every process: a command stopped at its time limit keeps what ran
            (out / "pipeline_instrument_runs.json").write_text(json.dumps({"rows": rows}))
            print(f"[instrument {time.strftime('%H:%M:%S')}] process {proc} {c}: on "
                  f"{r['fps_on']:.1f} fps, off {r['fps_off']:.1f} fps, change "
                  f"{100 * r['change']:+.2f} % (95 % CI {100 * r['change_ci_lo']:+.1f}.."
                  f"{100 * r['change_ci_hi']:+.1f}; {r['pairs']} pairs "
                  f"{100 * r['change_min']:+.1f}..{100 * r['change_max']:+.1f} %; setup "
                  f"{r['setup_s']:.1f}s, legs {r['legs_s']:.1f}s) [{time.time() - t0:.0f}s]",
                  flush=True)
        last = time.time() - tp
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
    rerun = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                     if k in ("frames", "pairs", "seconds", "warmups", "interval_s", "budget_s")
                     and v)
    lines = [f"# hookmagic.pipeline: instrumentation on vs off, {where}, {info['date']}", "",
             f"Python {info['python']}, torch {info.get('torch', '–')}"
             f"{', torchvision ' + info['torchvision'] if 'torchvision' in info else ''}. {done} fresh "
             "processes per config; in each, both pipelines warmed up (runs not measured), then "
             "run alternately in ABBA blocks (on off | off on | ...) over the same frames, a full "
             "garbage collection before each leg; a process's change is the median over its "
             "pairs of fps_on / fps_off − 1, with a 95 % bootstrap interval of that median. "
             "Ranges are min–max over the processes; \"all pairs\" pools every process's pairs. "
             f"Re-run: `python lab/pipeline/pipeline_instrument.py --config {args.config} "
             f"--processes {args.processes}{' ' + rerun if rerun else ''}`.", "",
             "| config | frames × pairs per process | fps on | fps off | change per process "
             "(fps) | 95 % interval per process | all pairs: median (95 % interval) | "
             "change per process (wall clock) | process CPU µs / frame, on / off | "
             "added µs per frame (1/fps_on − 1/fps_off) |",
             "|---|---|---:|---:|---|---|---|---|---|---|"]
    for c in configs:
        d = df[df["config"] == c]
        per = ", ".join(f"{100 * v:+.1f}" for v in d["change"])
        cis = ", ".join(f"{100 * a:+.1f} … {100 * b:+.1f}"
                        for a, b in zip(d["change_ci_lo"], d["change_ci_hi"]))
        pooled = []
        for r in rows:
            if r["config"] == c:
                on = {x["pair"]: x["fps"] for x in r["runs"] if x["instrument"]}
                off = {x["pair"]: x["fps"] for x in r["runs"] if not x["instrument"]}
                pooled += [on[k] / off[k] - 1 for k in on]
        plo, phi = _ci(pooled)
        lines.append(f"| {c}: {DESCRIPTIONS[c]} | {int(d['frames'].iloc[0])} × "
                     f"{mm(list(d['pairs']), '{:.0f}')} | {mm(list(d['fps_on']), '{:.0f}')} | "
                     f"{mm(list(d['fps_off']), '{:.0f}')} | "
                     f"{mm(list(100 * d['change']), '{:+.1f}')} % ({per}) | {cis} % | "
                     f"{100 * np.median(pooled):+.1f} % ({100 * plo:+.1f} … {100 * phi:+.1f}; "
                     f"{len(pooled)} pairs) | "
                     f"{mm(list(100 * d['wall_change']), '{:+.1f}')} % | "
                     f"{mm(list(d['cpu_us_on']), '{:.1f}')} / {mm(list(d['cpu_us_off']), '{:.1f}')} | "
                     f"{mm(list(1e6 / d['fps_on'] - 1e6 / d['fps_off']), '{:+.1f}')} |")
    for c in configs:
        d = df[df["config"] == c]
        lines += ["", f"{c}: single pairs {100 * d['change_min'].min():+.1f} … "
                  f"{100 * d['change_max'].max():+.1f} %; leg-to-leg fps spread (coefficient of "
                  f"variation, all legs of a process) {mm(list(100 * d['leg_fps_cv']), '{:.1f}')} %;"
                  f" per process {mm(list(d['setup_s']), '{:.1f}')} s of setup and warm-up, "
                  f"{mm(list(d['legs_s']), '{:.1f}')} s of legs."]
        if "sm_mhz_min" in d and d["sm_mhz_min"].notna().any():
            lines += ["", f"{c}: SM clock read after each leg (NVML): "
                      f"{int(d['sm_mhz_min'].min())} – {int(d['sm_mhz_max'].max())} MHz."]
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
