"""Record the GEMM journey on a GPU for notebooks/05_kernels.ipynb (replayed without a GPU).

    python lab/kernels/record_kernels.py --out hookmagic/data/recordings

One capture (``kernel_journey.hmtrace``): each SGEMM step, the Tensor Core GEMMs and their cuBLAS
references at 4096^3, two launches each, every step inside a ``hookmagic.range`` named after it.
``meta["work"]`` holds the declared work (FLOPs, DRAM bytes) of every launch, keyed by the
captured kernel name (cuBLAS kernels get the work of the matmul they ran); ``meta["nvrtc"]`` the
registers / shared memory / spills NVRTC reported for the GPU's architecture; ``meta["recorded_on"]``
the GPU, driver and date.

``--counters`` records the journey once more with the default hardware counters, one launch per
step (``kernel_journey_counters.hmtrace``).

``--bandwidth`` records instead the memory-bound kernels against a device-to-device copy and torch
eager (``kernel_bandwidth.hmtrace``) and, where ``hookmagic.kernels.preprocess`` exists, the fused
frame preprocessing and the torch chain it replaces (``preprocess_fused.hmtrace``,
``preprocess_torch.hmtrace``): ``hookmagic.kernels.lab.capture_bandwidth``.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="hookmagic/data/recordings")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--what", choices=("journey", "inference"), default="journey",
                    help="journey: the GEMM journey (kernel_journey.hmtrace); inference: the inference kernels beside "
                         "what they replace (kernel_inference.hmtrace)")
    ap.add_argument("--bandwidth", action="store_true", help="record the bandwidth captures instead")
    ap.add_argument("--counters", action="store_true",
                    help="journey with the default hardware counters, one launch per step "
                         "(kernel_journey_counters.hmtrace)")
    args = ap.parse_args()
    if args.bandwidth:
        from hookmagic.kernels.lab import capture_bandwidth

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        traces = capture_bandwidth(args.size, args.size)
        for name, t in traces.items():
            t.meta["host"] = "gpu-machine"
            path = t.save(out / f"{'kernel_' if name == 'bandwidth' else ''}{name}.hmtrace")
            print("wrote", path, Path(path).stat().st_size // 1024, "KiB", t.meta.get("status"),
                  len(t.kernels), "kernels,", len(t.meta["range_work"]), "steps")
        for note in traces["bandwidth"].meta["left_out"]:
            print("left out:", note)
        return
    from hookmagic.kernels.lab import capture_inference, capture_journey

    if args.what == "journey":
        trace = capture_journey(args.size, launches=1 if args.counters else 2, counters=args.counters)
    else:
        trace = capture_inference()
    trace.meta["host"] = "gpu-machine"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = trace.save(out / f"kernel_{args.what}{'_counters' if args.counters else ''}.hmtrace")
    print("wrote", path, Path(path).stat().st_size // 1024, "KiB", trace.meta.get("status"),
          len(trace.kernels), "kernels,", len(trace.meta["work"]), "declared launches")


if __name__ == "__main__":
    main()
