"""Record the GEMM journey on a GPU for notebooks/05_kernels.ipynb (replayed without a GPU).

    python benchmarks/record_kernels.py --out hookmagic/data/recordings

One capture (``kernel_journey.hmtrace``): each SGEMM step, the Tensor Core GEMMs and their cuBLAS
references at 4096^3, two launches each, every step inside a ``hookmagic.range`` named after it.
``meta["work"]`` holds the declared work (FLOPs, DRAM bytes) of every launch, keyed by the
captured kernel name (cuBLAS kernels get the work of the matmul they ran); ``meta["nvrtc"]`` the
registers / shared memory / spills NVRTC reported for the GPU's architecture; ``meta["recorded_on"]``
the GPU, driver and date.
"""
from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import asdict
from pathlib import Path


def _recorded_on() -> str:
    import torch
    name = torch.cuda.get_device_name(0)
    drv = "?"
    try:
        import pynvml
        pynvml.nvmlInit()
        drv = pynvml.nvmlSystemGetDriverVersion()
        drv = drv if isinstance(drv, str) else drv.decode()
    except Exception:
        pass
    return f"{name}, driver {drv}, torch {torch.__version__}, {dt.date.today().isoformat()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="hookmagic/data/recordings")
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    import torch

    import hookmagic
    import hookmagic.kernels as hk
    from hookmagic.kernels import registry, runtime

    torch.backends.cuda.matmul.allow_tf32 = False
    n = args.size
    torch.manual_seed(0)
    a32, b32 = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    a16, b16 = a32.half(), b32.half()
    abf, bbf = a32.bfloat16(), b32.bfloat16()
    a8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)
    b8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8).t()
    steps = [(f"sgemm {v}", lambda v=v: hk.sgemm(a32, b32, variant=v)) for v in hk.SGEMM_VARIANTS]
    steps += [("cuBLAS FP32", lambda: a32 @ b32),
              ("FP16 wmma", lambda: hk.gemm(a16, b16, variant="wmma")), ("FP16 mma", lambda: hk.gemm(a16, b16)),
              ("cuBLAS FP16", lambda: a16 @ b16),
              ("BF16 wmma", lambda: hk.gemm(abf, bbf, variant="wmma")), ("BF16 mma", lambda: hk.gemm(abf, bbf)),
              ("cuBLAS BF16", lambda: abf @ bbf),
              ("INT8 mma", lambda: hk.gemm(a8, b8)), ("cuBLAS INT8", lambda: torch._int_mm(a8, b8))]
    for _, fn in steps:          # compile, load and warm up outside the capture
        fn()
    torch.cuda.synchronize()
    registry.launch_log(clear=True)
    with hookmagic.capture(label="kernel_journey") as trace:
        for name, fn in steps:
            with hookmagic.range(name):
                for _ in range(2):
                    fn()
        torch.cuda.synchronize()
    declared = [asdict(w) for w in registry.launch_log(clear=True)]
    # cuBLAS kernels: the work of the matmul they ran, under the name they were captured with
    k, r = trace.kernels, trace.ranges
    itemsize = {"FP32": 4, "FP16": 2, "BF16": 2, "INT8": 1}
    for name, _ in steps:
        if not name.startswith("cuBLAS"):
            continue
        ids = r.loc[r["name"] == name, "range_id"]
        launches = k[k["range_id"].isin(ids)]
        if launches.empty:
            continue
        main_kernel = launches.groupby("name")["duration_ns"].sum().idxmax()
        dt_ = name.split()[1]
        w = registry.gemm_work(n, n, n, {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16", "INT8": "int8"}[dt_],
                               "int32" if dt_ == "INT8" else {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16"}[dt_])
        for _ in range(int((launches["name"] == main_kernel).sum())):
            declared.append({"kernel": main_kernel, "flops": w["flops"], "dram_bytes": w["dram_bytes"],
                             "args": {"m": n, "n": n, "k": n, "reference": name, "itemsize": itemsize[dt_]}})
    arch = runtime.device_arch(0)
    trace.meta["work"] = declared
    trace.meta["nvrtc"] = {"arch": arch, "kernels": hk.check(arch).drop(columns=["cached"]).to_dict("records")}
    trace.meta["recorded_on"] = _recorded_on()
    trace.meta["description"] = f"hookmagic.kernels GEMM journey and cuBLAS references, {n}^3, 2 launches per step"
    trace.meta["host"] = "gpu-machine"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = trace.save(out / "kernel_journey.hmtrace")
    print("wrote", path, Path(path).stat().st_size // 1024, "KiB", trace.meta.get("status"),
          len(trace.kernels), "kernels,", len(declared), "declared launches")


if __name__ == "__main__":
    main()
