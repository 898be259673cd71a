"""Do the pipeline model's predictions hold on a real GPU pipeline? NVDEC decode → GPU
preprocess → ResNet-50 FP16 → top-5, with the inference made heavier or lighter for real.

    python lab/pipeline/pipeline_predict.py --clip CLIP.mp4 --out DIR [--processes 3] [--loops 4]
        [--infer graph|eager] [--collect-only | --analyse-only]

The runs are saved (``DIR/runs_<infer>/p<i>/*.hmpipe``) and modelled afterwards (``analyse``):
``--collect-only`` on the GPU machine, ``--analyse-only`` wherever the folder is copied, which
costs no GPU time and can be repeated as the model changes.

GPU machine with torch, torchvision and PyNvVideoCodec (no PyAV needed: the clip is made
beforehand, e.g. by ``lab/pipeline/pipeline_color.py make``). In each fresh process, for each
``repeats`` r (the infer stage runs the same ResNet-50, channels-last FP16, batch 16, random
weights, r times per batch). ``--infer eager`` (r = 4, 2, 1) calls the model from Python: about
160 kernel launches per pass, so the stage holds the GIL much of its time and competes with the
decode thread for it. ``--infer graph`` (r = 16, 8, 4) replays one CUDA graph of the model
captured at batch 16 (a partial batch is padded: it costs what a full one does), as deployed
engines do, so the stage mostly waits for the GPU. One pipeline per r is built and run twice over
the clip looped ``--loops`` times: a *cold* run (the process's first run of that pipeline: lazy
initialisation, cuDNN's first batches of each size) and a *warm* run (the pipeline keeps its
worker threads). Checks, per process:

- **as measured**: ``what_if(...)``'s "model: as measured" fps against the run it models, for
  every cold and warm run (target within 5 %); the warm-up executions ``run.warmup()`` found;
- **what-if**: for each pair (heavier r_h, lighter r_l), ``what_if("infer", k)`` on the heavier
  warm run, with k the ratio of the two infer functions' own times at a full batch (median of 10
  calls each, timed alone before the runs), against the lighter warm run's measured fps (target
  within 10 %); the prediction with the nominal k = r_h / r_l is recorded too (the stage's host
  overhead does not scale with r, so the nominal factor overstates the speed-up).

Both the default model and ``gil=True`` are reported. Writes
``DIR/pipeline_predict_<infer>.json`` (every run's figures) and ``DIR/pipeline_predict_<infer>.md``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

#: how many times the infer stage runs the model per batch, per --infer mode (heaviest first)
REPEATS = {"eager": (4, 2, 1), "graph": (16, 8, 4)}
BATCH = 16


def _pairs(repeats: tuple[int, ...]) -> list[tuple[int, int]]:
    a, b, c = repeats
    return [(a, b), (b, c), (a, c)]


def _looped(clip: Path, loops: int, smoke: bool = False):
    """The NVDEC source of ``clip`` read ``loops`` times in a row, as one stream (``smoke``:
    PyAV's CPU decode instead, to check the script without a GPU)."""
    from hookmagic.pipeline import nvdec_video, video_file
    from hookmagic.pipeline.sources import Source, Stream

    src = video_file(clip) if smoke else nvdec_video(clip)
    one = src.streams[0]

    def open_():
        for _ in range(loops):
            yield from one.open()
    return Source([Stream(one.name, open_, None, f"{one.description} ×{loops}")], src.stage,
                  f"{src.description}, ×{loops}", meta=src.meta)


def worker(clip: Path, loops: int, smoke: bool = False, mode: str = "graph",
           save: Path | None = None) -> dict:
    import torch

    from hookmagic.pipeline import Pipeline, Stage
    from hookmagic.pipeline.analysis import batches as batches_of, warmup_flags

    dev, side, half = ("cpu", 32, torch.float32) if smoke else ("cuda", 224, torch.float16)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(3, 1, 1) * 255
    if smoke:  # a tiny stand-in model: checks the script, its numbers mean nothing
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1),
                                    torch.nn.Flatten(), torch.nn.Linear(8, 1000)).eval()
    else:
        import torchvision
        model = torchvision.models.resnet50(weights=None).eval().to(dev).half()
        model = model.to(memory_format=torch.channels_last)

    def pre(frame):  # H×W×3 uint8 on the GPU (NVDEC) → 3×224×224 FP16
        x = torch.as_tensor(frame, device=dev).permute(2, 0, 1).float()[None]
        x = torch.nn.functional.interpolate(x, size=(side, side), mode="bilinear",
                                            antialias=False, align_corners=False)[0]
        return ((x - mean) / std).to(half)

    def infer_r(r):
        def infer(batch):
            with torch.inference_mode():
                x = torch.stack(batch).contiguous(memory_format=torch.channels_last)
                for _ in range(r - 1):
                    model(x)
                return model(x)
        return infer

    if mode == "graph" and not smoke:
        static_x = torch.zeros((BATCH, 3, side, side), dtype=half, device=dev).contiguous(
            memory_format=torch.channels_last)
        side_stream = torch.cuda.Stream()
        side_stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side_stream):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side_stream)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            static_y = model(static_x)

        def infer_r(r):  # noqa: F811 - the graph form of the same stage
            def infer(batch):
                n = len(batch)
                with torch.inference_mode():
                    static_x[:n].copy_(torch.stack(batch))
                    for _ in range(r):
                        graph.replay()
                    return static_y[:n].clone()
            return infer

    def post(logits):
        return torch.softmax(logits.float(), -1).topk(5).indices.cpu().numpy()

    out: dict = {"runs": [], "standalone_ms": {}}
    runs = {}
    # the infer stage's own time at a full batch, outside any pipeline: what "k× faster" means
    x = [pre(np.zeros((720, 1280, 3), np.uint8) if smoke else
             torch.zeros((720, 1280, 3), dtype=torch.uint8, device=dev))] * BATCH
    repeats = REPEATS[mode]
    out["infer"] = mode
    for r in repeats:
        fn = infer_r(r)
        times = []
        for i in range(13):
            t = time.perf_counter()
            fn(x)
            if not smoke:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        out["standalone_ms"][r] = float(np.median(times[3:]) * 1e3)
    for r in repeats:
        pipe = Pipeline([Stage("preprocess", pre, device=dev),
                         Stage("infer", infer_r(r), batch=BATCH, device=dev),
                         Stage("postprocess", post, device=dev)], queue_size=32,
                        name=f"nvdec_resnet50_{mode}_x{r}")
        for phase in ("cold", "warm"):
            t = time.perf_counter()
            run = pipe.run(_looped(clip, loops, smoke))
            wall = time.perf_counter() - t
            meas = run.throughput()
            name = f"{mode}_x{r}_{phase}"
            if save is not None:
                run.save(save / name)
            row = {"repeats": r, "phase": phase, "wall_s": wall, "run": name,
                   "frames_done": int(meas["frames_done"]), "fps": float(meas["fps"])}
            out["runs"].append(row)
            runs[(r, phase)] = run
            print(json.dumps(row), file=sys.stderr, flush=True)
        pipe.close()
    out["source"] = runs[(repeats[-1], "warm")].meta.get("source")
    return out


def analyse(rows: list[dict], folder: Path, loops: int) -> None:
    """The model's figures for every run the workers saved (``folder/p<i>/<run>.hmpipe``),
    computed here, after the GPU runs: "as measured" with and without the GIL modelled, and
    each what-if pair. Adds them to ``rows`` in place."""
    import hookmagic
    from hookmagic.pipeline.analysis import batches as batches_of, warmup_flags
    from hookmagic.pipeline.model import what_if

    for i, proc in enumerate(rows):
        runs = {}
        for row in proc["runs"]:
            run = hookmagic.load(folder / f"p{i}" / f"{row['run']}.hmpipe")
            runs[(row["repeats"], row["phase"])] = run
            for opts, key in (({"gil": True}, ""), ({}, "_nogil")):
                table = what_if(run, "infer", 1.0, **opts)
                row["model_fps" + key] = float(table.loc["model: as measured", "fps"])
                row["model_err" + key] = row["model_fps" + key] / row["fps"] - 1
            row.update(_decoder(run, loops))
            b = batches_of(run, "infer")
            warm = warmup_flags(b, 1)
            dur = (b["end_ns"] - b["start_ns"]).to_numpy() / 1e6
            full = (b["size"].to_numpy() == BATCH) & ~warm
            w = run.warmup()
            row.update(
                p50_ms=float(run.throughput()["p50_ms"]), bottleneck=run.bottleneck().stage,
                infer_full_ms=float(np.median(dur[full])) if full.any() else float("nan"),
                infer_sizes={int(k): int(v) for k, v in
                             b["size"].value_counts().sort_index().items()},
                cpu_share={s: float(_cpu_share(run, s)) for s in run.stage_names},
                stages=run.stage_names,
                warmups=[{"stage": x.stage, "size": int(x.size), "ms": float(x.ms),
                          "steady_p50_ms": float(x.steady_p50_ms)} for x in w.itertuples()])
        whatif = []
        for rh, rl in _pairs(REPEATS[proc["infer"]]):
            heavy = runs[(rh, "warm")]
            tl = next(x for x in proc["runs"] if x["repeats"] == rl and x["phase"] == "warm")
            th = next(x for x in proc["runs"] if x["repeats"] == rh and x["phase"] == "warm")
            k = proc["standalone_ms"][str(rh)] / proc["standalone_ms"][str(rl)]
            w = {"heavy": rh, "light": rl, "k_measured": k, "light_fps": tl["fps"],
                 "k_in_runs": th["infer_full_ms"] / tl["infer_full_ms"], "nominal_k": rh / rl}
            for opts, key in (({"gil": True}, ""), ({}, "_nogil")):
                pred = float(what_if(heavy, "infer", k, **opts).iloc[-1]["fps"])
                nominal = float(what_if(heavy, "infer", rh / rl, **opts).iloc[-1]["fps"])
                w.update({"predicted_fps" + key: pred, "err" + key: pred / tl["fps"] - 1,
                          "nominal_fps" + key: nominal,
                          "nominal_err" + key: nominal / tl["fps"] - 1})
            # not a prediction: the default model told the lighter run's decoder time (its
            # steady frames and its stalls, over the heavier run's): how much of the miss that is
            d = th["decode_total_s"] / tl["decode_total_s"]
            pred = float(what_if(heavy, {"infer": k, "decode": d}).iloc[-1]["fps"])
            w.update({"decode_ratio": d, "predicted_fps_decode_told": pred,
                      "err_decode_told": pred / tl["fps"] - 1})
            whatif.append(w)
        proc["whatif"] = whatif


def _decoder(run, loops: int) -> dict:
    """The decoder's time in ``run``: per pass over the clip (each pass opens its own decoder
    session), the median steady frame time and thread CPU time (ms); the stalls (executions
    the model takes as outliers, mostly the openings) in seconds; and its total time (s)."""
    from hookmagic.pipeline.analysis import batches as batches_of
    from hookmagic.pipeline.model import _outliers

    d = batches_of(run, run.stage_names[0]).sort_values("start_ns", kind="stable")
    out, _ = _outliers(d)
    dur = (d["end_ns"] - d["start_ns"]).to_numpy() / 1e6
    cpu = d["cpu_ns"].to_numpy() / 1e6
    edges = np.linspace(0, len(d), loops + 1).astype(int)  # the passes: equal frame counts
    per = [(float(np.median(dur[a:b][~out[a:b]])), float(np.median(cpu[a:b][~out[a:b]])))
           for a, b in zip(edges[:-1], edges[1:]) if (~out[a:b]).any()]
    return {"decode_pass_ms": [x for x, _ in per], "decode_pass_cpu_ms": [y for _, y in per],
            "decode_stall_s": float(dur[out].sum() / 1e3),
            "decode_total_s": float(dur.sum() / 1e3)}


def _cpu_share(run, stage: str) -> float:
    """The stage's thread CPU time over its execution time (its GIL-held share, as measured)."""
    ev = run.events[run.events["stage"] == stage]
    g = ev.groupby(["worker", "start_ns"]).agg(end=("end_ns", "first"), cpu=("cpu_ns", "first"))
    dur = (g["end"] - g.index.get_level_values("start_ns")).sum()
    return float(g["cpu"].sum() / dur) if dur > 0 else float("nan")


def machine() -> dict:
    import platform
    info = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": platform.python_version()}
    try:
        import torch
        import torchvision
        info.update(torch=torch.__version__, torchvision=torchvision.__version__,
                    gpu=torch.cuda.get_device_name(0))
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        info["driver"] = (out.stdout.strip().splitlines() or ["unknown"])[0]
        import PyNvVideoCodec
        info["pynvvideocodec"] = getattr(PyNvVideoCodec, "__version__", "?")
    except (ImportError, OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        info["error"] = str(err)
    return info


def report(rows: list[dict], info: dict, args: argparse.Namespace) -> str:
    def mm(vals, fmt="{:.0f}"):
        vals = [v for v in vals if v == v]
        if not vals:
            return "–"
        a, b = fmt.format(min(vals)), fmt.format(max(vals))
        return a if a == b else f"{a} – {b}"

    lines = [f"# Pipeline model against real NVDEC pipelines, {info.get('gpu')} "
             f"(driver {info.get('driver')}), {info['date']}", "",
             f"torch {info.get('torch')}, torchvision {info.get('torchvision')}, PyNvVideoCodec "
             f"{info.get('pynvvideocodec')}, Python {info['python']}. {len(rows)} fresh "
             f"processes; ranges are min–max over them. Source: {rows[0].get('source')}. "
             f"Re-run: `python lab/pipeline/pipeline_predict.py --clip {Path(args.clip).name} "
             f"--processes {args.processes} --loops {args.loops} --infer {args.infer}` (clip from "
             "`lab/pipeline/pipeline_color.py make`).", "",
             f"Infer stage: {rows[0]['infer']} (see the script's docstring).", "",
             "## Model as measured (target: within 5 %)", "",
             "| infer repeats | run | fps measured | fps model | model error | error without "
             "the GIL | infer batch ms (steady, 16) | CPU share of decode / preprocess / infer "
             "| batch sizes run | warm-ups found (stage size: ms) | bottleneck |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    repeats = REPEATS[rows[0]["infer"]]
    for r in repeats:
        for phase in ("cold", "warm"):
            rs = [x for p in rows for x in p["runs"] if x["repeats"] == r and x["phase"] == phase]
            sizes = sorted({s for x in rs for s in x["infer_sizes"]})
            warm = "; ".join(sorted({f"{w['stage']} {w['size']}: {w['ms']:.0f}" for x in rs
                                     for w in x["warmups"]})) or "none"
            lines.append(f"| {r} | {phase} | {mm([x['fps'] for x in rs])} | "
                         f"{mm([x['model_fps'] for x in rs])} | "
                         f"{mm([100 * x['model_err'] for x in rs], '{:+.1f}')} % | "
                         f"{mm([100 * x['model_err_nogil'] for x in rs], '{:+.1f}')} % | "
                         f"{mm([x['infer_full_ms'] for x in rs], '{:.2f}')} | "
                         + " / ".join(mm([x["cpu_share"].get(s_, float("nan")) for x in rs],
                                         "{:.2f}") for s_ in (rs[0]["stages"][0] if rs else "decode", "preprocess", "infer"))
                         + f" | {', '.join(map(str, sizes))} | {warm} | "
                         f"{', '.join(str(x['bottleneck']) for x in rs)} |")
    lines += ["", "## What-if against a pipeline really made lighter (target: within 10 %)", "",
              "| heavier → lighter (repeats) | k measured | predicted fps | measured fps "
              "(lighter) | error | error without the GIL | with nominal k "
              "| error (nominal k) | error, decoder time told (not a prediction) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for rh, rl in _pairs(repeats):
        ws = [w for p in rows for w in p["whatif"] if (w["heavy"], w["light"]) == (rh, rl)]
        lines.append(f"| {rh} → {rl} | {mm([w['k_measured'] for w in ws], '{:.2f}')} | "
                     f"{mm([w['predicted_fps'] for w in ws])} | {mm([w['light_fps'] for w in ws])}"
                     f" | {mm([100 * w['err'] for w in ws], '{:+.1f}')} % | "
                     f"{mm([100 * w['err_nogil'] for w in ws], '{:+.1f}')} % | "
                     f"{mm([w['nominal_fps'] for w in ws])} (k = {rh / rl:g}) | "
                     f"{mm([100 * w['nominal_err'] for w in ws], '{:+.1f}')} % | "
                     f"{mm([100 * w['err_decode_told'] for w in ws], '{:+.1f}')} % |")
    lines += ["", "## The decoder, per pass over the clip (each pass opens a decoder session)", "",
              "| process | run | steady frame ms per pass (CPU ms) | stalls s | decoder total s "
              "| fps |", "|---|---|---|---|---|---|"]
    for i, p in enumerate(rows):
        for x in p["runs"]:
            lines.append(f"| p{i} | x{x['repeats']} {x['phase']} | "
                         + ", ".join(f"{a:.2f} ({b:.2f})" for a, b in
                                     zip(x["decode_pass_ms"], x["decode_pass_cpu_ms"]))
                         + f" | {x['decode_stall_s']:.2f} | {x['decode_total_s']:.2f} | "
                         f"{x['fps']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clip", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--save", help="(worker) the folder its runs are saved in")
    ap.add_argument("--infer", choices=sorted(REPEATS), default="graph")
    ap.add_argument("--collect-only", action="store_true",
                    help="run and save the pipelines; model them later with --analyse-only")
    ap.add_argument("--analyse-only", action="store_true",
                    help="model the runs a --collect-only call saved in --out")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU decode and a tiny CPU model: checks the script, numbers mean nothing")
    args = ap.parse_args()
    if args.worker:
        save = Path(args.save)
        save.mkdir(parents=True, exist_ok=True)
        print(json.dumps(worker(Path(args.clip), args.loops, args.smoke, args.infer, save)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    js = out / f"pipeline_predict_{args.infer}.json"
    if not args.analyse_only:
        info, rows = machine(), []
        for p in range(args.processes):
            save = out / f"runs_{args.infer}" / f"p{p}"
            res = subprocess.run([sys.executable, __file__, "--worker", "--clip", args.clip,
                                  "--out", args.out, "--loops", str(args.loops), "--save",
                                  str(save), "--infer", args.infer,
                                  *(["--smoke"] if args.smoke else [])],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stdout[-2000:], res.stderr[-6000:], sep="\n", file=sys.stderr)
                raise SystemExit(f"process {p} failed (rc {res.returncode})")
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
            # written after every process: a run cut short keeps what it measured
            js.write_text(json.dumps({"machine": info, "args": vars(args), "processes": rows},
                                     indent=1))
            print(f"[predict {time.strftime('%H:%M:%S')}] process {p}: "
                  + "; ".join(f"x{r['repeats']} {r['phase']} {r['fps']:.0f} fps"
                              for r in rows[-1]["runs"]), flush=True)
        if args.collect_only:
            return 0
    data = json.loads(js.read_text())
    rows, info = data["processes"], data["machine"]
    analyse(rows, out / f"runs_{args.infer}", int((data.get("args") or {}).get("loops") or args.loops))
    js.write_text(json.dumps({"machine": info, "args": data.get("args"), "processes": rows},
                             indent=1))
    text = report(rows, info, args)
    (out / f"pipeline_predict_{args.infer}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
