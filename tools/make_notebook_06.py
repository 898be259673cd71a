"""Write notebooks/06_pipeline.ipynb (frame pipelines) and execute it, so that its saved outputs are
those of this machine's live CPU run (part 1) and of the recordings made on a GPU machine
(part 2, notebooks/recordings/pipeline/, made by ``bash benchmarks/gpu/pipeline.sh``):

    python tools/make_notebook_06.py

Part 2 replays only what the recordings hold: every number in it is read or computed from the
``.hmpipe`` runs, the benchmark's ``results_p*.json`` and its ``pipeline.md`` table, each labelled
with the GPU, driver and date the recording names.
"""
from __future__ import annotations

from pathlib import Path

from notebook_writer import write_notebook

ROOT = Path(__file__).resolve().parent.parent
NB = ROOT / "notebooks" / "06_pipeline.ipynb"

# Part 1: live, on this machine's CPU (timings are this machine's; only deterministic cells are
# marked NBVAL_CHECK_OUTPUT)
PART1 = [
    ("md", r"""# 06 · Frame pipelines: per-frame stage times, the bottleneck, what-if, metrics

`hookmagic.pipeline` runs a video or camera pipeline — decode → preprocess → infer → postprocess —
on worker threads joined by bounded queues, and records every frame at every stage: when it was
queued, when each stage started and ended (and, for GPU stages, the CUDA-event times), its batch,
and how it ended. From that record it names the **bottleneck** with its evidence, predicts what a
**faster stage** would give with a queueing model of the measured service times, exports
**Prometheus** metrics, CSV and Perfetto traces, and hands its service times to the scheduler.

Part 1 runs live on this machine's CPU: a real H.264 clip (encoded here with PyAV from generated
pictures — synthetic content, real codec) through a small convolutional network written in plain
PyTorch, with random weights.
Its timings are this machine's, today. Part 2 replays pipelines **recorded on a GPU machine**
(labelled with GPU, driver and date)."""),
    ("code", r"""import os, tempfile, time
import numpy as np
import pandas as pd
import torch
from hookmagic.pipeline import (Pipeline, Stage, video_file, write_synthetic_video, load_run,
                                sweep, cameras_that_fit)
from hookmagic.pipeline.views import queues_figure, sweep_figure
pd.set_option("display.width", 160); pd.set_option("display.max_columns", 30)
torch.set_num_threads(1)   # one core per stage worker: the stages run in parallel threads
tmp = tempfile.mkdtemp(prefix="hookmagic06_")"""),
    ("md", r"""## Part 1 — live, on this machine's CPU

A synthetic 640×360 H.264 clip, 90 frames, encoded with PyAV (FFmpeg inside the wheel)."""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
clip = write_synthetic_video(os.path.join(tmp, "synthetic_clip.mp4"), frames=90, width=640, height=360)
src = video_file(clip)
print(src.description.split(", PyAV")[0])"""),
    ("md", r"""The stages. Preprocessing resizes each frame to 224×224 (bilinear, antialiased) and normalises it
with ImageNet's mean and standard deviation; the model is a small MobileNet-style network (a
strided stem, four depthwise-separable blocks, global pooling, 1000 classes) in plain PyTorch with
random weights (nothing is downloaded; the timings do not depend on the weights), batched by 8;
postprocessing takes the top-5 classes of each frame."""),
    ("code", r"""nn = torch.nn

def separable(c_in, c_out, stride):
    # depthwise 3x3 then pointwise 1x1, each with batch norm and ReLU (MobileNet's block)
    return nn.Sequential(nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), nn.BatchNorm2d(c_in), nn.ReLU(),
                         nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                      separable(16, 32, 2), separable(32, 64, 2), separable(64, 128, 2), separable(128, 256, 2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000)).eval()
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

def prep(frame):
    # H x W x 3 uint8 -> 3 x 224 x 224 float32 in 0..1, then ImageNet's normalisation
    x = torch.from_numpy(frame).permute(2, 0, 1).unsqueeze(0).float() / 255
    x = nn.functional.interpolate(x, size=(224, 224), mode="bilinear", antialias=True, align_corners=False)
    return (x[0] - MEAN) / STD

def infer(batch):
    with torch.inference_mode():
        return model(torch.stack(batch))

def top5(logits):
    return torch.topk(logits.softmax(-1), 5).indices.numpy()

def build(batch=8, pre_workers=1):
    return Pipeline([Stage("preprocess", prep, workers=pre_workers),
                     Stage("infer", infer, batch=batch),
                     Stage("postprocess", top5)], queue_size=8, name="cpu_cnn")

infer([prep(np.zeros((360, 640, 3), np.uint8))] * 8)   # warm-up outside the measurement
pipe = build()
pipe"""),
    ("code", r"""run = pipe.run(video_file(clip))
print(run)
print({k: round(v, 1) for k, v in run.throughput().items()})"""),
    ("md", r"""### Per stage

Latency of each stage execution (p50/p90/p99, a batch for `infer`), frames per second, busy
fraction per worker (**utilisation**), the rate it could sustain if always busy (**capacity**),
queue wait, the fraction of time it was **blocked** handing frames to a full queue, and its input
queue's mean depth and fractions of the run full / empty."""),
    ("code", r"""cols = ["workers", "batch", "frames", "p50_ms", "p99_ms", "fps", "utilisation", "capacity_fps",
        "wait_p50_ms", "blocked", "queue_mean", "queue_full", "queue_empty"]
run.stages()[cols].round(3)"""),
    ("code", r"""bn = run.bottleneck()
print(bn)"""),
    ("md", r"""### What if a stage were faster?

`what_if(stage, k)` replays the run through a discrete-event model: the same stages, workers,
batch sizes and bounded queues, each stage execution drawing one of that stage's *measured*
durations, the chosen stage's divided by `k`. The row *model: as measured* shows how close the
model is to the run before anything changes."""),
    ("code", r"""target = bn.stage or "infer"
run.what_if(target, 2.0).round(2)"""),
    ("md", r"""### Per-frame Gantt (queue waits faint), stage bars, queue depth"""),
    ("code", r"""run.gantt(frames=30)"""),
    ("code", r"""run.stage_chart()"""),
    ("code", r"""queues_figure(run)"""),
    ("md", r"""### Per frame, per batch, and files for other tools

`run.frames` has one row per frame; `run.per_batch()` the columns classic frame profilers write;
`to_csv`, `to_chrome_trace` (Perfetto: a track per stage worker, each frame a flow) and `save`
(Parquet tables in one file) write them."""),
    ("code", r"""run.frames.head(3).round(3)"""),
    ("code", r"""print(run.per_batch().head(4).round(2).to_string(index=False))
run.to_csv(os.path.join(tmp, "per_batch.csv"))
run.to_chrome_trace(os.path.join(tmp, "run.perfetto.json"))
saved = run.save(os.path.join(tmp, "cpu_cnn"))
print("reloaded:", load_run(saved))"""),
    ("md", r"""### A sweep

Batch size × preprocessing workers, each setting one run over the clip (a progress bar shows
while it runs), then fps against end-to-end p99."""),
    ("code", r"""table = sweep(build, {"batch": [1, 8], "pre_workers": [1, 2]}, source=lambda: video_file(clip))
table[["config", "fps", "p50_ms", "p99_ms", "bottleneck"]].round(1)"""),
    ("code", r"""sweep_figure(table, title="CPU sweep (this machine): fps vs p99")"""),
    ("md", r"""### Metrics for Prometheus

`PipelineExporter` serves histograms of stage durations (seconds, buckets below 5 ms), frame
counters by source and outcome, queue depths and GPU memory (NVML) on a port you pick (here any
free one on 127.0.0.1). A test (`tests/test_pipeline_prometheus.py`) has a real Prometheus
server scrape it during a run and checks its totals equal the run's."""),
    ("code", r"""import urllib.request
from hookmagic.pipeline.metrics import PipelineExporter
with PipelineExporter("cpu_cnn", port=0) as exporter:
    build().run(video_file(clip), frames=24, observers=[exporter])
    text = urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics").read().decode()
print("\n".join(l for l in text.splitlines()
                if l.startswith(("hookmagic_frames_total", "hookmagic_stage_duration_seconds_count"))))"""),
    ("md", r"""### From a run to the scheduler

The model stage's measured times per batch size become a `hookmagic.sched.ModelSpec`; the
simulator then serves N cameras: how many 5 fps cameras fit under a 400 ms p99 on this CPU?"""),
    ("code", r"""fit = cameras_that_fit(run, fps=5, slo_ms=400, max_cameras=30, duration_s=20)
print("cameras that fit:", fit.attrs["fit"])
fit.tail(4).round(1)"""),
]

# Part 2: replay of the GPU recordings (deterministic: every code cell that prints is checked)
PART2 = [
    ("md", r"""## Part 2 — recorded on a GPU machine

Recordings made by `python lab/pipeline/pipeline_gpu.py` on the GPU
machine: a synthetic 1080p H.264 clip (generated pictures, real codec) decoded by PyAV on the CPU,
preprocessing on the GPU or with torchvision transforms v2 on the CPU, ResNet-50 FP16 and an
SSDlite detector on CUDA (random weights: nothing downloaded, timings do not depend on them),
three pipelines built to be decode-, preprocess- and inference-bound, and adaptive batching
driven into out-of-memory. The benchmark ran in fresh processes; process 0's runs were saved as
recordings (`recordings/pipeline/*.hmpipe`), every process's figures in `results_p*.json`, and
the min–max table in `pipeline.md`. Each recording is the same `PipelineRun` a live run returns,
so every analysis of part 1 works on it; its GPU, driver and date are printed with it."""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
import json
from pathlib import Path
import plotly.graph_objects as go
rec_dir = next((p for p in (Path("recordings/pipeline"), Path("notebooks/recordings/pipeline")) if p.is_dir()),
               Path("recordings/pipeline"))
recs = {p.name[:-len(".hmpipe")]: load_run(p) for p in sorted(rec_dir.glob("*.hmpipe"))}
if not recs:
    print("No GPU recordings in this checkout (notebooks/recordings/pipeline is empty).")
for name, r in recs.items():
    t = r.throughput()
    print(f"{name:22s} {t['fps']:7.1f} fps  p99 {t['p99_ms']:8.1f} ms  bottleneck: {r.bottleneck().stage:10s}  {r.label}")
results = [json.loads(p.read_text()) for p in sorted(rec_dir.glob("results_p*.json"))]
if results:
    m = results[0]["machine"]
    print(f"\nmachine: {m['gpu']}, driver {m['driver']}, CUDA {m['cuda']}, torch {m['torch']}, "
          f"torchvision {m['torchvision']}, Python {m['python']}, PyAV {m.get('av')}, {m['date']}; "
          f"{len(results)} fresh processes")
    print("decode:", results[0]["decode"])
    nvdec = [r for d in results for r in d["results"] if r["config"].startswith("nvdec")]
    for r in nvdec[:1]:
        print("NVDEC:", ("not run: " + r["unavailable"]) if "unavailable" in r else "recorded")"""),
    ("md", r"""### Per-frame stage times: decode → GPU preprocess → ResNet-50 FP16 → top-5

Host times of every stage execution (an `infer` execution is a batch of up to 16 frames), and for
the GPU stages the time measured on the GPU between the CUDA events of the worker's stream
(`gpu_p50_ms`). The decode stage is PyAV on 4 threads decoding 1080p H.264."""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
if "resnet50_fp16_gpupre" in recs:
    r = recs["resnet50_fp16_gpupre"]
    print(r.label + " — " + r.meta["description"])
    print(r.stages()[["device", "workers", "batch", "mean_batch", "p50_ms", "p99_ms", "gpu_p50_ms", "utilisation",
                      "capacity_fps", "queue_full", "queue_empty"]].round(3).to_string())
    print(r.bottleneck())"""),
    ("code", r"""if "resnet50_fp16_gpupre" in recs:
    r = recs["resnet50_fp16_gpupre"]
    display(r.frames.head(5).round(2))
    display(r.gantt(frames=40))
    display(r.stage_chart())"""),
    ("md", r"""Two clocks, two weights: `p50_ms` is per *frame* (each frame counts with the time of the batch
it was in), `gpu_p50_ms` per *execution*; for a batched stage they are not comparable. Per
execution, the GPU time between the worker's CUDA events is nearly all of the host time of an
`infer` batch. Those GPU times split in two groups, and what separates them is whether the batch
size had been seen before **in this run**: the batches come in whatever size the queue holds."""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
from hookmagic.pipeline.analysis import batches
rows = []
for name in ("resnet50_fp16_gpupre", "resnet50_fp16_cpupre"):
    if name in recs:
        b = batches(recs[name], "infer")
        host = (b.end_ns - b.start_ns) / 1e6
        first = ~b["size"].duplicated()
        for label, sel in (("first batch of its size", first), ("size seen before", ~first)):
            rows.append({"config": name, "infer executions": label, "n": int(sel.sum()),
                         "sizes": sorted(int(x) for x in b.loc[sel, "size"].unique()),
                         "gpu_ms min": b.gpu_ms[sel].min(), "gpu_ms max": b.gpu_ms[sel].max(),
                         "share of infer GPU time": b.gpu_ms[sel].sum() / b.gpu_ms.sum(),
                         "gpu / host": (b.gpu_ms[sel] / host[sel]).median()})
if rows:
    print(pd.DataFrame(rows).round(3).to_string(index=False))"""),
    ("md", r"""In both recordings every batch whose size appears for the first time in the run took 100–200 ms
on the GPU, and every later batch of a size already seen 7–33 ms — although the benchmark warmed
the model before the run (batch sizes 16, 8, 4 and 1, on the default stream of the main thread),
and standalone the infer stage sustained about 1,800–2,200 fps (`pipeline.md`). So the infer
stage's high utilisation here is mostly one-time cost per new batch size, paid inside the worker
thread. What that cost is (per-thread or per-stream library state, algorithm selection for a new
shape) these recordings cannot say; a warm-up of every batch size on the worker's own thread and
stream, or a fixed batch size, is the experiment that would tell."""),
    ("md", r"""### CPU vs GPU preprocessing, and a detector

The same clip and model with torchvision transforms v2 on two CPU workers in place of GPU
preprocessing, and SSDlite320-MobileNetV3 (FP16 autocast, batch 8) in place of ResNet-50. Mean time
per stage execution and each stage's utilisation, from the recordings (process 0):"""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
rows = []
for name in ("resnet50_fp16_gpupre", "resnet50_fp16_cpupre", "detector_fp16_gpupre"):
    if name in recs:
        r, st = recs[name], recs[name].stages()
        row = {"config": name, "fps": r.throughput()["fps"], "p99_ms": r.throughput()["p99_ms"],
               "bottleneck": r.bottleneck().stage}
        for s in ("decode", "preprocess", "infer"):
            row[f"{s}_ms"] = st.loc[s, "mean_ms"]
            row[f"{s}_util"] = st.loc[s, "utilisation"]
        rows.append(row)
if rows:
    print(pd.DataFrame(rows).set_index("config").round(2).to_string())"""),
    ("md", r"""In both ResNet-50 configurations `bottleneck()` names the CPU decoder; CPU preprocessing costs
several times the GPU's per frame, and on two workers it still keeps up with the decoder. The
detector's inference stage took over a second per batch of 8 in this recording, leaving every
other stage mostly idle (why it is that slow with random weights was not investigated here)."""),
    ("md", r"""### `bottleneck()` on three pipelines built with a known bottleneck

- **decode-bound**: PyAV on one thread decodes 1080p H.264 → GPU preprocessing → ResNet-50 FP16;
- **preprocess-bound**: frames decoded beforehand → an antialiased resize on one CPU worker → ResNet-50 FP16;
- **inference-bound**: frames decoded and resized to 256×256 beforehand → GPU preprocessing on two
  workers → ResNet-50 in FP32, batch 16.

Each verdict comes with its evidence: the stage's busy fraction against the rate the run reached,
its input queue, and the stages around it."""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
expected = {"bound_decode": "decode", "bound_preprocess": "preprocess", "bound_infer": "infer"}
for name, want in expected.items():
    if name in recs:
        bn = recs[name].bottleneck()
        print(f"{name} ({recs[name].meta['description']}): built to be {want!r}, "
              f"bottleneck() says {bn.stage!r} -> {'right' if bn.stage == want else 'WRONG'}")
        print(bn, end="\n\n")
if results:   # every fresh process of the benchmark, not only the recorded one
    per = [(r["config"], r["bottleneck"], r["expected_bottleneck"]) for d in results for r in d["results"]
           if r.get("expected_bottleneck")]
    print(f"over {len(results)} processes: {sum(b == e for _, b, e in per)} of {len(per)} verdicts name the stage "
          "each pipeline was built to be limited by")"""),
    ("code", r"""for name in expected:
    if name in recs:
        display(recs[name].stage_chart())"""),
    ("md", r"""### `what_if()` against a change really made on the GPU

The inference-bound pipeline was run twice: ResNet-50 in FP32 (`bound_infer`) and in FP16
(`bound_infer_fp16`), everything else equal. Taking *k* as the measured ratio of their infer-stage
times, `what_if("infer", k)` on the FP32 run predicts the FP16 run's fps (scaled by the model's own
error on the run as measured, the row *model: as measured*). On this GPU, in this pipeline at batch 16,
**FP16 was not faster**: its infer stage took longer than FP32's (*k* < 1), so the check is
a predicted *slow-down* — still a change of the stage's speed that the model had to carry through
the queues to the end-to-end fps."""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
if "bound_infer" in recs and "bound_infer_fp16" in recs:
    b32, b16 = recs["bound_infer"], recs["bound_infer_fp16"]
    k = b32.stages().loc["infer", "mean_ms"] / b16.stages().loc["infer", "mean_ms"]
    w = b32.what_if("infer", k)
    print(b32.label)
    print(w.round(2).to_string())
    pred = w.iloc[-1]["fps"] / w.iloc[1]["fps"] * b32.throughput()["fps"]
    meas = b16.throughput()["fps"]
    print(f"\nreplayed from the recordings: infer x{k:.3f}: predicted {pred:.1f} fps, measured {meas:.1f} fps "
          f"({pred / meas - 1:+.1%})")
if results:
    wi = pd.DataFrame([r for d in results for r in d["results"] if r["config"] == "what_if_check"])
    wi["error_%"] = 100 * wi["error"]
    print("\nas computed in each fresh process on the GPU machine (lab/pipeline/pipeline_gpu.py):")
    print(wi[["process", "k", "predicted_fps", "measured_fps", "error_%"]].round(3).to_string(index=False))"""),
    ("md", r"""The prediction replayed here, from the saved run, differs slightly from process 0's own, which the
benchmark computed from the run in memory (same *k*, same seed). Other checks the GPU run made, per process (from `results_p*.json`):"""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
for d in results:
    p = d["results"][0]["process"]
    sa = next((r for r in d["results"] if r["config"] == "standalone"), None)
    on = [r["fps"] for r in d["results"] if r["config"] == "instrument_on"]
    off = [r["fps"] for r in d["results"] if r["config"] == "instrument_off"]
    if sa:
        print(f"process {p}: resnet50_fp16_gpupre ran at {100 * sa['ratio']:.0f} % of its slowest stage alone "
              f"({sa['slowest']}: {sa[sa['slowest'] + '_fps']:.1f} fps standalone, pipeline {sa['pipeline_fps']:.1f} fps)")
    if on and off:
        print(f"process {p}: instrumentation (ranges + CUDA events) on vs off, infer-bound FP16, medians of "
              f"{len(on)} alternations: {np.median(on):.0f} vs {np.median(off):.0f} fps "
              f"({100 * (np.median(on) / np.median(off) - 1):+.1f} %)")"""),
    ("md", r"""The target is at most 2 % between instrumentation on and off; these runs measured more
than that, on a pipeline running at ~500 frames per second, where each frame pays the ranges and
events of four stages. That target is not met here."""),
    ("md", r"""### Adaptive batch size under out-of-memory

`AdaptiveBatch` over ResNet-50 FP16 with 1 GiB of workspace per frame, the process's GPU memory
capped so that a batch of 11 runs out of memory. The controller doubles the batch while p99 and
peak memory stay under their limits; on CUDA out-of-memory it splits the failed chunk in two,
retries both halves (no frame lost) and never again reaches the size that failed."""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
if "adaptive_oom" in recs:
    a = recs["adaptive_oom"]
    d = pd.DataFrame(a.meta["adaptive_decisions"])
    print(a.label + " — " + a.meta["description"])
    print("frames:", {k: int(v) for k, v in a.outcomes.items()}, "| out-of-memory splits:", int((d.action == "oom_split").sum()),
          "| settled at batch", int(d.size_to.iloc[-1]))
    print(d[["action", "size_from", "size_to", "reason"]].to_string(index=False))"""),
    ("code", r"""if "adaptive_oom" in recs:
    d = pd.DataFrame(recs["adaptive_oom"].meta["adaptive_decisions"])
    t = d["t_s"] - d["t_s"].iloc[0]
    fig = go.Figure(go.Scatter(x=t, y=d["size_to"], mode="lines+markers", line_shape="hv", name="batch size"))
    oom = d[d.action == "oom_split"]
    fig.add_trace(go.Scatter(x=t[oom.index], y=oom["size_from"], mode="markers", name="out of memory at",
                             marker={"symbol": "x", "size": 11, "color": "#d62728"}))
    fig.update_layout(title=f"Adaptive batch size — {recs['adaptive_oom'].label}", xaxis_title="seconds",
                      yaxis_title="frames per chunk", height=360)
    display(fig)"""),
    ("md", r"""### The benchmark's table: every process, min–max

`pipeline.md` as the benchmark wrote it (also `benchmarks/results/pipeline.md`):"""),
    ("code", r"""# NBVAL_CHECK_OUTPUT
summary = rec_dir / "pipeline.md"
print(summary.read_text() if summary.exists() else "no summary table recorded")"""),
    ("code", r"""import shutil
shutil.rmtree(tmp, ignore_errors=True)   # the synthetic videos and saved runs made above"""),
]

CELLS = PART1 + PART2


def main() -> None:
    write_notebook(CELLS, NB, timeout=600)


if __name__ == "__main__":
    main()
