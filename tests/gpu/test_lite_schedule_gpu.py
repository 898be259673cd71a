"""Lite captures and scheduled windows on a real GPU, against independent
references: torch.profiler's kernel, copy and memset records (in a fresh process: it keeps
CUPTI afterwards), CUDA events, ``torch.cuda.memory_reserved()``, and the kernel counts each
loop step launches by construction."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hookmagic
from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())
from tests.gpu import workloads  # noqa: E402

ROOT = Path(__file__).parents[2]


def _run_python(script: str) -> dict:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=240, cwd=str(ROOT))
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


KINETO_COUNTS = """
import json, os, tempfile, torch
from torch.profiler import ProfilerActivity, profile
from tests.gpu import workloads
workloads.mixed(steps=3)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    workloads.mixed(steps=6)
with tempfile.TemporaryDirectory(prefix='hookmagic-') as tmp:
    path = os.path.join(tmp, 'kineto.json')
    prof.export_chrome_trace(path)
    events = json.load(open(path))['traceEvents']
def count(cat):
    return sum(1 for e in events if e.get('cat') == cat and e.get('ph') == 'X')
kernels = [e for e in events if e.get('cat') == 'kernel' and e.get('ph') == 'X']
print(json.dumps({'kernels': len(kernels), 'memcpy': count('gpu_memcpy'),
                  'memset': count('gpu_memset'), 'names': sorted({e['name'] for e in kernels})}))
"""


def test_lite_records_every_kernel_copy_and_memset_torch_profiler_does():
    workloads.mixed(steps=3)   # warm up cuDNN and the allocator as the reference does
    with hookmagic.capture(lite=True) as trace:
        workloads.mixed(steps=6)
    ref = _run_python(KINETO_COUNTS)
    assert trace.status == "complete", trace.meta.get("reason")
    assert (len(trace.kernels), len(trace.memcpy), len(trace.memset)) == (
        ref["kernels"], ref["memcpy"], ref["memset"])
    assert sorted(set(trace.kernels.name)) == ref["names"]
    # and nothing it promised not to record
    assert (trace.kernels.stack_id < 0).all() and (trace.kernels.thread < 0).all()
    assert len(trace.sync) == 0 and len(trace.samples) == 0 and len(trace.stacks) == 0
    assert trace.meta["overhead"]["callbacks"] == 0       # no launch callback ever ran
    assert any(w.startswith("Lite capture:") for w in trace.meta["warnings"])


KINETO_GEMMS = """
import json, os, tempfile, torch
from torch.profiler import ProfilerActivity, profile
from tests.gpu import workloads
workloads.gemms(repeats=3)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    workloads.gemms()
with tempfile.TemporaryDirectory(prefix='hookmagic-') as tmp:
    path = os.path.join(tmp, 'kineto.json')
    prof.export_chrome_trace(path)
    events = json.load(open(path))['traceEvents']
kernels = [e for e in events if e.get('cat') == 'kernel' and e.get('ph') == 'X']
print(json.dumps({'count': len(kernels), 'ns': sum(e['dur'] for e in kernels) * 1e3}))
"""


def test_lite_kernel_times_match_torch_profiler():
    workloads.gemms(repeats=3)
    with hookmagic.capture(lite=True) as trace:
        workloads.gemms()
    ref = _run_python(KINETO_GEMMS)
    assert len(trace.kernels) == ref["count"]
    ours_ns = float(trace.kernels.duration_ns.sum())
    assert abs(ours_ns - ref["ns"]) / ref["ns"] < 0.02


def test_lite_allocations_match_torch_reserved():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    with hookmagic.capture(lite=True) as trace:
        keep = [torch.empty(n, dtype=torch.uint8, device="cuda")
                for n in (1 << 10, 3 << 20, 50 << 20, 300 << 20)]
        torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved() - before
    mem = trace.memory[trace.memory.memory_kind == "device"]
    assert mem[mem.op == "alloc"].bytes.sum() - mem[mem.op == "free"].bytes.sum() == reserved
    del keep


def test_lite_records_expandable_segments_map_and_unmap():
    torch.cuda.empty_cache()
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    try:
        before = torch.cuda.memory_reserved()
        with hookmagic.capture(lite=True) as trace:
            keep = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
            torch.cuda.synchronize()
        reserved = torch.cuda.memory_reserved() - before
        vmm = trace.memory[trace.memory.source == "vmm"]
        assert vmm[vmm.op == "map"].bytes.sum() - vmm[vmm.op == "unmap"].bytes.sum() == reserved
        assert reserved > 0
        del keep
    finally:
        torch.cuda.empty_cache()
        torch.cuda.memory._set_allocator_settings("expandable_segments:False")


def test_lite_magic_prints_what_it_did_not_record():
    pytest.importorskip("IPython", reason="needs IPython (carry it as a wheel in .whl/)")
    script = """
import json, torch
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic('load_ext', 'hookmagic')
x = torch.zeros(16, device='cuda'); torch.cuda.synchronize()
ip.user_ns.update(x=x, torch=torch)
cell = 'for _ in range(50): x.add_(1)\\ntorch.cuda.synchronize()'
ip.run_cell('%%cudahook --lite --no-report -v t\\n' + cell)
t = ip.user_ns['t']
print(json.dumps([len(t.kernels), t.meta['options']['lite']]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=120, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    kernels, lite = json.loads(out.stdout.strip().splitlines()[-1])
    assert (kernels, lite) == (50, True)
    assert sum(1 for line in out.stdout.splitlines()
               if line.startswith("  ! Lite capture:")) == 1, out.stdout


# -- scheduled windows ----------------------------------------------------------------------
def _step_kernels(step: int) -> int:
    """Kernels step ``step`` launches (distinct per step, so a leaked warm-up step shows)."""
    return 20 + 7 * step


def _one_step(step: int, x, sleep_cycles: int, events: list) -> None:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(sleep_cycles)   # one kernel of known length (CUDA events time it)
    end.record()
    for _ in range(_step_kernels(step) - 1):
        x.add_(1)
    torch.cuda.synchronize()
    events.append(start.elapsed_time(end) * 1e6)   # ns


@pytest.mark.parametrize("options", [{}, {"lite": True}], ids=["defaults", "lite"])
def test_schedule_windows_hold_exactly_their_active_steps(options):
    x = torch.zeros(16, device="cuda")
    sleep_cycles = 2_000_000
    workloads.launch_tiny(10, x)
    plan = hookmagic.schedule(wait=2, warmup=1, active=3, repeat=2)
    event_ns: list[float] = []
    with hookmagic.capture(schedule=plan, **options) as prof:
        for step in range(16):
            _one_step(step, x, sleep_cycles, event_ns)
            prof.step()
    assert len(prof.traces) == 2
    for number, trace in enumerate(prof.traces):
        assert trace.status == "complete", trace.meta.get("reason")
        first = 3 + 6 * number
        active = range(first, first + 3)
        assert trace.meta["schedule"]["first_step"] == first
        # warm-up step first-1 and the wait steps are not in it: counts by construction
        assert len(trace.kernels) == sum(_step_kernels(s) for s in active)
        for step, start_ns, end_ns in trace.meta["steps"]:
            k = trace.kernels
            inside = k[(k.start_ns >= start_ns) & (k.start_ns < end_ns)]
            assert len(inside) == _step_kernels(step)
        sleeps = trace.kernels[trace.kernels.name.str.contains("spin_kernel")]  # _sleep's
        assert len(sleeps) == 3
        # each sleep kernel's GPU time against the CUDA events around it
        for ours, ref in zip(sleeps.sort_values("start_ns").duration_ns,
                             [event_ns[s] for s in active]):
            assert abs(ours - ref) <= 0.05 * ref + 20_000
        assert trace.meta["detached"] is True   # CUPTI let go between windows


SCHEDULE_REFERENCE = """
import json, torch
from torch.profiler import ProfilerActivity, profile, schedule
x = torch.zeros(16, device='cuda')
for _ in range(10): x.add_(1)
torch.cuda.synchronize()
counts = []
def ready(prof):
    counts.append(sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA))
with profile(activities=[ProfilerActivity.CUDA], on_trace_ready=ready,
             schedule=schedule(wait=1, warmup=1, active=2, repeat=3)) as prof:
    for step in range(14):
        for _ in range(20 + 7 * step): x.add_(1)
        torch.cuda.synchronize()
        prof.step()
print(json.dumps(counts))
"""


def test_schedule_windows_match_torch_profilers_windows():
    x = torch.zeros(16, device="cuda")
    workloads.launch_tiny(10, x)
    plan = hookmagic.schedule(wait=1, warmup=1, active=2, repeat=3)
    with hookmagic.capture(schedule=plan, lite=True) as prof:
        for step in range(14):
            for _ in range(_step_kernels(step)):
                x.add_(1)
            torch.cuda.synchronize()
            prof.step()
    ref = _run_python(SCHEDULE_REFERENCE)
    ours = [len(t.kernels) for t in prof.traces]
    assert ours == [sum(_step_kernels(s) for s in (first, first + 1)) for first in (2, 6, 10)]
    assert ours == ref
