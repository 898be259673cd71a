"""Capture overhead on a GPU: no capture vs ``%%cudahook`` defaults, ``--lite``, CUPTI's own
floors, and torch.profiler (CPU+CUDA, and CUDA only).

Workloads: (a) 20,000 tiny kernels, (b) ResNet-50 fp16 batch 16 inference,
(c) large bf16 GEMMs. Each is timed end to end, from entering the capture to having its
tables in hand (hookmagic: the Trace's DataFrames; torch.profiler CPU+CUDA: ``key_averages()``;
torch.profiler CUDA only: ``events()``), with the GPU synchronised. Each workload runs in
``--processes`` fresh processes (torch.profiler keeps CUPTI for the rest of a process, so it
runs last in each); in a process, each configuration is interleaved with a plain run and its
x is the median of the per-repetition ratios. The tables quote min–max over the processes.

    python -m benchmarks run overhead --set workload=resnet50_fp16_b16
"""
from __future__ import annotations

import time

#: hookmagic configurations: column name -> capture options
CONFIGS = {
    "defaults": {},
    "no_module_names": {"module_names": False},  # what naming nn.Modules in stacks costs
    "lite": {"lite": True},
    "lite_no_callbacks": {"lite": True, "callbacks": False},
}

WORKLOADS = {
    "tiny_kernels_20000": "20,000 tiny kernels (x.add_(1))",
    "resnet50_fp16_b16": "ResNet-50 fp16 batch 16 inference, 20 iterations",
    "gemm_bf16_8192": "8192x8192 bf16 GEMM x 20",
}


def _workload(name: str):
    import torch

    if name == "tiny_kernels_20000":
        x = torch.zeros(16, device="cuda")

        def run():
            for _ in range(20000):
                x.add_(1)
            torch.cuda.synchronize()
    elif name == "resnet50_fp16_b16":
        import torchvision

        model = torchvision.models.resnet50().cuda().half().eval()
        data = torch.randn(16, 3, 224, 224, device="cuda", dtype=torch.half)

        def run():
            with torch.no_grad():
                for _ in range(20):
                    model(data)
            torch.cuda.synchronize()
    elif name == "gemm_bf16_8192":
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def run():
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
    else:
        raise ValueError(name)
    return run


def _time_plain(run) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def _time_hookmagic(run, **options) -> tuple[float, dict]:
    import hookmagic

    t0 = time.perf_counter()
    with hookmagic.capture(**options) as trace:
        run()
    n = len(trace.kernels)  # the kernels table is in hand once the block has ended
    elapsed = time.perf_counter() - t0
    # The other tables are built when first read (a view, the summary): timed apart, so the
    # cost they defer is in the result, not hidden.
    t1 = time.perf_counter()
    trace.tables
    deferred_s = time.perf_counter() - t1
    meta = trace.meta
    parts = {k: round(float(v) * 1e3, 3) for k, v in meta.get("overhead", {}).items()
             if k.endswith("_s")}
    parts["deferred_tables_s"] = round(deferred_s * 1e3, 3)
    return elapsed, {"kernels": n, "records": meta.get("records", 0), "overhead_ms": parts,
                     "decode_s": meta.get("overhead", {}).get("decode_s", 0.0),
                     "status": meta.get("status"), "warnings": meta.get("warnings", []),
                     "dropped": sum(meta.get("dropped", {}).values())}


def _time_cupti_floor(run, native, **options) -> float:
    """The native session alone with ``options``: what CUPTI itself costs, no hookmagic Python."""
    from benchmarks.native_probe import probe_start

    t0 = time.perf_counter()
    probe_start(native, **options)
    run()
    native.stop()
    native.take()
    return time.perf_counter() - t0


def _time_torch_profiler(run, cuda_only: bool = False) -> float:
    """CPU+CUDA until ``key_averages()`` returns; CUDA only until its ``events()`` are in hand."""
    from torch.profiler import ProfilerActivity, profile

    activities = ([ProfilerActivity.CUDA] if cuda_only
                  else [ProfilerActivity.CPU, ProfilerActivity.CUDA])
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        run()
    if cuda_only:
        len(prof.events())
    else:
        prof.key_averages()
    return time.perf_counter() - t0


def _warm_torch_profiler() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.zeros(16, device="cuda")
    for activities in ([ProfilerActivity.CPU, ProfilerActivity.CUDA], [ProfilerActivity.CUDA]):
        with profile(activities=activities) as prof:
            x.add_(1)
            torch.cuda.synchronize()
        prof.key_averages()


def child(name: str, repeats: int, torch_repeats: int) -> dict:
    import statistics

    from hookmagic.cupti.session import _prepare_native

    native, why = _prepare_native()
    assert native is not None, why
    kernel_kind = [native.enum_names()["activity_kind"]["concurrent_kernel"]]
    run = _workload(name)
    for _ in range(3):
        run()
    times: dict[str, list[float]] = {k: [] for k in ("base", *CONFIGS, "floor",
                                                      "floor_callbacks", "floor_defaults")}
    first_capture_x, extra, lite_extra = None, {}, {}
    for _ in range(repeats):
        times["base"].append(_time_plain(run))
        for config, options in CONFIGS.items():
            elapsed, info = _time_hookmagic(run, **options)
            times[config].append(elapsed)
            if config == "defaults":
                extra = info
                if first_capture_x is None:
                    first_capture_x = elapsed / times["base"][-1]
            elif config == "lite":
                lite_extra = info
        times["floor"].append(_time_cupti_floor(run, native, activity_kinds=kernel_kind,
                                                callbacks=False, memory=False, stacks=False))
        times["floor_callbacks"].append(_time_cupti_floor(
            run, native, activity_kinds=kernel_kind, memory=False, stacks=False,
            noop_callbacks=True))
        # the defaults' own activity kinds and callbacks, each callback returning at once
        times["floor_defaults"].append(_time_cupti_floor(run, native, stacks=False,
                                                         noop_callbacks=True))
    torch_times: dict[str, list[float]] = {"base_cpu": [], "cpu_cuda": [], "base_cuda": [],
                                           "cuda_only": []}
    if torch_repeats:  # 0: torch.profiler not measured
        _warm_torch_profiler()  # its first use initialises Kineto: not timed, as ours
    for _ in range(torch_repeats):
        torch_times["base_cpu"].append(_time_plain(run))
        torch_times["cpu_cuda"].append(_time_torch_profiler(run))
        torch_times["base_cuda"].append(_time_plain(run))
        torch_times["cuda_only"].append(_time_torch_profiler(run, cuda_only=True))
    med = statistics.median

    def ratio(values, base):
        return med(t / b for t, b in zip(values, base))
    row = {"workload": name, "repeats": repeats, "torch_repeats": torch_repeats,
           "baseline_s": med(times["base"]), "first_capture_x": first_capture_x,
           "cupti_activity_x": ratio(times["floor"], times["base"]),
           "cupti_callbacks_x": ratio(times["floor_callbacks"], times["base"]),
           "cupti_defaults_set_x": ratio(times["floor_defaults"], times["base"])}
    for config in CONFIGS:
        row[f"{config}_s"] = med(times[config])
        row[f"{config}_x"] = ratio(times[config], times["base"])
    row["hookmagic_s"], row["hookmagic_x"] = row["defaults_s"], row["defaults_x"]
    row["lite_minus_floor_x"] = row["lite_x"] - row["cupti_activity_x"]
    if torch_repeats:
        row["torch_profiler_s"] = med(torch_times["cpu_cuda"])
        row["torch_profiler_x"] = ratio(torch_times["cpu_cuda"], torch_times["base_cpu"])
        row["torch_cuda_only_s"] = med(torch_times["cuda_only"])
        row["torch_cuda_only_x"] = ratio(torch_times["cuda_only"], torch_times["base_cuda"])
        row["baseline_torch_phase_s"] = med(torch_times["base_cpu"] + torch_times["base_cuda"])
    row.update({k: v for k, v in extra.items() if k != "warnings"})
    row["lite_kernels"] = lite_extra.get("kernels")
    row["lite_overhead_ms"] = lite_extra.get("overhead_ms", {})  # the last lite capture's parts
    row["lite_warnings"] = lite_extra.get("warnings", [])
    row["warnings"] = extra.get("warnings", [])
    return row


DESCRIPTION = ("capture overhead on a GPU workload: no capture vs %%cudahook defaults, --lite, "
               "CUPTI's own floors (kernel records alone, + no-op launch callbacks; the "
               "defaults' activity kinds and callbacks, no-op) and torch.profiler (torch_repeats "
               "0: not run); x = median of interleaved per-repetition ratios. fixed_*_ms: one "
               "warm defaults capture's parts; fixed_cupti_ms = CUPTI's calls (subscribe, "
               "enabling callbacks and kinds, forced flush with the decoding it runs, finalize), "
               "fixed_ours_ms = the rest of fixed_total_ms (start + finish); "
               "fixed_deferred_tables_s_ms = building the tables other than kernels when first "
               "read (not in fixed_total_ms)")
PARAMS = {"workload": "tiny_kernels_20000", "repeats": 5, "torch_repeats": 1}
NEEDS = ("gpu", "torch")


def measure(workload: str, repeats: int, torch_repeats: int) -> dict[str, float]:
    row = child(workload, repeats, torch_repeats)
    out = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    # ours minus CUPTI's floor: kernel records with no-op launch callbacks, and the defaults'
    # own activity kinds and callbacks, no-op (what hookmagic itself adds over CUPTI there)
    out["defaults_minus_floor_x"] = row["defaults_x"] - row["cupti_callbacks_x"]
    out["defaults_minus_same_set_floor_x"] = row["defaults_x"] - row["cupti_defaults_set_x"]
    parts = row.get("overhead_ms") or {}
    for part, ms in parts.items():
        out[f"fixed_{part}_ms"] = ms
    if "finish_s" in parts:
        # Around the cell: CUPTI's own calls (subscribe, enabling callbacks and activity
        # kinds, the forced flush with the decoding it runs, finalize), and ours: the rest.
        cupti = sum(parts.get(k, 0.0) for k in CUPTI_PARTS)
        out["fixed_total_ms"] = parts.get("start_s", 0.0) + parts["finish_s"]
        out["fixed_cupti_ms"] = cupti
        out["fixed_ours_ms"] = out["fixed_total_ms"] - cupti
    return out


#: the parts of a capture's fixed cost spent inside CUPTI's own calls (meta["overhead"])
CUPTI_PARTS = ("subscribe_s", "callbacks_s", "enable_s", "flush_s", "detach_s")
