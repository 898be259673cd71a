"""Real frame pipelines on the GPU: decode → preprocess → infer → postprocess, recorded per frame.

    python lab/pipeline/pipeline_gpu.py OUTDIR [--process 0] [--frames 240] [--cpu-smoke]

On the GPU machine (torch with CUDA, torchvision; PyAV if carried): encodes a synthetic 1080p
H.264 clip with PyAV (pictures generated, encoding real), then runs these pipelines with
``hookmagic.pipeline`` and saves each run as ``OUTDIR/<config>.hmpipe`` (process 0 only) plus one
row of results per config in ``OUTDIR/results_p<process>.json``:

- ``resnet50_fp16_gpupre``: PyAV CPU decode → GPU preprocess (upload, resize 224, normalise,
  fp16) → ResNet-50 FP16 channels-last, batch 16 → top-5 postprocess.
- ``resnet50_fp16_cpupre``: the same with torchvision transforms v2 on the CPU (2 workers).
- ``detector_fp16_gpupre``: SSDlite320-MobileNetV3 (FP16 autocast), batch 8, GPU preprocess.
- ``nvdec_resnet50_fp16``: NVDEC decode (``nvdec_video``: PyNvVideoCodec, else torchcodec's
  CUDA decoder) when installed, else recorded as unavailable with the reason.
- Three constructed pipelines whose bottleneck is known: ``bound_decode`` (1-thread decode of
  the clip, fast GPU stages), ``bound_preprocess`` (pre-decoded frames, CPU antialiased resize
  on 1 worker), ``bound_infer`` (pre-decoded frames, GPU preprocess, ResNet-50 FP32 batch 16),
  and ``bound_infer_fp16`` (the same in FP16): ``what_if("infer", k)`` on the FP32 run, with k
  the measured ratio of the infer stage's mean time, is checked against the FP16 run.
- ``instrument_on``/``instrument_off``: the infer-bound FP16 pipeline with and without
  ``hookmagic.range`` and CUDA events (both warmed up, then 3 pairs in ABBA order).
- Standalone throughput of each stage of ``resnet50_fp16_gpupre`` (decode alone, preprocess
  alone, infer alone at batch 16, postprocess alone) to compare the pipeline with its slowest
  stage.

Model weights are random (``weights=None``: nothing downloaded); the timings do not depend on
them except the detector's postprocess (NMS over random scores). Without PyAV, frames generated
in-process stand in for decoding and every recording's meta says so. ``--cpu-smoke`` runs the
same code small on the CPU to check the script; its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hookmagic.pipeline import Pipeline, Stage, frames as frames_source  # noqa: E402
from hookmagic.pipeline import video_file, write_synthetic_video  # noqa: E402


def log(msg: str) -> None:
    print(f"[pipeline {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def machine(torch) -> dict:
    info = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
            "python": sys.version.split()[0]}
    try:
        import torchvision
        info["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            info["driver"] = out.stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            info["driver"] = "unknown"
    else:
        info["gpu"], info["driver"] = "none (CPU smoke run: numbers mean nothing)", "none"
    try:
        import av
        info["av"] = av.__version__
    except ImportError:
        info["av"] = None
    return info


def summarize(out: Path) -> str:
    """benchmarks/results/pipeline.md's table: min–max over the fresh processes' results."""
    files = sorted(out.glob("results_p*.json"))
    docs = [json.loads(f.read_text()) for f in files]
    if not docs:
        raise SystemExit(f"no results_p*.json in {out}")
    m = docs[0]["machine"]
    rows = [r for d in docs for r in d["results"]]

    def rng(vals, fmt="{:.1f}"):
        vals = [v for v in vals if v is not None and np.isfinite(v)]
        if not vals:
            return "–"
        lo, hi = min(vals), max(vals)
        return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"

    lines = [f"# Frame pipelines on {m['gpu']} (driver {m['driver']}, {m['date']})", "",
             f"torch {m['torch']}, torchvision {m.get('torchvision')}, Python {m['python']}; "
             f"decode: {docs[0]['decode']}. {len(docs)} fresh processes; ranges are min–max "
             "over them. Model weights random (timings do not depend on them). Re-run: "
             "`bash benchmarks/gpu/pipeline.sh` with `$OUT` set.", "",
             "| config | what | fps | e2e p50 ms | e2e p99 ms | bottleneck (per process) | expected |",
             "|---|---|---|---|---|---|---|"]
    seen = []
    for r in rows:
        if "fps" in r and "description" in r and r["config"] not in seen:
            seen.append(r["config"])
    for c in seen:
        rs = [r for r in rows if r["config"] == c]
        lines.append(f"| {c} | {rs[0]['description']} | {rng([r['fps'] for r in rs])} | "
                     f"{rng([r['p50_ms'] for r in rs])} | {rng([r['p99_ms'] for r in rs])} | "
                     f"{', '.join(str(r['bottleneck']) for r in rs)} | "
                     f"{rs[0].get('expected_bottleneck') or ''} |")
    wi = [r for r in rows if r["config"] == "what_if_check"]
    lines += ["", "What-if check (FP32 inference-bound run, `what_if('infer', k)` with k the "
              "measured FP32/FP16 infer-stage ratio, against the FP16 run):", "",
              f"- k {rng([r['k'] for r in wi], '{:.2f}')}; predicted "
              f"{rng([r['predicted_fps'] for r in wi])} fps, measured "
              f"{rng([r['measured_fps'] for r in wi])} fps; error "
              f"{rng([100 * r['error'] for r in wi], '{:+.1f}')} %"]
    ratios = []
    for d in docs:
        on = {r["rep"]: r["fps"] for r in d["results"] if r["config"] == "instrument_on"}
        off = {r["rep"]: r["fps"] for r in d["results"] if r["config"] == "instrument_off"}
        pairs = [on[k] / off[k] - 1 for k in on if k in off]
        if pairs:
            ratios.append(100 * float(np.median(pairs)))
    if ratios:
        lines.append(f"- instrumentation on vs off (hookmagic.range + CUDA events), infer-bound FP16, "
                     f"median over 3 ABBA pairs per process: fps change {rng(ratios, '{:+.1f}')} % "
                     f"(per process: {', '.join(f'{r:+.1f}' for r in ratios)})")
    sa = [r for r in rows if r["config"] == "standalone"]
    if sa:
        lines.append(f"- resnet50_fp16_gpupre vs its slowest stage alone ({sa[0]['slowest']}): "
                     f"{rng([100 * r['ratio'] for r in sa], '{:.0f}')} % of its standalone "
                     f"throughput; standalone fps: " + ", ".join(
                         f"{k} {rng([r[k + '_fps'] for r in sa], '{:.0f}')}"
                         for k in ("decode", "preprocess", "infer", "postprocess")))
    ad = [r for r in rows if r["config"] == "adaptive_oom"]
    if ad and "error" in ad[0]:
        lines.append(f"- adaptive batching demo failed: {ad[0]['error']}")
    elif ad:
        a = ad[0]
        lines.append(f"- adaptive batch size (ResNet-50 FP16 + 1 GiB workspace per frame, memory "
                     f"capped so batch 11 runs out of memory): {a['ooms']} out-of-memory splits, "
                     f"sizes {a['sizes']}, settled at {a['final_size']} (ceiling "
                     f"{a['ceiling']}); frames done {a['frames_done']}, failed "
                     f"{a['frames_failed']}")
    nv = [r for r in rows if r["config"] == "nvdec_resnet50_fp16"]
    if nv and "unavailable" in nv[0]:
        lines.append(f"- NVDEC: not run on this machine: {nv[0]['unavailable']}")
    elif nv:
        lines.append(f"- NVDEC (hookmagic.pipeline.nvdec_video) → GPU preprocess → ResNet-50 FP16: "
                     f"{rng([r['fps'] for r in nv])} fps, p99 {rng([r['p99_ms'] for r in nv])} ms, "
                     f"bottleneck {', '.join(str(r['bottleneck']) for r in nv)}")
    text = "\n".join(lines) + "\n"
    (out / "pipeline.md").write_text(text)
    return text


def adaptive_demo(torch, out, info, small_source, pre, model, dtype, dev, gdev) -> dict:
    """AdaptiveBatch over ResNet-50 FP16 plus 1 GiB of workspace per frame, with the process
    capped (torch.cuda.set_per_process_memory_fraction) at what it holds now + 10.5 GiB: batch
    10 fits, batch 11 runs out of memory. The controller should settle at 10, losing no frame."""
    from hookmagic.pipeline import AdaptiveBatch
    gib = 1 << 30
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    base = torch.cuda.memory_reserved()
    cap = base + int(10.5 * gib)
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))

    def fn(batch):
        with torch.inference_mode():
            work = torch.empty(len(batch) * gib, dtype=torch.uint8, device=dev)
            x = torch.stack(batch).to(dtype).contiguous(memory_format=torch.channels_last)
            y = model(x)
            del work
            return y

    ctl = AdaptiveBatch(fn, slo_ms=1000, max_batch=32, window=2)
    try:
        run = Pipeline([Stage("preprocess", pre, device=gdev),
                        Stage("infer", ctl, batch=32, device=gdev),
                        Stage("postprocess", lambda y: int(y.argmax()), device=gdev)],
                       queue_size=64, name="adaptive_oom").run(small_source())
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    d = ctl.decisions
    d.to_csv(out / "adaptive_oom_decisions.csv", index=False)
    run.meta.update(recorded_on={"gpu": info["gpu"], "driver": info["driver"],
                                 "date": info["date"]}, machine=info,
                    description="AdaptiveBatch: ResNet-50 FP16 + 1 GiB workspace per frame, "
                                "memory capped so that batch 11 runs out of memory",
                    decode="pre-decoded frames", adaptive_decisions=d.to_dict("records"))
    run.save(out / "adaptive_oom.hmpipe")
    res = {"config": "adaptive_oom", "process": 0, "frames_done": int(run.outcomes.get("done", 0)),
           "frames_failed": int(run.outcomes.get("failed", 0)), "final_size": ctl.size,
           "ceiling": ctl.ceiling, "ooms": int((d["action"] == "oom_split").sum()),
           "sizes": [a for a in d["size_to"].tolist()]}
    log(f"adaptive: {res}")
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--summarize", action="store_true", help="only write OUT/pipeline.md")
    ap.add_argument("--process", type=int, default=0)
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.summarize:
        print(summarize(out))
        return 0

    import torch
    import torchvision
    from torchvision.transforms import v2

    smoke = args.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        log("FAIL: no CUDA device (use --cpu-smoke to check the script on a CPU)")
        return 2
    dev = "cpu" if smoke else "cuda"
    gdev = "cpu" if smoke else "cuda"  # Stage.device for GPU stages
    W, H = (320, 240) if smoke else (1920, 1080)
    n = 24 if smoke else args.frames
    half = torch.float32 if smoke else torch.float16
    info = machine(torch)
    log(f"machine: {info}")
    torch.backends.cudnn.benchmark = False

    # -- the clip ------------------------------------------------------------------------
    clip = Path(os.environ.get("TMPDIR", "/tmp")) / f"hookmagic_pipeline_{W}x{H}_{n}.mp4"
    if info["av"]:
        if not clip.exists():
            t = time.time()
            write_synthetic_video(clip, frames=n, width=W, height=H, fps=30)
            log(f"encoded synthetic clip {clip.name} in {time.time() - t:.1f}s")
        decode_note = f"PyAV {info['av']} CPU decode of a synthetic {W}x{H} H.264 clip ({n} frames)"

        def decoded(threads: int = 4):  # FFmpeg frame+slice threads; bound_decode uses 1
            return video_file(clip, threads=threads)

        frames_np = list(decoded().streams[0].open())
    else:
        decode_note = (f"synthetic in-process frames (PyAV absent on this machine): no decoding, "
                       f"{W}x{H}, {n} frames")
        rng = np.random.default_rng(0)
        frames_np = [rng.integers(0, 256, (H, W, 3), dtype=np.uint8) for _ in range(n)]

        def decoded(threads: int = 4):
            src = frames_source([f.copy() for f in frames_np], name="synthetic")
            src.stage = "decode"
            return src
    log(f"decode: {decode_note}")

    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(3, 1, 1) * 255

    def pre_gpu(size: int):
        def fn(frame: np.ndarray):
            x = torch.from_numpy(frame).to(dev, non_blocking=False).permute(2, 0, 1).float()
            x = torch.nn.functional.interpolate(x[None], size=(size, size), mode="bilinear",
                                                antialias=False, align_corners=False)[0]
            return ((x - mean) / std).to(half)
        return fn

    cpu_tf = v2.Compose([v2.ToImage(), v2.Resize((224, 224), antialias=True),
                         v2.ToDtype(torch.float32, scale=True),
                         v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def pre_cpu(frame: np.ndarray):
        return cpu_tf(frame)

    resnet = torchvision.models.resnet50(weights=None).eval().to(dev)
    resnet_h = resnet if smoke else torchvision.models.resnet50(weights=None).eval().to(dev).half()
    resnet = resnet.to(memory_format=torch.channels_last)
    resnet_h = resnet_h.to(memory_format=torch.channels_last)

    def infer(model, dtype):
        def fn(batch):
            with torch.inference_mode():
                x = torch.stack(batch).to(dev, non_blocking=True).to(dtype)
                return model(x.contiguous(memory_format=torch.channels_last))
        return fn

    def post(logits):
        top = torch.softmax(logits.float(), -1).topk(5)
        return top.indices.cpu().numpy()

    det = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None).eval().to(dev)

    def det_infer(batch):
        with torch.inference_mode(), torch.autocast(dev, dtype=torch.float16, enabled=not smoke):
            return det([b.float() for b in batch])

    def det_post(d):
        keep = d["scores"] > 0.5
        return {"boxes": d["boxes"][keep].float().cpu().numpy(), "labels": d["labels"][keep].cpu()}

    def warm():
        x = [pre_gpu(224)(frames_np[0])] * 16
        for b in (16, 8, 4, 1):
            post(infer(resnet_h, half)(x[:b])[0])
            infer(resnet, torch.float32)(x[:b])
        dx = [pre_gpu(320)(frames_np[0])] * 8
        for b in (8, 1):
            det_infer(dx[:b])
        pre_cpu(frames_np[0])
        if not smoke:
            torch.cuda.synchronize()

    t = time.time()
    warm()
    log(f"models built and warmed in {time.time() - t:.1f}s")

    def stages(pre_fn, pre_dev, pre_workers, model, dtype, bs=16):
        return [Stage("preprocess", pre_fn, workers=pre_workers, device=pre_dev),
                Stage("infer", infer(model, dtype), batch=bs, device=gdev),
                Stage("postprocess", post, device=gdev)]

    reps = max(1, (480 if not smoke else 48) // len(frames_np))
    many = frames_np * reps  # references, not copies

    def memory_source():
        src = frames_source(many, name="predecoded")
        src.description = f"{len(many)} pre-decoded frames in memory ({W}x{H})"
        return src

    # the infer-bound pipelines read small frames, so upload and resize stay cheap
    small = [np.ascontiguousarray(torch.nn.functional.interpolate(
        torch.from_numpy(f).permute(2, 0, 1)[None].float(), size=(256, 256))[0]
        .permute(1, 2, 0).to(torch.uint8).numpy()) for f in frames_np[:8]]
    small_many = (small * (len(many) // len(small) + 1))[:len(many)]

    def small_source():
        src = frames_source(small_many, name="predecoded_256")
        src.description = f"{len(small_many)} pre-decoded frames resized to 256x256 in memory"
        return src

    configs = {
        "resnet50_fp16_gpupre": (lambda: stages(pre_gpu(224), gdev, 1, resnet_h, half),
                                 decoded, "decode (PyAV, 4 threads) → GPU preprocess → ResNet-50 FP16 b16 → top-5"),
        "resnet50_fp16_cpupre": (lambda: stages(pre_cpu, "cpu", 2, resnet_h, half),
                                 decoded, "decode (PyAV) → CPU transforms v2 (2 workers) → ResNet-50 FP16 b16 → top-5"),
        "detector_fp16_gpupre": (lambda: [Stage("preprocess", pre_gpu(320), device=gdev),
                                          Stage("infer", det_infer, batch=8, device=gdev),
                                          Stage("postprocess", det_post, device=gdev)],
                                 decoded, "decode (PyAV) → GPU preprocess 320 → SSDlite320-MobileNetV3 FP16 autocast b8 → boxes"),
        "bound_decode": (lambda: stages(pre_gpu(224), gdev, 1, resnet_h, half),
                         lambda: decoded(threads=1), "decode-bound: 1-thread decode → GPU preprocess → ResNet-50 FP16"),
        "bound_preprocess": (lambda: [Stage("preprocess", pre_cpu, workers=1)]
                             + stages(pre_cpu, "cpu", 1, resnet_h, half)[1:],
                             memory_source, "preprocess-bound: pre-decoded → CPU antialiased resize (1 worker) → ResNet-50 FP16"),
        "bound_infer": (lambda: stages(pre_gpu(224), gdev, 2, resnet, torch.float32),
                        small_source, "inference-bound: pre-decoded 256x256 → GPU preprocess (2 workers) → ResNet-50 FP32 b16"),
        "bound_infer_fp16": (lambda: stages(pre_gpu(224), gdev, 2, resnet_h, half),
                             small_source, "the inference-bound pipeline in FP16"),
    }
    expected = {"bound_decode": "decode", "bound_preprocess": "preprocess", "bound_infer": "infer"}
    results = []
    runs = {}
    limit = {"bound_preprocess": 160 if not smoke else 24}  # ~100 fps: keep it short
    for name, (mk, src, desc) in configs.items():
        t_cfg = time.time()
        run = Pipeline(mk(), queue_size=32, name=name).run(src(), frames=limit.get(name))
        runs[name] = run
        thr = run.throughput()
        bn = run.bottleneck()
        row = {"config": name, "process": args.process, "description": desc,
               "fps": thr["fps"], "p50_ms": thr["p50_ms"], "p99_ms": thr["p99_ms"],
               "frames_done": thr["frames_done"], "bottleneck": bn.stage,
               "expected_bottleneck": expected.get(name)}
        st = run.stages()
        for s in st.index:
            row[f"{s}_mean_ms"] = float(st.loc[s, "mean_ms"])
            row[f"{s}_util"] = float(st.loc[s, "utilisation"])
        results.append(row)
        log(f"{name}: {thr['fps']:.1f} fps, p99 {thr['p99_ms']:.1f} ms, {bn.verdict} "
            f"({time.time() - t_cfg:.1f}s)")
        if args.process == 0:
            run.meta["recorded_on"] = {"gpu": info["gpu"], "driver": info["driver"],
                                       "date": info["date"]}
            run.meta["description"] = desc
            run.meta["decode"] = decode_note
            run.meta["machine"] = info
            run.save(out / f"{name}.hmpipe")

    # what-if validated: FP32 infer-bound run, predicted with the measured infer speed-up
    b32, b16 = runs["bound_infer"], runs["bound_infer_fp16"]
    k = (b32.stages().loc["infer", "mean_ms"] / b16.stages().loc["infer", "mean_ms"])
    wi = b32.what_if("infer", float(k))
    pred = float(wi.iloc[-1]["fps"] / wi.iloc[1]["fps"] * b32.throughput()["fps"])
    meas = b16.throughput()["fps"]
    results.append({"config": "what_if_check", "process": args.process,
                    "description": f"bound_infer what_if('infer', {k:.2f}) vs bound_infer_fp16",
                    "k": float(k), "predicted_fps": pred, "predicted_fps_direct":
                    float(wi.iloc[-1]["fps"]), "measured_fps": meas,
                    "error": pred / meas - 1})
    log(f"what-if: infer ×{k:.2f} predicted {pred:.1f} fps, measured {meas:.1f} fps "
        f"({pred / meas - 1:+.1%})")

    # NVDEC (hookmagic.pipeline.nvdec_video: PyNvVideoCodec, else torchcodec), where installed
    try:
        from hookmagic.pipeline import nvdec_video
        src = None if smoke or not info["av"] else nvdec_video(clip, name="nvdec")
    except Exception as err:  # noqa: BLE001 - recorded, not fatal
        src, why = None, f"{type(err).__name__}: {err}"
    else:
        why = "CPU smoke run or no clip (PyAV encodes it)" if src is None else ""
    if src is not None:
        def pre_nv(f):
            x = torch.nn.functional.interpolate(f.permute(2, 0, 1).float()[None],
                                                size=(224, 224), mode="bilinear")[0]
            return ((x - mean) / std).to(half)
        try:
            run = Pipeline(stages(pre_nv, gdev, 1, resnet_h, half), queue_size=32,
                           name="nvdec_resnet50_fp16").run(src)
        except Exception as err:  # noqa: BLE001 - recorded; the rest of the benchmark goes on
            src, why = None, f"run failed: {type(err).__name__}: {err}"
    if src is not None:
        thr = run.throughput()
        results.append({"config": "nvdec_resnet50_fp16", "process": args.process,
                        "fps": thr["fps"], "p99_ms": thr["p99_ms"],
                        "bottleneck": run.bottleneck().stage})
        if args.process == 0:
            run.meta.update(recorded_on={"gpu": info["gpu"], "driver": info["driver"],
                                         "date": info["date"]},
                            description=f"NVDEC ({src.meta['decoder']}) → GPU preprocess → "
                                        "ResNet-50 FP16",
                            machine=info, decode=src.meta["decoder"])
            run.save(out / "nvdec_resnet50_fp16.hmpipe")
        log(f"nvdec: {thr['fps']:.1f} fps")
    else:
        results.append({"config": "nvdec_resnet50_fp16", "process": args.process,
                        "unavailable": why})
        log(f"nvdec: unavailable ({why})")

    # instrumentation on vs off (infer-bound FP16): both pipelines warmed up, then ABBA order
    # (on, off, off, on, on, off) over the same frames; the summary takes, per process, the
    # median over pairs of fps_on / fps_off - 1 (lab/pipeline/pipeline_instrument.py does more)
    inst_pipes = {inst: Pipeline(configs["bound_infer_fp16"][0](), queue_size=32,
                                 instrument=inst) for inst in (True, False)}
    for inst in (True, False):
        inst_pipes[inst].run(small_source())
    for rep in range(3):
        for inst in ((True, False) if rep % 2 == 0 else (False, True)):
            run = inst_pipes[inst].run(small_source())
            results.append({"config": "instrument_on" if inst else "instrument_off",
                            "process": args.process, "rep": rep,
                            "fps": run.throughput()["fps"]})
    on = [r["fps"] for r in results if r["config"] == "instrument_on"]
    off = [r["fps"] for r in results if r["config"] == "instrument_off"]
    log(f"instrumentation: on {np.median(on):.1f} fps, off {np.median(off):.1f} fps")

    # standalone throughput of each stage of resnet50_fp16_gpupre
    def sync():
        if not smoke:
            torch.cuda.synchronize()
    t = time.perf_counter()
    cnt = sum(1 for _ in decoded().streams[0].open())
    alone = {"decode": cnt / (time.perf_counter() - t)}
    pg = pre_gpu(224)
    t = time.perf_counter()
    xs = [pg(f) for f in frames_np]
    sync()
    alone["preprocess"] = len(frames_np) / (time.perf_counter() - t)
    inf = infer(resnet_h, half)
    t = time.perf_counter()
    outs = [inf(xs[i:i + 16]) for i in range(0, len(xs) - 15, 16)]
    sync()
    alone["infer"] = 16 * len(outs) / (time.perf_counter() - t)
    rows = [o[j] for o in outs for j in range(len(o))]
    t = time.perf_counter()
    for r_ in rows:
        post(r_)
    alone["postprocess"] = len(rows) / (time.perf_counter() - t)
    slowest = min(alone, key=alone.get)
    pipe_fps = next(r["fps"] for r in results if r["config"] == "resnet50_fp16_gpupre")
    results.append({"config": "standalone", "process": args.process,
                    **{f"{k_}_fps": v for k_, v in alone.items()}, "slowest": slowest,
                    "pipeline_fps": pipe_fps, "ratio": pipe_fps / alone[slowest]})
    log(f"standalone fps {({k_: round(v, 1) for k_, v in alone.items()})}; pipeline "
        f"{pipe_fps:.1f} = {pipe_fps / alone[slowest]:.0%} of {slowest}")

    # adaptive batch size on the GPU: a model that runs out of memory at a known batch size
    if args.process == 0 and not smoke:
        try:
            results.append(adaptive_demo(torch, out, info, small_source, pre_gpu(224), resnet_h,
                                         half, dev, gdev))
        except Exception as err:  # noqa: BLE001 - reported, the rest stands
            results.append({"config": "adaptive_oom", "error": f"{type(err).__name__}: {err}"})
            log(f"adaptive demo failed: {type(err).__name__}: {err}")

    (out / f"results_p{args.process}.json").write_text(json.dumps(
        {"machine": info, "decode": decode_note, "results": results}, indent=1, default=float))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
