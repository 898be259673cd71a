"""notebooks/05_kernels.ipynb (the kernel lab) runs top to bottom without a GPU, replaying the
recording made on a GPU, and shows what it claims. (The same execution
is checked as nbval checks it, every `# NBVAL_CHECK_OUTPUT` cell against the saved outputs:
tests/notebook_runner.py.)

The expected strings are computed from the recording itself, so re-recording on another GPU or
date does not break the test."""
from __future__ import annotations

from tests.notebook_runner import NOTEBOOKS, output_text as _text, run_notebook

PLOTLY = "application/vnd.plotly.v1+json"


def _no_gpu() -> bool:
    from hookmagic.cupti.library import driver_info
    return bool(driver_info().error)


def test_kernel_lab_replays_the_recording(monkeypatch):
    import hookmagic
    from hookmagic.analysis.occupancy import kernel_occupancy
    from hookmagic.analysis.roofline import kernel_rates, peaks_for

    code = run_notebook("05_kernels.ipynb", monkeypatch)
    text = "\n".join(_text(c) for c in code)
    trace = hookmagic.load(NOTEBOOKS / "recordings" / "kernel_journey.hmtrace")
    where = trace.meta["recorded_on"]
    first = _text(code[0])
    if _no_gpu():   # either way the first cell says which it is: assert the one that applies
        assert first.startswith(f"REPLAY of a recording made on {where}")
    else:
        assert first.startswith("LIVE capture on ")
        return      # a live capture's numbers are its own; the rest checks the replay
    assert "H100" in where and "driver " in where
    rates = kernel_rates(trace)
    assert len(rates) == 20 and f"{len(trace.kernels)} kernels captured" in text
    # every journey step with its achieved rate, fraction of cuBLAS (same precision, same capture)
    fp32 = rates[rates.precision == "float32"].set_index("step")
    cublas = fp32.loc["cuBLAS FP32", "tflops"]
    for step in ("sgemm naive", "sgemm coalesced", "sgemm smem_tiled", "sgemm tile_1d", "sgemm tile_2d",
                 "sgemm vectorized", "sgemm warptile"):
        assert step in text
        assert f"{fp32.loc[step, 'tflops'] / cublas:.3f}" in text   # of_cuBLAS, rounded as shown
    # occupancy and its limiter, from hookmagic's calculator on the captured launch configuration
    occ = kernel_occupancy(trace).drop_duplicates("name").set_index("name")
    assert occ.loc["sgemm_warptile", "limiter"] == "registers" and "registers" in text
    assert occ.loc["gemm_wmma_bf16", "occupancy"] == occ.loc["gemm_wmma_f16", "occupancy"] / 2
    # roofline: the peaks table names its source; the chart is labelled with the recording
    peaks = peaks_for(trace.meta["devices"][0]["name"])
    assert f"source: {peaks['source']}" in text
    titles = [o.data[PLOTLY]["layout"]["title"]["text"] for c in code for o in c.outputs
              if PLOTLY in o.get("data", {})]
    assert any(t.startswith("GEMM journey, 4096³") and where in t for t in titles), titles
    assert any(t.startswith("SGEMM journey") and where in t for t in titles), titles
    assert any(t.startswith("Timeline") for t in titles)
    # the benchmark table of the same day sits beside the capture, with its own label
    bench = (NOTEBOOKS.parent / "lab" / "kernels" / "journey_h100.md").read_text().splitlines()[0]
    assert bench.lstrip("# ") in text
    # bandwidth: achieved GB/s of the row-wise kernels against the DRAM peak
    rms = rates.set_index("step").loc["RMSNorm FP16", "gbps"]
    assert f"{rms:.3f}" in text and f"{rms * 1e9 / peaks['dram']:.3f}" in text
    # NVRTC's compile-time resources agree with what the capture recorded
    assert "16 of 16 hookmagic kernels: registers and static shared memory as NVRTC reported them" in text

    # against a copy and torch eager, and fused preprocessing vs the torch chain: replayed when
    # recorded (benchmarks/gpu/nb.sh), else one line says they are not recorded yet
    bw_path = NOTEBOOKS / "recordings" / "kernel_bandwidth.hmtrace"
    if bw_path.exists():
        from hookmagic.analysis.roofline import range_rates
        tb = hookmagic.load(bw_path)
        rr = range_rates(tb).set_index("step")
        assert f"REPLAY of a recording made on {tb.meta['recorded_on']}" in text
        assert f"{rr.loc['copy FP16', 'gbps']:.3f}" in text
        assert any(t.startswith("Achieved GB/s") and tb.meta["recorded_on"] in t for t in titles), titles
    else:
        assert "No bandwidth recording in this checkout yet" in text
    if (NOTEBOOKS / "recordings" / "preprocess_fused.hmtrace").exists():
        assert "faster than the torch chain on the GPU" in text
        assert any(t.startswith("Differential flame graph") for t in titles), titles
    else:
        assert "No preprocessing recordings in this checkout yet" in text
