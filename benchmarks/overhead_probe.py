"""Which part of a capture costs what, on 20,000 tiny kernels (a GPU diagnostic).

    python benchmarks/overhead_probe.py

Times the native session alone with each switch, the NVML sampler alone, and the full
``hookmagic.capture``, interleaved, medians of 9; prints one line per configuration.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    import hookmagic
    from hookmagic.cupti.nvml_sampler import NvmlSampler
    from hookmagic.cupti.session import _prepare_native

    native, why = _prepare_native()
    assert native is not None, why
    x = torch.zeros(16, device="cuda")

    def tiny():
        for _ in range(20000):
            x.add_(1)
        torch.cuda.synchronize()

    def native_run(**options):
        def run():
            t0 = time.perf_counter()
            native.start(**options)
            t1 = time.perf_counter()
            tiny()
            t2 = time.perf_counter()
            native.stop()
            t3 = time.perf_counter()
            native.take()
            t4 = time.perf_counter()
            return {"start": t1 - t0, "loop": t2 - t1, "stop": t3 - t2, "take": t4 - t3}
        return run

    def plain():
        t0 = time.perf_counter()
        tiny()
        return {"loop": time.perf_counter() - t0}

    def nvml_only():
        s = NvmlSampler(native.timestamp, 0.02)
        t0 = time.perf_counter()
        s.start()
        t1 = time.perf_counter()
        tiny()
        t2 = time.perf_counter()
        s.stop()
        return {"start": t1 - t0, "loop": t2 - t1, "stop": time.perf_counter() - t2}

    def full(**options):
        def run():
            t0 = time.perf_counter()
            with hookmagic.capture(**options) as trace:
                t1 = time.perf_counter()
                tiny()
                t2 = time.perf_counter()
            t3 = time.perf_counter()
            o = trace.meta["overhead"]
            return {"start": t1 - t0, "loop": t2 - t1, "exit": t3 - t2,
                    "build": o["build_s"], "stop": o["stop_s"]}
        return run

    def torch_profiler_loop():
        from torch.profiler import ProfilerActivity, profile

        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            t1 = time.perf_counter()
            tiny()
            t2 = time.perf_counter()
        return {"start": t1 - t0, "loop": t2 - t1, "exit": time.perf_counter() - t2}

    configs = {
        "none": plain,
        "native activities only (no callbacks)": native_run(memory=False, stacks=False,
                                                            callbacks=False, detach=False),
        "native kernels, no detach": native_run(memory=False, stacks=False, detach=False),
        "native kernels, detach": native_run(memory=False, stacks=False, detach=True),
        "native +memory (callbacks), no detach": native_run(memory=True, stacks=False, detach=False),
        "native +stacks, no detach": native_run(memory=True, stacks=True, detach=False),
        "native +stacks, detach": native_run(memory=True, stacks=True, detach=True),
        "nvml sampler only": nvml_only,
        "capture(nvml=False)": full(nvml=False),
        "capture() defaults": full(),
    }
    tiny()
    results = {k: [] for k in configs}
    for _ in range(9):
        for name, run in configs.items():
            results[name].append(run())
    # torch.profiler last and on its own: it keeps CUPTI subscribed for the rest of the process
    results["torch.profiler (CPU+CUDA)"] = [torch_profiler_loop() for _ in range(5)]
    for name, runs in results.items():
        keys = runs[0].keys()
        print(f"{name:40s}", "  ".join(f"{k}={statistics.median(r[k] for r in runs) * 1e3:7.2f}ms"
                                       for k in keys), flush=True)


if __name__ == "__main__":
    main()
