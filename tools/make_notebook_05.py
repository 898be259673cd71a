"""Write notebooks/05_kernels.ipynb (the kernel lab) and execute it in replay mode so its saved
outputs are those of the bundled recording (notebooks/recordings/kernel_journey.hmtrace):

    python tools/make_notebook_05.py
"""
from __future__ import annotations

from pathlib import Path

from notebook_writer import write_notebook

ROOT = Path(__file__).resolve().parent.parent
NB = ROOT / "notebooks" / "05_kernels.ipynb"

CELLS = [
    ("md", """# 05 · Kernel lab: the GEMM journey through hookmagic's own views

`hookmagic.kernels` ships CUDA kernels compiled at run time with NVRTC. Its GEMMs are built as a
journey — FP32 on CUDA cores from a naive loop to a warp-tiled, double-buffered kernel, then
Tensor Cores with WMMA and with `mma.sync` — and this notebook watches every step with
hookmagic: one capture of all steps and their cuBLAS references (4096³, two launches each, every
step in a `hookmagic.range`), the work each launch declared (FLOPs, DRAM bytes), the registers
and shared memory NVRTC reported, theoretical occupancy, and a roofline.

On a GPU the capture runs **live** (`hookmagic.kernels.lab.capture_journey`); without one, the
notebook **replays a recording** of that same capture made on a GPU
(`recordings/kernel_journey.hmtrace`, made by `python lab/kernels/record_kernels.py`); every
number below comes from it, and its GPU, driver and date are printed first."""),
    ("code", """from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

import hookmagic
import hookmagic.kernels as hk
from hookmagic.analysis.occupancy import kernel_occupancy
from hookmagic.analysis.roofline import kernel_rates, nvrtc_vs_capture, peaks_for, peaks_table, roofline
from hookmagic.views.roofline import roofline_figure

pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)
pd.set_option("display.max_colwidth", 80)


def gpu_here() -> bool:
    try:
        import torch
        hk.build.nvrtc_version()
        return torch.cuda.is_available()
    except Exception:
        return False


def here(path: str) -> Path:
    # a repository file, whether the notebook runs from notebooks/ (Jupyter, nbval) or the repository root
    for base in (Path(".."), Path(".")):
        if (base / path).exists():
            return base / path
    raise FileNotFoundError(path)


LIVE = gpu_here()
if LIVE:
    from hookmagic.kernels.lab import capture_journey
    trace = capture_journey(4096)
else:
    trace = hookmagic.load(here("notebooks/recordings/kernel_journey.hmtrace"))
RECORDED_ON = trace.meta["recorded_on"]
print(("LIVE capture on " if LIVE else "REPLAY of a recording made on ") + RECORDED_ON)
print(trace.meta.get("description", ""))"""),
    ("md", """## Every step in one table

Achieved rates join the captured launches (kernel name, GPU time measured by CUPTI) with the work
each launch declared (`trace.meta["work"]`; `hookmagic.kernels.record()` does the same for your
own kernels). cuBLAS's kernels carry the work of the matmul they ran. `of_cuBLAS` compares with
the cuBLAS kernel of the same precision **in the same capture**. Occupancy is hookmagic's
theoretical-occupancy calculator on the registers, shared memory and block size the capture
recorded for each launch, with the resource that limits it (`limiter`) and the number of waves
the grid needs."""),
    ("code", """rates = kernel_rates(trace)
reference = {"float32": "cuBLAS FP32", "float16": "cuBLAS FP16", "bfloat16": "cuBLAS BF16", "int8": "cuBLAS INT8"}
cublas = {p: rates.loc[rates.step == s, "tflops"].max() for p, s in reference.items()}
is_gemm = ~rates.step.str.contains("softmax|LayerNorm|RMSNorm|GELU")
rates["of_cuBLAS"] = (rates.tflops / rates.precision.map(cublas)).where(is_gemm)
occ = kernel_occupancy(trace)[["name", "occupancy", "limiter", "active_warps", "waves"]].drop_duplicates("name")
journey = rates.merge(occ, on="name", how="left")
journey["mean_ms"] = journey.mean_ns / 1e6
COLUMNS = ["step", "name", "mean_ms", "tflops", "of_cuBLAS", "registers", "smem_per_block",
           "threads_per_block", "occupancy", "limiter", "waves"]
print(f"{len(trace.kernels)} kernels captured, {len(trace.meta['work'])} launches with declared work; "
      f"{RECORDED_ON}")"""),
    ("md", """## The SGEMM journey (FP32, CUDA cores)

Each step removes the bottleneck of the one before: `coalesced` makes neighbouring threads read
neighbouring addresses; `smem_tiled` stages tiles in shared memory; `tile_1d`/`tile_2d` make each
thread compute a column / a small block of outputs from registers (more registers per thread,
lower occupancy — and faster: occupancy is not the goal, data reuse is); `vectorized` loads
128 bits at a time; `warptile` tiles at warp level and double-buffers shared memory."""),
    ("code", """sgemm = journey[journey.precision.eq("float32")][COLUMNS].reset_index(drop=True)
sgemm.round(3)"""),
    ("code", """fig = go.Figure(go.Bar(x=sgemm.step, y=sgemm.tflops, text=[f"{f:.0%}" for f in sgemm.of_cuBLAS],
                       textposition="outside", marker_color=["#7f7f7f" if s.startswith("cuBLAS") else "#1f77b4" for s in sgemm.step]))
fig.update_layout(title=f"SGEMM journey, 4096³: achieved TFLOP/s (label: fraction of cuBLAS) — {RECORDED_ON}",
                  yaxis_title="TFLOP/s", height=420, margin={"t": 60})
fig"""),
    ("md", """## Tensor-Core steps (FP16, BF16 with FP32 accumulate; INT8 with INT32 accumulate)

`wmma` uses the CUDA C++ WMMA fragments; `mma` uses `mma.sync` with `ldmatrix` and a multi-stage
`cp.async` pipeline. The cuBLAS references are whatever cuBLAS picked on this GPU (their kernel
names are in the table: on the H100 Hopper-specific `nvjet_sm90` kernels for FP16/BF16, a CUTLASS
sm80 tensor-op kernel for INT8). hookmagic has no `wgmma` + TMA (sm_90a) GEMM yet; its kernels run
at a quarter or less of the SM's warps, limited by registers. Compare `FP16 wmma` with `BF16 wmma`:
the same tile, two registers more per thread for BF16, and one block of 256 threads per SM fits
instead of two — occupancy halves."""),
    ("code", """tensor = journey[~journey.precision.eq("float32") & is_gemm.values][["precision"] + COLUMNS].reset_index(drop=True)
tensor.round(3)"""),
    ("md", """## The same steps over three fresh processes (the benchmark table)

One capture is one process and two launches per step. `lab/kernels/journey_h100.md` measures
the same kernels at 4096³ on the same H100 in three fresh processes (`python -m benchmarks run
kernels --processes 3 --set sections=gemm`, min–max over the processes). Its times are CUDA events around each Python call,
so they include the host's launch cost, which the capture's kernel times (CUPTI, on the GPU) do
not — for sub-millisecond kernels (the cuBLAS Tensor-Core GEMMs) the benchmark's rates are
therefore lower. The fractions of cuBLAS agree in order and roughly in size."""),
    ("code", """bench_md = here("lab/kernels/journey_h100.md")
lines = bench_md.read_text().splitlines()
print(lines[0].lstrip("# "))
rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if ln.startswith("| 4096 |")]
bench = pd.DataFrame(rows, columns=["shape", "dtype", "kernel", "bench TFLOP/s", "bench of cuBLAS", "bench ms", "correct"])
to_step = {"sgemm": "sgemm {}", "f16": "FP16 {}", "bf16": "BF16 {}", "int8": "INT8 {}"}
cublas_step = {"sgemm": "cuBLAS FP32", "f16": "cuBLAS FP16", "bf16": "cuBLAS BF16", "int8": "cuBLAS INT8"}
bench["step"] = [cublas_step[d] if k == "cuBLAS" else to_step[d].format(k) for d, k in zip(bench.dtype, bench.kernel)]
side = journey[is_gemm.values][["step", "tflops", "of_cuBLAS"]].rename(
    columns={"tflops": "capture TFLOP/s", "of_cuBLAS": "capture of cuBLAS"})
side = side.merge(bench[["step", "bench TFLOP/s", "bench of cuBLAS", "correct"]], on="step", how="left")
side["capture of cuBLAS"] = side["capture of cuBLAS"].map("{:.0%}".format)
side.round(1)"""),
    ("md", """## Roofline

Each kernel at its arithmetic intensity (FLOPs per byte of compulsory DRAM traffic: every operand
read once, the result written once) and its achieved rate, under the datasheet roofs of the GPU it
ran on (the peaks table says which datasheet). A GEMM at 4096³ sits far right of the ridge point:
it is compute-bound, so the distance to its precision's roof is what the journey closes. The
row-wise kernels (softmax, norms, bias+GELU) sit on the bandwidth slope."""),
    ("code", """gpu = trace.meta["devices"][0]["name"] if isinstance(trace.meta.get("devices"), list) else RECORDED_ON
peaks = peaks_for(gpu) or peaks_for(RECORDED_ON)
print(f"peaks of {peaks['gpu']} — source: {peaks['source']}")
display(peaks_table(peaks))
points = roofline(rates, peaks)
display(points[["step", "precision", "intensity", "tflops", "roof_tflops", "of_roof", "bound"]].round(3))
roofline_figure(points, peaks, title=f"GEMM journey, 4096³ ({RECORDED_ON})")"""),
    ("md", """## Bandwidth: the memory-bound kernels

Row-wise kernels do a few operations per byte, so their limit is DRAM bandwidth: the figure of
merit is achieved GB/s of compulsory traffic (read the input and the parameters once, write the
output once). In the journey capture, FP16 4096 × 4096 softmax, LayerNorm, RMSNorm and bias+GELU,
against the datasheet's DRAM peak:"""),
    ("code", """bw = journey[~is_gemm.values][["step", "name", "mean_ms", "gbps", "registers", "smem_per_block",
                                "threads_per_block", "occupancy", "limiter"]].copy()
bw["of_dram_peak"] = bw.gbps * 1e9 / peaks["dram"]
print(f"DRAM peak {peaks['dram'] / 1e12:.2f} TB/s ({peaks['source']}); {RECORDED_ON}")
bw.round(3)"""),
    ("md", """### Against a device-to-device copy and torch eager

A datasheet peak is not reachable; a device-to-device copy of the same bytes is the practical roof.
`hookmagic.kernels.lab.capture_bandwidth` captures, in one capture, `copy_` of the FP16 matrix and
each row-wise op by hookmagic and by torch eager (three calls each, each step a `hookmagic.range`;
both implementations of an op are charged the same compulsory bytes). Rates are per range
(`hookmagic.analysis.roofline.range_rates`): the bytes over the GPU time of every kernel launched
inside it, so a torch op that launches several kernels is charged all of them. Recorded by
`bash benchmarks/gpu/run_all.sh nb:90` (`benchmarks/gpu/nb.sh`) when a recording is not bundled."""),
    ("code", """from hookmagic.analysis.roofline import range_rates


def recording(name: str):
    for base in (Path(".."), Path(".")):
        p = base / "notebooks" / "recordings" / f"{name}.hmtrace"
        if p.exists():
            return hookmagic.load(p)
    return None


if LIVE:
    from hookmagic.kernels.lab import capture_bandwidth
    extra = capture_bandwidth()
    extra["kernel_bandwidth"] = extra.pop("bandwidth")
else:
    extra = {n: t for n in ("kernel_bandwidth", "preprocess_fused", "preprocess_torch") if (t := recording(n)) is not None}
if "kernel_bandwidth" in extra:
    tb = extra["kernel_bandwidth"]
    rr = range_rates(tb)
    copy_gbps = rr.loc[rr.step == "copy FP16", "gbps"].iloc[0]
    rr["of_copy"] = rr.gbps / copy_gbps
    rr["of_dram_peak"] = rr.gbps * 1e9 / peaks["dram"]
    rr["op"] = rr.step.str.replace(" hookmagic| torch", "", regex=True)
    torch_ns = rr[rr.step.str.endswith(" torch")].set_index("op").mean_ns
    rr["speedup_vs_torch"] = rr.op.map(torch_ns) / rr.mean_ns
    rr.loc[~rr.step.str.endswith(" hookmagic"), "speedup_vs_torch"] = float("nan")
    rr["mean_us"] = rr.mean_ns / 1e3
    print(("LIVE capture on " if LIVE else "REPLAY of a recording made on ") + tb.meta["recorded_on"])
    print(tb.meta["description"])
    for note in tb.meta.get("left_out", []):
        print("left out:", note)
    display(rr[["step", "kernels", "copies", "kernel_names", "mean_us", "gbps", "of_copy", "of_dram_peak", "speedup_vs_torch"]].round(3))
else:
    print("No bandwidth recording in this checkout yet (notebooks/recordings/kernel_bandwidth.hmtrace): "
          "it is made on a GPU by `bash benchmarks/gpu/run_all.sh nb:90`.")"""),
    ("code", """if "kernel_bandwidth" in extra:
    colour = ["#7f7f7f" if s.startswith("copy") else "#2ca02c" if s.endswith("hookmagic") else "#ff7f0e" for s in rr.step]
    fig = go.Figure(go.Bar(x=rr.step, y=rr.gbps, marker_color=colour, text=[f"{f:.0%}" for f in rr.of_copy],
                           textposition="outside"))
    fig.add_hline(y=peaks["dram"] / 1e9, line_dash="dot", annotation_text=f"DRAM peak ({peaks['gpu']} datasheet)")
    fig.add_hline(y=copy_gbps, line_dash="dash", annotation_text="copy_ (measured)")
    fig.update_layout(title=f"Achieved GB/s (label: fraction of copy) — {extra['kernel_bandwidth'].meta['recorded_on']}",
                      yaxis_title="GB/s of compulsory traffic", height=440, margin={"t": 60})
    display(fig)"""),
    ("md", """### Fused frame preprocessing against the torch chain

`hookmagic.kernels.preprocess` turns a batch of uint8 RGB frames into resized, normalised FP16
NCHW tensors in one kernel; the torch chain it replaces permutes, casts, resizes, normalises and
casts again, each step a kernel and a round trip through DRAM. Two captures (1080p, batch 8, to
640 × 640), and the differential flame graph from the chain to the fused kernel: blue got faster
or is gone, red is new."""),
    ("code", """if "preprocess_fused" in extra and "preprocess_torch" in extra:
    fused, chain = extra["preprocess_fused"], extra["preprocess_torch"]
    pr = pd.concat([range_rates(chain), range_rates(fused)], ignore_index=True)
    pr["mean_us"] = pr.mean_ns / 1e3
    pr["of_copy"] = pr.gbps / copy_gbps if "kernel_bandwidth" in extra else float("nan")
    print(fused.meta["recorded_on"] + ": " + fused.meta["description"])
    print(f"fused is {pr.mean_ns.iloc[0] / pr.mean_ns.iloc[1]:.1f}x faster than the torch chain on the GPU")
    display(pr[["step", "kernels", "kernel_names", "mean_us", "gbps", "of_copy"]].round(3))
    display(chain.diff(fused))
else:
    print("No preprocessing recordings in this checkout yet (notebooks/recordings/preprocess_fused.hmtrace, "
          "preprocess_torch.hmtrace): `hookmagic.kernels.preprocess` was not recorded on a GPU yet.")"""),
    ("md", """## Why each step is as fast as it is: hardware counters

The same journey captured once more with `hookmagic.capture(counters=True)`, one launch per step
(recorded on the GPU machine: `python lab/kernels/record_kernels.py --counters`; this is always a
replay of that recording). Each kernel was replayed by CUPTI's range profiler to read the default
counter set (`docs/counters.md`). The naive SGEMM keeps every warp slot full yet its SMs are
nearly idle (each thread waits on memory); tiling raises SM throughput; the register-tiled steps
trade occupancy for work per thread; the Tensor Core steps move the busy unit to the tensor pipe;
softmax and the norms lean on DRAM (59–71 % of its peak). `TFLOP/s counted` is the FP32/FP16 FLOPs counted from
executed instructions (tensor operations for FP16) over the replayed duration, where the counters
cover the kernel's math (BF16 and INT8 tensor work is not in the default set)."""),
    ("code", """# NBVAL_CHECK_OUTPUT
counted = hookmagic.load(here("notebooks/recordings/kernel_journey_counters.hmtrace"))
print("REPLAY of a recording made on " + counted.meta["recorded_on"] + f"; {counted.meta['counters']['passes']} "
      f"replay passes per kernel, {counted.meta['counters']['replay_wall_s']:.0f} s of replay for {len(counted.kernels)} kernels")
steps = (counted.kernels[["correlation", "range_id"]]
         .merge(counted.ranges[["range_id", "name"]].rename(columns={"name": "step"}), on="range_id")
         .rename(columns={"correlation": "correlation_id"}))
table = counted.counter_table().merge(steps, on="correlation_id").sort_values("correlation_id")
table = table.assign(us=table.duration_ns / 1e3,
                     tflops_counted=(table.flops / table.duration_ns / 1e3).where(table.flops_complete))
table[["step", "us", "sm_pct", "dram_pct", "occupancy_pct", "tensor_pipe_pct", "tflops_counted",
       "bound"]].round(1).reset_index(drop=True)"""),
    ("md", """## What NVRTC said at compile time vs what the capture recorded

`hookmagic kernels check` reads registers, shared memory and spills from NVRTC's `ptxas -v` report
without a GPU; the capture records what the driver launched with. They agree kernel by kernel:"""),
    ("code", """# NBVAL_CHECK_OUTPUT
check = nvrtc_vs_capture(trace)
print(f"{int(check.agree.sum())} of {len(check)} hookmagic kernels: registers and static shared memory "
      "as NVRTC reported them; spills:", int(check.spill_store_bytes.sum()), "bytes")"""),
    ("code", """check"""),
    ("md", """## hookmagic's usual views of the same capture

The summary, the flame graph of GPU time by the Python line that launched it (the naive SGEMM
alone is most of the capture's GPU time), and the timeline with each step's `hookmagic.range`
above its kernels."""),
    ("code", """trace.summary()"""),
    ("code", """trace.flame()"""),
    ("code", """trace.timeline()"""),
]


def main() -> None:
    write_notebook(CELLS, NB, timeout=300)


if __name__ == "__main__":
    main()
