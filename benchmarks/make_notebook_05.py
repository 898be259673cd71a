"""Write notebooks/05_kernels.ipynb (the kernel lab) and execute it in replay mode so its saved
outputs are those of the bundled recording (notebooks/recordings/kernel_journey.hmtrace):

    python benchmarks/make_notebook_05.py
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

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
(`recordings/kernel_journey.hmtrace`, made by `python benchmarks/record_kernels.py`); every
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

One capture is one process and two launches per step. `benchmarks/results/kernels.md` measures
the same kernels at 4096³ in three fresh processes (`python benchmarks/bench_kernels.py
--processes 3`, min–max over the processes). Its times are CUDA events around each Python call,
so they include the host's launch cost, which the capture's kernel times (CUPTI, on the GPU) do
not — for sub-millisecond kernels (the cuBLAS Tensor-Core GEMMs) the benchmark's rates are
therefore lower. The fractions of cuBLAS agree in order and roughly in size."""),
    ("code", """bench_md = here("benchmarks/results/kernels.md")
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
output once) against the GPU's DRAM peak. This recording holds FP16 4096 × 4096 softmax,
LayerNorm, RMSNorm and bias+GELU. It holds no device-to-device copy (the measured copy
bandwidth the inference-kernels issue compares with is in `benchmarks/results/kernels.md`, timed
the benchmark's way) and no fused preprocessing kernel — that kernel is not written yet, so the
differential flame graph of fused preprocessing against the torch chain is still to come."""),
    ("code", """bw = journey[~is_gemm.values][["step", "name", "mean_ms", "gbps", "registers", "smem_per_block",
                                "threads_per_block", "occupancy", "limiter"]].copy()
bw["of_dram_peak"] = bw.gbps * 1e9 / peaks["dram"]
print(f"DRAM peak {peaks['dram'] / 1e12:.2f} TB/s ({peaks['source']}); {RECORDED_ON}")
bw.round(3)"""),
    ("md", """## What NVRTC said at compile time vs what the capture recorded

`hookmagic kernels check` reads registers, shared memory and spills from NVRTC's `ptxas -v` report
without a GPU; the capture records what the driver launched with. They agree kernel by kernel:"""),
    ("code", """# NBVAL_CHECK_OUTPUT
check = nvrtc_vs_capture(trace)
print(f"{int(check.agree.sum())} of {len(check)} hookmagic kernels: registers and static shared memory "
      "as NVRTC reported them; spills:", int(check.spill_store_bytes.sum()), "bytes")"""),
    ("code", """check"""),
    ("md", """## hookmagic's usual views of the same capture

The summary, and the timeline with each step's `hookmagic.range` above its kernels."""),
    ("code", """trace.summary()"""),
    ("code", """trace.timeline()"""),
]


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src in CELLS:
        nb.cells.append(nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src))
    return nb


def main() -> None:
    nb = build()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NB.parent)}}).execute()
    nbformat.write(nb, NB)
    print("wrote", NB)


if __name__ == "__main__":
    main()
