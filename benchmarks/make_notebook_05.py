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
and shared memory NVRTC reported, occupancy, and a roofline.

On a GPU the capture runs **live**; without one, the notebook **replays a recording** made on a GPU
(its GPU, driver and date are printed below)."""),
    ("code", """from pathlib import Path

import pandas as pd

import hookmagic
import hookmagic.kernels as hk
from hookmagic.analysis.occupancy import kernel_occupancy
from hookmagic.analysis.roofline import kernel_rates, nvrtc_vs_capture, peaks_for, peaks_table, roofline
from hookmagic.views.roofline import roofline_figure

pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)


def gpu_here() -> bool:
    try:
        import torch
        hk.build.nvrtc_version()
        return torch.cuda.is_available()
    except Exception:
        return False


LIVE = gpu_here()
if LIVE:
    from hookmagic.kernels.lab import capture_journey
    trace = capture_journey(4096)
else:
    here = Path("recordings/kernel_journey.hmtrace")
    trace = hookmagic.load(here if here.exists() else Path("notebooks") / here)
print(("LIVE capture on " if LIVE else "REPLAY of a recording made on ") + trace.meta["recorded_on"])"""),
    ("md", """## Every step: time, achieved TFLOP/s, fraction of cuBLAS, resources, occupancy

Achieved rates join the captured launches (kernel name, GPU time) with the work each launch
declared (`trace.meta["work"]`; `hookmagic.kernels.record()` does the same for your own kernels);
`gbps` is the compulsory DRAM traffic per second (what the row-wise kernels at the end are judged by).
cuBLAS's kernels carry the work of the matmul they ran. `of_cuBLAS` compares with the cuBLAS
kernel of the same precision in the same capture. Occupancy is hookmagic's calculator on the
registers and shared memory the capture recorded."""),
    ("code", """rates = kernel_rates(trace)
reference = {"float32": "cuBLAS FP32", "float16": "cuBLAS FP16", "bfloat16": "cuBLAS BF16", "int8": "cuBLAS INT8"}
cublas = {p: rates.loc[rates.step == s, "tflops"].max() for p, s in reference.items()}
is_gemm = ~rates.step.str.contains("softmax|LayerNorm|RMSNorm|GELU")
rates["of_cuBLAS"] = (rates.tflops / rates.precision.map(cublas)).where(is_gemm)
occ = kernel_occupancy(trace)[["name", "occupancy", "limiter"]].drop_duplicates("name")
journey = rates.merge(occ, on="name", how="left")
journey["mean_ms"] = journey.mean_ns / 1e6
journey[["step", "precision", "mean_ms", "tflops", "of_cuBLAS", "gbps", "registers", "smem_per_block",
         "threads_per_block", "occupancy", "limiter"]].round(3)"""),
    ("md", """## Roofline

Each kernel at its arithmetic intensity (FLOPs per byte of compulsory DRAM traffic: every operand
read once, the result written once) and its achieved rate, under the datasheet roofs of the GPU it
ran on. A GEMM at 4096³ sits far right of the ridge point: it is compute-bound, so the distance
to its precision's roof is what the journey closes."""),
    ("code", """peaks = peaks_for(trace.meta["recorded_on"]) or peaks_for("H100 SXM")
display(peaks_table(peaks))
points = roofline(rates, peaks)
display(points[["step", "precision", "intensity", "tflops", "roof_tflops", "of_roof", "bound"]].round(3))
roofline_figure(points, peaks, title="GEMM journey, 4096³")"""),
    ("md", """## What NVRTC said at compile time vs what the capture recorded

`hookmagic kernels check` reads registers, shared memory and spills from NVRTC's `ptxas -v` report
without a GPU; the capture records what the driver launched with. They agree kernel by kernel:"""),
    ("code", """# NBVAL_CHECK_OUTPUT
check = nvrtc_vs_capture(trace)
print(f"{int(check.agree.sum())} of {len(check)} hookmagic kernels: registers and static shared memory "
      "as NVRTC reported them; spills:", int(check.spill_store_bytes.sum()), "bytes")"""),
    ("code", """check"""),
    ("md", """## hookmagic's usual views of the same capture"""),
    ("code", """trace.summary()"""),
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
