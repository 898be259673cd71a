"""The native session's parts on a real GPU: synchronisation recorded from
the API callbacks against CUPTI's own SYNCHRONIZATION records in the same capture; options
reaching the native struct; --no-stacks reaching the allocator recorders."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import hookmagic

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

# CUpti_ActivitySynchronizationType (cupti_activity.h)
EVENT, STREAM_WAIT_EVENT, STREAM, CONTEXT = 1, 2, 3, 4


def _known_syncs(rounds: int = 5) -> dict[int, int]:
    """A workload whose synchronising calls are known: per round one device synchronize, one
    stream synchronize, one event synchronize and one stream wait event."""
    x = torch.zeros(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    for _ in range(rounds):
        x.add_(1)
        torch.cuda.synchronize()                      # cudaDeviceSynchronize
        with torch.cuda.stream(side):
            x.mul_(1.0)
        side.synchronize()                            # cudaStreamSynchronize
        done = torch.cuda.Event()
        done.record()
        done.synchronize()                            # cudaEventSynchronize
        torch.cuda.current_stream().wait_event(done)  # cudaStreamWaitEvent
    torch.cuda.synchronize()
    return {CONTEXT: rounds + 1, STREAM: rounds, EVENT: rounds, STREAM_WAIT_EVENT: rounds}


def test_callback_syncs_match_the_activity_records():
    """Both sources in one capture: CUPTI's SYNCHRONIZATION records and the callbacks' rows
    must list the same synchronising calls with times a few microseconds apart."""
    from benchmarks.native_probe import probe_start
    from hookmagic.cupti.session import _prepare_native

    native, why = _prepare_native()
    assert native is not None, why
    kinds = native.enum_names()["activity_kind"]
    _known_syncs(1)  # warm up
    probe_start(native, activity_kinds=[kinds["concurrent_kernel"], kinds["synchronization"]],
                memory=False, stacks=False, sync_from_callbacks=True)
    try:
        expected = _known_syncs()
    finally:
        native.stop()
    raw = native.take()
    n_cb = int(raw["counters"]["sync_callback_rows"])
    sync = {k: np.asarray(v) for k, v in raw["sync"].items()}
    total = len(sync["start_ns"])
    act = {k: v[:total - n_cb] for k, v in sync.items()}
    cb = {k: v[total - n_cb:] for k, v in sync.items()}
    report = {"activity_rows": int(total - n_cb), "callback_rows": n_cb}
    for t, n in expected.items():
        a_start, c_start = np.sort(act["start_ns"][act["type"] == t]), np.sort(cb["start_ns"][cb["type"] == t])
        a_end, c_end = np.sort(act["end_ns"][act["type"] == t]), np.sort(cb["end_ns"][cb["type"] == t])
        entry = report[f"type{t}"] = {"expected_at_least": n, "activity": len(a_start),
                                      "callbacks": len(c_start)}
        if len(a_start) and len(a_start) == len(c_start):
            entry["max_start_diff_us"] = float(np.abs(a_start - c_start).max() / 1e3)
            entry["max_end_diff_us"] = float(np.abs(a_end - c_end).max() / 1e3)
    report["stream_ids"] = {
        "activity": sorted(int(v) for v in set(act["stream"][act["type"] == STREAM])),
        "callbacks": sorted(int(v) for v in set(cb["stream"][cb["type"] == STREAM]))}
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sync_callbacks_vs_activity.json"), "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps(report))
    for t, n in expected.items():
        entry = report[f"type{t}"]
        assert entry["callbacks"] == entry["activity"] >= n, report
        assert entry["max_start_diff_us"] < 20 and entry["max_end_diff_us"] < 20, report
    # the stream of a stream synchronize is the stream's id, as in the activity records
    assert report["stream_ids"]["activity"] == report["stream_ids"]["callbacks"], report


def test_default_capture_records_syncs_with_their_thread_and_stack():
    expected = None
    with hookmagic.capture() as trace:
        expected = _known_syncs(3)
    s = trace.sync
    counts = s.type.value_counts().to_dict()
    assert counts.get("context", 0) >= expected[CONTEXT] and counts.get("stream", 0) >= 3
    assert counts.get("event", 0) >= 3 and counts.get("stream_wait_event", 0) >= 3
    assert (s.thread > 0).all()
    assert trace.meta["options"]["sync_from_callbacks"] is True


def test_no_stacks_reaches_the_allocator_recorders():
    x = torch.zeros(16, device="cuda")
    with hookmagic.capture(stacks=False, allocator_history=True) as trace:
        y = torch.empty(1 << 20, device="cuda")
        x.add_(1)
        del y
        torch.cuda.synchronize()
    events = trace.allocator_events
    assert len(events) > 0
    assert (events.stack_id == -1).all()
    assert (trace.kernels.stack_id == -1).all()


def test_summary_says_stacks_were_missing_after_torch_profiler():
    """After torch.profiler ran in the process, the next capture's printed summary says in one
    line what it could not record (it used to be only in meta["warnings"])."""
    import subprocess
    import sys
    from pathlib import Path

    script = """
import torch, hookmagic
from torch.profiler import ProfilerActivity, profile
from hookmagic.views.summary import summary_text
x = torch.zeros(16, device='cuda')
with profile(activities=[ProfilerActivity.CUDA]):
    x.add_(1); torch.cuda.synchronize()
with hookmagic.capture() as t:
    x.add_(1); torch.cuda.synchronize()
print(summary_text(t.summary()))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=str(Path(__file__).parents[2]))
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stdout.splitlines() if line.startswith("  ! ")]
    assert t_notes_ok(notes), out.stdout


def t_notes_ok(notes: list[str]) -> bool:
    return any("not recorded" in n or "no Python stack" in n for n in notes)


def test_backward_kernels_carry_the_stack_that_called_backward():
    """A TransformerEncoderLayer fp16 training step: kernels from autograd's engine thread are
    attributed to the line that called backward() and sit in the "backward" range."""
    import threading

    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True).cuda().half()
    x = torch.randn(8, 128, 512, device="cuda", dtype=torch.half)

    def step():
        loss = layer(x).float().square().mean()
        loss.backward()  # the line backward kernels must point at
        torch.cuda.synchronize()

    step()  # warm up
    with hookmagic.capture() as trace:
        step()
    k = trace.kernels
    main = threading.get_native_id()
    engine = k[k.thread != main]
    attributed = float((k.stack_id >= 0).mean())
    report = {"kernels": len(k), "engine_thread_kernels": len(engine),
              "with_stack": attributed, "backward_attributed": trace.meta["backward_attributed"]}
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "backward_attribution.json"), "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps(report))
    assert len(engine) > 0, report
    assert attributed >= 0.99, report
    leaf = trace.stacks[trace.stacks.stack_id == engine.stack_id.iloc[0]]
    # co_qualname on Python >= 3.11 ("...<locals>.step"), co_name on 3.10
    callers = leaf[leaf.function.str.split(".").str[-1] == "step"]
    assert len(callers) and step.__code__.co_firstlineno + 2 in callers.line.tolist(), leaf
    names = trace.ranges.set_index("range_id").name
    in_ranges = set(names.reindex(engine.range_id).dropna())
    assert in_ranges and all(n.startswith("backward") for n in in_ranges), in_ranges
    report["backward_ranges"] = sorted(in_ranges)[:40]
    report["engine_kernels_by_range"] = names.reindex(engine.range_id).fillna("?").value_counts().to_dict()
    if out:
        with open(os.path.join(out, "backward_attribution.json"), "w") as f:
            json.dump(report, f, indent=1)
    assert any(n.startswith("backward of ") for n in in_ranges), in_ranges
    # "backward of <module/op>": nodes of a module's parameters by that module, as
    # named_modules() names it (the layer is found among this function's locals), others by op
    assert {"backward of linear1 (Linear)", "backward of norm1 (LayerNorm)"} <= in_ranges, in_ranges
    assert any("(" not in n for n in in_ranges if n.startswith("backward of ")), in_ranges
    backward_frames = set(trace.stacks.function[trace.stacks.stack_id.isin(engine.stack_id)])
    assert any(f.startswith("backward of ") for f in backward_frames)
    # the forward's kernels name the layer's modules (found among this function's locals)
    forward_frames = set(trace.stacks.function[trace.stacks.stack_id.isin(k[k.thread == main].stack_id)])
    assert "TransformerEncoderLayer" in forward_frames and "linear1 (Linear)" in forward_frames, \
        sorted(forward_frames)[:40]
    assert not hasattr(torch.autograd.backward, "__hookmagic_original__")  # unwrapped after


def test_stacks_name_the_modules_as_named_modules_does():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(64, 8))).cuda()
    x = torch.randn(32, 64, device="cuda")
    model(x)
    torch.cuda.synchronize()
    from torch.nn.modules import module as module_mod

    with hookmagic.capture() as trace:
        # no global module hook: torch keeps its fast call path (+0.85x on ResNet-50)
        global_hooks = (len(module_mod._global_forward_pre_hooks), len(module_mod._global_forward_hooks))
        model(x)
        torch.cuda.synchronize()
    assert global_hooks == (0, 0)
    from hookmagic.cupti.modules import MODULE_FILE

    expected = {f"{n} ({type(m).__name__})" for n, m in model.named_modules() if n}
    expected.add(type(model).__name__)
    named = set(trace.stacks.function[trace.stacks.filename == MODULE_FILE])
    assert named and named <= expected, (named, expected)
    assert "2.0 (Linear)" in named
    assert trace.meta["module_kernels"] >= 2
    kernel_frames = set(trace.stacks.function[trace.stacks.stack_id.isin(trace.kernels.stack_id)])
    assert "Module._call_impl" not in kernel_frames and "_call_impl" not in kernel_frames
    with hookmagic.capture(module_names=False) as raw:
        model(x)
        torch.cuda.synchronize()
    assert {"Module._call_impl", "_call_impl"} & set(raw.stacks.function)


def test_resnet_stacks_name_modules_without_global_hooks():
    """A torchvision ResNet-18: every kernel's module frames are named_modules() names (none
    left as Module._call_impl), read by the stack walker, not by global hooks."""
    torchvision = pytest.importorskip("torchvision", reason="needs torchvision")
    model = torchvision.models.resnet18().cuda().half().eval()
    x = torch.randn(4, 3, 224, 224, device="cuda", dtype=torch.half)
    with torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        with hookmagic.capture() as trace:
            model(x)
            torch.cuda.synchronize()
    from hookmagic.cupti.modules import MODULE_FILE

    expected = {f"{n} ({type(m).__name__})" for n, m in model.named_modules() if n} | {"ResNet"}
    kernel_stacks = trace.stacks[trace.stacks.stack_id.isin(trace.kernels.stack_id)]
    named = set(kernel_stacks.function[kernel_stacks.filename == MODULE_FILE])
    assert named <= expected, sorted(named - expected)
    assert {"layer1.0.conv1 (Conv2d)", "fc (Linear)"} <= named, sorted(named)
    assert not {"Module._call_impl", "Module._wrapped_call_impl"} & set(kernel_stacks.function)
    assert trace.meta["module_kernels"] >= 0.95 * len(trace.kernels)


def test_devices_carry_the_uuid_nvidia_smi_prints():
    """Each device's UUID (cuDeviceGetUuid) as NVML/nvidia-smi print it: ranks' GPUs are told
    apart by it across processes."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not on PATH: no independent reference")
    torch.zeros(1, device="cuda")
    with hookmagic.capture() as trace:
        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    expected = {int(i): u.strip() for i, u in (line.split(",") for line in smi.splitlines() if line)}
    got = {d["index"]: d.get("uuid") for d in trace.meta["devices"]}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:  # CUDA's ordinals are then a subset, renumbered: compare as sets
        assert set(got.values()) <= set(expected.values())
    else:
        assert got == expected
