"""Record the hardware-counter captures of notebooks/08_counters.ipynb on a GPU, and write the
notebook (anywhere: it replays the recordings).

    python tools/make_notebook_08.py --record fp32 notebooks/recordings   # on a GPU, one process
    python tools/make_notebook_08.py --record fp16 notebooks/recordings   # each
    python tools/make_notebook_08.py                                      # write + execute

The workload is one transformer MLP block's forward pass (LayerNorm → Linear 1024→4096 → GELU →
Linear 4096→1024 → residual add) on 8192 tokens: once in FP32 with TF32 off (the GEMMs run on the
FP32 pipes), once under float16 autocast (the GEMMs run on Tensor Cores). Each variant is
captured in its own process with ``hookmagic.capture(counters=True)``; the block's time without
any capture is measured beside it with CUDA events (median of 20) and stored in
``meta["block_ms_cuda_events"]``, the independent reference for the speed-up.
"""
from __future__ import annotations

import argparse
import datetime as dt
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks" / "08_counters.ipynb"
DESCRIPTIONS = {
    "fp32": "MLP block forward, 8192 x 1024 tokens, FP32 with TF32 off",
    "fp16": "the same block under torch.autocast(float16)",
}


def record(variant: str, out: Path) -> Path:
    import torch

    import hookmagic

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    x = torch.randn(8192, 1024, device="cuda")
    ln = torch.nn.LayerNorm(1024).cuda()
    up, down = torch.nn.Linear(1024, 4096).cuda(), torch.nn.Linear(4096, 1024).cuda()

    def block(t):
        return t + down(torch.nn.functional.gelu(up(ln(t))))

    autocast = torch.autocast("cuda", dtype=torch.float16, enabled=variant == "fp16")
    with torch.no_grad(), autocast:
        for _ in range(3):                      # cuBLAS picks its kernels, modules load
            block(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            block(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        with hookmagic.capture(counters=True) as trace:
            block(x)
            torch.cuda.synchronize()
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip().splitlines()[0]
    trace.meta["recorded_on"] = (f"{torch.cuda.get_device_name()}, driver {driver}, "
                                 f"{dt.date.today().isoformat()}")
    trace.meta["description"] = DESCRIPTIONS[variant]
    trace.meta["block_ms_cuda_events"] = sorted(times)[len(times) // 2]
    path = trace.save(out / f"counters_mlp_{variant}.hmtrace")
    print("wrote", path, len(trace.kernels), "kernels", trace.meta.get("counters"))
    return path


CELLS: list[tuple[str, str]] = [
    ("md", """# 08 · Why is this kernel slow? Hardware counters, kernel by kernel

This notebook is a **REPLAY of two recordings made on a GPU** (the GPU, driver and date are printed
below, from the recordings themselves): one transformer MLP block's forward pass (LayerNorm →
Linear 1024→4096 → GELU → Linear 4096→1024 → residual add, 8192 tokens), captured with
`hookmagic.capture(counters=True)` — the same as `%%cudahook --counters` — once in FP32 with TF32
off, once under `torch.autocast(float16)`. Every kernel was replayed by CUPTI's range profiler to
read the default counter set (the metric names are Nsight Compute's; how they compare with
`ncu` on the same launches is in `docs/counters.md`). `python tools/make_notebook_08.py --record
fp32` (and `fp16`) re-makes them on a GPU."""),
    ("code", """# NBVAL_CHECK_OUTPUT
import hookmagic

fp32 = hookmagic.load("recordings/counters_mlp_fp32.hmtrace")
fp16 = hookmagic.load("recordings/counters_mlp_fp16.hmtrace")
for t in (fp32, fp16):
    c = t.meta["counters"]
    print(f"{t.meta['description']}: REPLAY of a recording made on {t.meta['recorded_on']}")
    print(f"    {c['kernels']} kernels counted, {len(c['metrics'])} metrics in {c['passes']} replay passes; "
          f"the block without capture: {t.meta['block_ms_cuda_events']:.3f} ms (CUDA events, median of 20)")"""),
    ("md", """## Step 1: where the time goes, and what bounds each kernel

`trace.counter_table()` gives one row per kernel launch: its duration (one replayed pass), SM and
DRAM throughput as % of peak, achieved occupancy, the tensor pipe's share, FLOPs counted from the
executed instructions, the measured arithmetic intensity and rates, and the bound it hits with
the numbers behind it (Nsight Compute's speed-of-light rule: a unit at ≥ 60 % of its peak)."""),
    ("code", """# NBVAL_CHECK_OUTPUT
cols = ["name", "duration_ns", "sm_pct", "dram_pct", "occupancy_pct", "tensor_pipe_pct",
        "tflops", "gbps", "bound"]
table = fp32.counter_table()[cols]
table.assign(name=table["name"].str.slice(0, 48), duration_us=(table.pop("duration_ns") / 1e3)).round(1)"""),
    ("md", """The two GEMMs hold almost all of the time. They are **compute-bound** on the FP32 pipes
(the tensor pipe is idle: TF32 is off), at a rate far below what the same GPU's Tensor Cores give.
The roofline places each kernel at its measured intensity (FLOPs per DRAM byte) and FLOP/s:"""),
    ("code", """fp32.roofline()"""),
    ("code", """# NBVAL_CHECK_OUTPUT
fp32.diagnose()[["pattern", "finding"]]"""),
    ("md", """## Step 2: move the GEMMs to Tensor Cores, and measure again

Under `torch.autocast(float16)` cuBLAS picks Hopper's Tensor Core kernels (`nvjet_…`): the tensor
pipe is now the busy unit, and the GEMMs' FLOPs are counted from the tensor operations."""),
    ("code", """# NBVAL_CHECK_OUTPUT
table = fp16.counter_table()[cols]
table.assign(name=table["name"].str.slice(0, 48), duration_us=(table.pop("duration_ns") / 1e3)).round(1)"""),
    ("code", """fp16.roofline()"""),
    ("code", """# NBVAL_CHECK_OUTPUT
before, after = (t.kernels["duration_ns"].sum() / 1e6 for t in (fp32, fp16))
events = fp32.meta["block_ms_cuda_events"] / fp16.meta["block_ms_cuda_events"]
print(f"kernel time, from the counters' durations: {before:.3f} ms -> {after:.3f} ms ({before / after:.1f}x)")
print(f"the block timed with CUDA events, no capture: {events:.1f}x faster")
fp16.diagnose()[["pattern", "finding"]]"""),
    ("md", """## Your own cells

```python
%%cudahook --counters            # the default set; or --counters=dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
y = model(x)
```

Counting replays every kernel once per pass (12 for the default set), so keep the cell to the
launches you want to understand; a capture without `--counters` costs what it always did. The
summary says how many passes and how much wall time the counters took."""),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", choices=sorted(DESCRIPTIONS))
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "notebooks" / "recordings")
    args = parser.parse_args()
    if args.record:
        record(args.record, args.out)
        return
    from notebook_writer import write_notebook

    write_notebook(CELLS, NB)


if __name__ == "__main__":
    main()
