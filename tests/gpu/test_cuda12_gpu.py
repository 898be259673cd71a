"""The ``[cuda12]`` path on a real GPU: a CUDA 12 application captured with CUDA 12's CUPTI.

The application (``APP``) uses CUDA 12 alone: ``libcudart.so.12`` from nvidia-cuda-runtime-cu12,
through ctypes, allocates, copies, sets memory and times with CUDA events; its kernels are
PTX (``PTX``: NVRTC 12.9's output for ``KERNELS_SOURCE`` at compute_75) loaded and launched
with the driver API. It runs in its own process: this one has PyTorch, whose CUDA 13 runtime
and CUPTI must not be in the application's. hookmagic captures it with ``libcupti.so.12`` from
nvidia-cuda-cupti-cu12 (``HOOKMAGIC_CUPTI``), and with CUDA 13's CUPTI where one is installed.

The references are the application's own: the kernels it launched, in order, and the line it
launched each from (Python's frames), the bytes it asked to copy and set, CUDA events recorded
around each long kernel, and the values the kernels computed. A last test checks which CUPTI a
PyTorch process shares when it has mapped CUDA 12's beside its own.

On the GPU machine, carry the wheel folder that holds the two CUDA 12 wheels (``.whl-cuda12``)::

    HOOKMAGIC_WHEELS=.whl-cuda12 source benchmarks/gpu_setup.sh
    python3 -m pytest -o addopts="" -q tests/gpu/test_cuda12_gpu.py
"""
from __future__ import annotations

import glob
import json
import os
import site
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from hookmagic.cupti import library

KERNELS_SOURCE = r'''
extern "C" __global__ void hm12_fill(float* x, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v + (float)i;
}
extern "C" __global__ void hm12_saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void hm12_spin(float* out, int iters) {
    float acc = (float)threadIdx.x;
    for (int k = 0; k < iters; ++k) acc = acc * 0.999f + 1.0f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
'''

# NVRTC 12.9 (nvidia-cuda-nvrtc-cu12 12.9.86), --gpu-architecture=compute_75, of KERNELS_SOURCE:
# kept as text because that NVRTC is a 90 MB wheel the GPU machine need not carry.
PTX = r'''
.version 8.8
.target sm_75
.address_size 64

.visible .entry hm12_fill(
	.param .u64 hm12_fill_param_0,
	.param .f32 hm12_fill_param_1,
	.param .u32 hm12_fill_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;


	ld.param.u64 	%rd1, [hm12_fill_param_0];
	ld.param.f32 	%f1, [hm12_fill_param_1];
	ld.param.u32 	%r2, [hm12_fill_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd2, %rd1;
	cvt.rn.f32.s32 	%f2, %r1;
	add.f32 	%f3, %f2, %f1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.f32 	[%rd4], %f3;

$L__BB0_2:
	ret;

}
.visible .entry hm12_saxpy(
	.param .f32 hm12_saxpy_param_0,
	.param .u64 hm12_saxpy_param_1,
	.param .u64 hm12_saxpy_param_2,
	.param .u32 hm12_saxpy_param_3
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<5>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<8>;


	ld.param.f32 	%f1, [hm12_saxpy_param_0];
	ld.param.u64 	%rd1, [hm12_saxpy_param_1];
	ld.param.u64 	%rd2, [hm12_saxpy_param_2];
	ld.param.u32 	%r2, [hm12_saxpy_param_3];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB1_2;

	cvta.to.global.u64 	%rd3, %rd2;
	cvta.to.global.u64 	%rd4, %rd1;
	mul.wide.s32 	%rd5, %r1, 4;
	add.s64 	%rd6, %rd4, %rd5;
	ld.global.f32 	%f2, [%rd6];
	add.s64 	%rd7, %rd3, %rd5;
	ld.global.f32 	%f3, [%rd7];
	fma.rn.f32 	%f4, %f2, %f1, %f3;
	st.global.f32 	[%rd7], %f4;

$L__BB1_2:
	ret;

}
.visible .entry hm12_spin(
	.param .u64 hm12_spin_param_0,
	.param .u32 hm12_spin_param_1
)
{
	.reg .pred 	%p<6>;
	.reg .f32 	%f<18>;
	.reg .b32 	%r<15>;
	.reg .b64 	%rd<5>;


	ld.param.u64 	%rd1, [hm12_spin_param_0];
	ld.param.u32 	%r8, [hm12_spin_param_1];
	mov.u32 	%r1, %tid.x;
	cvt.rn.f32.u32 	%f17, %r1;
	setp.lt.s32 	%p1, %r8, 1;
	@%p1 bra 	$L__BB2_6;

	add.s32 	%r9, %r8, -1;
	and.b32  	%r14, %r8, 3;
	setp.lt.u32 	%p2, %r9, 3;
	@%p2 bra 	$L__BB2_4;

	sub.s32 	%r13, %r8, %r14;

$L__BB2_3:
	fma.rn.f32 	%f10, %f17, 0f3F7FBE77, 0f3F800000;
	fma.rn.f32 	%f11, %f10, 0f3F7FBE77, 0f3F800000;
	fma.rn.f32 	%f12, %f11, 0f3F7FBE77, 0f3F800000;
	fma.rn.f32 	%f17, %f12, 0f3F7FBE77, 0f3F800000;
	add.s32 	%r13, %r13, -4;
	setp.ne.s32 	%p3, %r13, 0;
	@%p3 bra 	$L__BB2_3;

$L__BB2_4:
	setp.eq.s32 	%p4, %r14, 0;
	@%p4 bra 	$L__BB2_6;

$L__BB2_5:
	.pragma "nounroll";
	fma.rn.f32 	%f17, %f17, 0f3F7FBE77, 0f3F800000;
	add.s32 	%r14, %r14, -1;
	setp.ne.s32 	%p5, %r14, 0;
	@%p5 bra 	$L__BB2_5;

$L__BB2_6:
	mov.u32 	%r10, %ntid.x;
	mov.u32 	%r11, %ctaid.x;
	mad.lo.s32 	%r12, %r11, %r10, %r1;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r12, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.f32 	[%rd4], %f17;
	ret;

}
'''

# The application. argv[1]: JSON {"cudart": path of libcudart.so.12, "ptx": path of the PTX}.
# Prints one JSON line: what it did (the references) and what hookmagic captured.
APP = r'''import ctypes as c
import json
import os
import sys

import numpy as np

config = json.loads(sys.argv[1])
cudart = c.CDLL(config["cudart"])
cuda = c.CDLL("libcuda.so.1")
N, REPS, SPIN_BLOCKS, SPIN_THREADS, SPIN_ITERS = 1 << 20, 5, 64, 128, 1_000_000
NBYTES = 4 * N
HTOD, DTOH = 1, 2  # cudaMemcpyKind


def check(result, what):
    if result != 0:
        raise SystemExit(f"{what} failed with CUDA error {result}")


check(cudart.cudaSetDevice(0), "cudaSetDevice")
check(cudart.cudaFree(None), "cudaFree(NULL)")  # makes the primary context current here
runtime = c.c_int()
check(cudart.cudaRuntimeGetVersion(c.byref(runtime)), "cudaRuntimeGetVersion")
module = c.c_void_p()
with open(config["ptx"], "rb") as f:
    ptx = f.read() + b"\0"
check(cuda.cuModuleLoadData(c.byref(module), c.c_char_p(ptx)), "cuModuleLoadData")


def function(name):
    f = c.c_void_p()
    check(cuda.cuModuleGetFunction(c.byref(f), module, name.encode()), name)
    return f


FILL, SAXPY, SPIN = function("hm12_fill"), function("hm12_saxpy"), function("hm12_spin")


def device_buffer(nbytes):
    p = c.c_void_p()
    check(cudart.cudaMalloc(c.byref(p), c.c_size_t(nbytes)), "cudaMalloc")
    return p


x, y, out = device_buffer(NBYTES), device_buffer(NBYTES), device_buffer(4 * SPIN_BLOCKS * SPIN_THREADS)
pinned = c.c_void_p()
check(cudart.cudaMallocHost(c.byref(pinned), c.c_size_t(NBYTES)), "cudaMallocHost")
host = np.ctypeslib.as_array((c.c_float * N).from_address(pinned.value))
start, stop = c.c_void_p(), c.c_void_p()
check(cudart.cudaEventCreate(c.byref(start)), "cudaEventCreate")
check(cudart.cudaEventCreate(c.byref(stop)), "cudaEventCreate")
launches, event_ms = [], []


def launch(func, name, blocks, threads, *args):
    params = (c.c_void_p * len(args))(*[c.cast(c.pointer(a), c.c_void_p) for a in args])
    launches.append([name, sys._getframe(1).f_lineno])
    check(cuda.cuLaunchKernel(func, blocks, 1, 1, threads, 1, 1, 0, None, params, None), name)


def run(reps):
    host[:] = np.arange(N, dtype=np.float32) % 1024
    check(cudart.cudaMemcpy(x, pinned, c.c_size_t(NBYTES), HTOD), "cudaMemcpy")
    check(cudart.cudaMemset(y, 0, c.c_size_t(NBYTES)), "cudaMemset")
    launch(FILL, "hm12_fill", N // 256, 256, y, c.c_float(1.0), c.c_int(N))
    for _ in range(reps):
        launch(SAXPY, "hm12_saxpy", N // 256, 256, c.c_float(2.0), x, y, c.c_int(N))
        check(cudart.cudaEventRecord(start, None), "cudaEventRecord")
        launch(SPIN, "hm12_spin", SPIN_BLOCKS, SPIN_THREADS, out, c.c_int(SPIN_ITERS))
        check(cudart.cudaEventRecord(stop, None), "cudaEventRecord")
        check(cudart.cudaEventSynchronize(stop), "cudaEventSynchronize")
        ms = c.c_float()
        check(cudart.cudaEventElapsedTime(c.byref(ms), start, stop), "cudaEventElapsedTime")
        event_ms.append(ms.value)
    check(cudart.cudaMemcpy(pinned, y, c.c_size_t(NBYTES), DTOH), "cudaMemcpy")
    i = np.arange(N, dtype=np.float32)
    return bool(np.array_equal(host, 1 + i + reps * 2 * (i % 1024)))


run(1)  # loads the kernels' code and warms the launch path before capturing
launches.clear()
event_ms.clear()
import hookmagic  # noqa: E402  (after CUDA 12 is up: nothing of CUDA 13 may come in)

with hookmagic.capture() as trace:
    values_ok = run(REPS)


def mapped(prefix):
    with open("/proc/self/maps") as maps:
        names = {line.split()[-1] for line in maps if "/" in line}
    return sorted({os.path.basename(n) for n in names if os.path.basename(n).startswith(prefix)})


k = trace.kernels.sort_values("start_ns", kind="stable")
print(json.dumps({
    "status": trace.meta["status"], "reason": trace.meta.get("reason", ""),
    "cupti_path": trace.meta.get("cupti_path", ""), "cupti_version": trace.meta.get("cupti_version", 0),
    "runtime": runtime.value, "cudart_mapped": mapped("libcudart"), "cupti_mapped": mapped("libcupti"),
    "foreign_modules": sorted(m for m in ("torch", "cupy") if m in sys.modules),
    "values_ok": values_ok, "launches": launches, "event_ms": event_ms, "nbytes": NBYTES,
    "kernels": [{"name": r.name, "duration_ns": int(r.duration_ns),
                 "frames": [list(f) for f in trace.stack_frames(int(r.stack_id))]}
                for r in k.itertuples()],
    "memcpy": sorted([r.kind, int(r.bytes), r.src_kind, r.dst_kind] for r in trace.memcpy.itertuples()),
    "memset": [int(b) for b in trace.memset.bytes],
    "dropped": trace.meta.get("dropped", {}),
}))
'''


def _absolute_dirs() -> list[str]:
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:
        pass
    return list(dict.fromkeys(d for d in dirs if d and os.path.isabs(d)))


@cache
def cupti_of(major: int) -> str | None:
    """A libcupti for CUDA ``major`` (by its SONAME) among those hookmagic would consider."""
    for path in library.candidates():
        if library.elf_soname(path) == f"libcupti.so.{major}":
            return path
    return None


@cache
def cudart_12() -> str | None:
    """``libcudart.so.12``: from nvidia-cuda-runtime-cu12, else a CUDA 12 toolkit."""
    found = [p for d in _absolute_dirs()
             for p in glob.glob(os.path.join(d, "nvidia/cuda_runtime/lib/libcudart.so.12"))]
    for root in sorted(glob.glob("/usr/local/cuda-12*"), reverse=True):
        found += glob.glob(os.path.join(root, "targets/*/lib/libcudart.so.12"))
    return found[0] if found else None


def _why_not() -> str | None:
    driver = library.driver_info()
    if driver.error:
        return f"needs an NVIDIA driver ({driver.error})"
    if driver.cuda_version < 12000:
        return f"needs a driver for CUDA 12 or newer (this one supports {driver.cuda_version})"
    if cudart_12() is None:
        return ("needs the CUDA 12 runtime, libcudart.so.12 (pip install nvidia-cuda-runtime-cu12; "
                "on the GPU machine carry .whl-cuda12 with HOOKMAGIC_WHEELS=.whl-cuda12)")
    if cupti_of(12) is None:
        return ("needs CUDA 12's CUPTI, libcupti.so.12 (pip install 'hookmagic[cuda12]' or "
                "nvidia-cuda-cupti-cu12; on the GPU machine carry .whl-cuda12)")
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


def _capture_app(tmp_path: Path, cupti: str) -> tuple[dict, Path]:
    app, ptx = tmp_path / "cuda12_app.py", tmp_path / "hm12.ptx"
    app.write_text(APP)
    ptx.write_text(PTX)
    repo = str(Path(__file__).parents[2])
    path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, HOOKMAGIC_CUPTI=cupti, PYTHONPATH=path)
    out = subprocess.run([sys.executable, str(app), json.dumps({"cudart": cudart_12(), "ptx": str(ptx)})],
                         capture_output=True, text=True, timeout=300, env=env, cwd=repo)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), app


def _app_line(text: str) -> int:
    """The 1-based line of APP that holds ``text`` (it must occur once)."""
    lines = [n for n, line in enumerate(APP.splitlines(), 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def _check_capture(got: dict, app: Path) -> None:
    assert got["status"] == "complete", got["reason"]
    assert got["dropped"].get("activity_records", 0) == 0, got["dropped"]
    assert got["values_ok"], "the kernels computed wrong values: the application itself is broken"
    assert got["runtime"] // 1000 == 12, got["runtime"]
    assert got["cudart_mapped"] == ["libcudart.so.12"], got["cudart_mapped"]
    assert got["foreign_modules"] == []
    # The kernels the application launched, in order, and nothing else
    assert [k["name"] for k in got["kernels"]] == [name for name, _ in got["launches"]]
    # Copies and memsets: the bytes the application asked for, from and to pinned memory
    n = got["nbytes"]
    assert got["memcpy"] == [["dtoh", n, "device", "pinned"], ["htod", n, "pinned", "device"]]
    assert got["memset"] == [n]
    # Each long kernel against the CUDA events the application recorded around it
    spins = [k["duration_ns"] for k in got["kernels"] if k["name"] == "hm12_spin"]
    assert len(spins) == len(got["event_ms"]) == 5
    for ns, ms in zip(spins, got["event_ms"]):
        assert ms > 0.2 and abs(ns - ms * 1e6) <= 0.05 * ms * 1e6, (spins, got["event_ms"])
    # The Python lines behind each kernel, outermost first: the `with` block's call of run(),
    # the call in run() the application saw (its own frame's line), the driver call in launch()
    top, driver_call = _app_line("values_ok = run(REPS)"), _app_line("cuda.cuLaunchKernel(")
    for kernel, (_, line) in zip(got["kernels"], got["launches"]):
        ours = [(fn, ln) for file, fn, ln in kernel["frames"] if file == str(app)]
        assert ours == [("<module>", top), ("run", line), ("launch", driver_call)], kernel


def test_cuda12_application_captured_with_cupti_12(tmp_path):
    got, app = _capture_app(tmp_path, cupti_of(12))
    assert got["cupti_path"] == cupti_of(12)
    assert got["cupti_mapped"] == ["libcupti.so.12"], got["cupti_mapped"]
    _check_capture(got, app)


def test_cuda12_application_captured_with_cupti_13(tmp_path):
    """The CUPTI a CUDA 13 install brings, on the same CUDA 12 application."""
    if cupti_of(13) is None:
        pytest.skip("needs CUDA 13's CUPTI as well (pip install nvidia-cuda-cupti)")
    got, app = _capture_app(tmp_path, cupti_of(13))
    assert got["cupti_mapped"] == ["libcupti.so.13"], got["cupti_mapped"]
    _check_capture(got, app)


TORCH_CUPTI = """
import json, torch
from hookmagic.cupti import library
torch.zeros(1, device="cuda")
chosen, why = library.find_cupti(library.driver_info().cuda_version)
print(json.dumps([library.loaded_cuptis(), chosen, why, torch.version.cuda]))
"""


def test_a_torch_process_shares_torchs_own_cupti():
    """PyTorch for CUDA 13 also preloads CUDA 12's libcupti when that wheel is on the path
    (its CUDA 12 layout, nvidia/cuda_cupti): of the two, a capture must share the one PyTorch's
    profiler is linked to, or a capture after torch.profiler finds the driver held by it."""
    env = {k: v for k, v in os.environ.items() if k != "HOOKMAGIC_CUPTI"}
    out = subprocess.run([sys.executable, "-c", TORCH_CUPTI], capture_output=True, text=True,
                         timeout=300, env=env, cwd=str(Path(__file__).parents[2]))
    assert out.returncode == 0, out.stderr[-4000:]
    loaded, chosen, why, torch_cuda = json.loads(out.stdout.strip().splitlines()[-1])
    if len(loaded) < 2:
        pytest.skip(f"this PyTorch (CUDA {torch_cuda}) mapped one CUPTI only: {loaded}")
    assert chosen in loaded, why
    assert library.elf_soname(chosen) == f"libcupti.so.{torch_cuda.split('.')[0]}", loaded
