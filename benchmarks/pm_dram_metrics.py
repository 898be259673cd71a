"""DRAM metric candidates under PM sampling during a memory-bound phase: 20 elementwise
kernels ``y = 2 x`` over 1 GiB tensors (each reads 1 GiB, writes 1 GiB), one capture per
candidate set; prints each metric's mean over the samples inside the kernels' span, the
samples and the kernels' busy seconds (bytes moved / busy time is the reference).

Run on the GPU machine: ``source benchmarks/gpu_setup.sh && python3 benchmarks/pm_dram_metrics.py``
(results: benchmarks/results/pm-sampling-h200.md)."""
import time
import torch
import hookmagic
from hookmagic import _native as native
x = torch.empty(1 << 28, device="cuda"); y = torch.empty_like(x)
torch.mul(x, 2.0, out=y); torch.cuda.synchronize()
sets = [["dram__read_throughput.avg.pct_of_peak_sustained_elapsed", "dram__write_throughput.avg.pct_of_peak_sustained_elapsed"],
        ["dram__throughput.avg.pct_of_peak_sustained_elapsed"],
        ["dramc__read_throughput.sum.pct_of_peak_sustained_elapsed"],
        ["dram__bytes_read.sum.per_second", "dram__bytes_write.sum.per_second"],
        ["dramc__sectors_read.sum.per_second"], ["dramc__read_throughput.avg.pct_of_peak_sustained_elapsed", "dramc__read_throughput.max.pct_of_peak_sustained_elapsed"]]
for metrics in sets:
    try:
        with hookmagic.capture(pm_sampling=metrics, stacks=False, nvml=False, memory=False) as t:
            torch.cuda.synchronize(); a = native.timestamp()
            for _ in range(20):
                torch.mul(x, 2.0, out=y)
            torch.cuda.synchronize(); b = native.timestamp()
        p = t.pm_samples
        k = t.kernels
        s0, s1 = k["start_ns"].min(), k["end_ns"].max()
        inside = p[(p.start_ns >= s0) & (p.end_ns <= s1)]
        print(metrics, inside.groupby("metric")["value"].mean().to_dict(), "n", len(inside), "busy_s", k.duration_ns.sum() / 1e9, flush=True)
    except Exception as e:
        print(metrics, "ERR", repr(e)[:300], flush=True)
