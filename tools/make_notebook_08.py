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


CELLS: list[tuple[str, str]] = []   # filled below


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
