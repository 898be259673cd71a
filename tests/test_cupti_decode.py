"""The native decoder and the table builder, on synthetic CUPTI buffers (no GPU needed).

The buffers are laid out byte for byte like CUPTI's records (tests/synthetic_cupti.py); the
expected values are the ones written into them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.synthetic_cupti import SyntheticBuffer

native = pytest.importorskip("hookmagic._native", reason="native extension not built")

from hookmagic.cupti.columns import build_tables  # noqa: E402
from hookmagic.trace import Trace  # noqa: E402


@pytest.fixture
def enums():
    return native.enum_names()


def _decode(buffer: SyntheticBuffer) -> dict:
    native.take()  # start from empty tables
    native.decode_synthetic(buffer.data, buffer.offsets)
    return native.take()


def test_kernel_fields_and_demangled_names(enums):
    buf = SyntheticBuffer(enums["activity_kind"], 4)
    buf.kernel(start=1_000, end=1_750, name="_Z9my_kernelPfi", correlation=11, device=1,
               context=3, stream=14, grid=(80, 2, 1), block=(256, 1, 1), registers=72,
               static_smem=4096, dynamic_smem=32768, local_mem=16, graph_id=5, graph_node=99)
    buf.kernel(start=2_000, end=2_100, name="plain_c_name", correlation=12)
    raw = _decode(buf)
    k = raw["kernels"]
    assert k["start_ns"].tolist() == [1_000, 2_000]
    assert k["end_ns"].tolist() == [1_750, 2_100]
    assert [raw["strings"][i] for i in k["name"]] == ["my_kernel(float*, int)", "plain_c_name"]
    assert (k["grid_x"][0], k["grid_y"][0], k["block_x"][0]) == (80, 2, 256)
    assert (k["registers"][0], k["static_smem"][0], k["dynamic_smem"][0]) == (72, 4096, 32768)
    assert (k["device"][0], k["context"][0], k["stream"][0]) == (1, 3, 14)
    assert (k["graph_id"][0], k["graph_node"][0], k["local_mem"][0]) == (5, 99, 16)
    assert raw["counters"]["records"] == 2


def test_copies_memsets_memory_and_sync_named(enums):
    memcpy_kind = enums["memcpy_kind"].index("htod")
    pinned, device = enums["memory_kind"].index("pinned"), enums["memory_kind"].index("device")
    buf = SyntheticBuffer(enums["activity_kind"], 8)
    buf.memcpy(start=10, end=1010, nbytes=1 << 20, copy_kind=memcpy_kind, src_kind=pinned,
               dst_kind=device, correlation=21)
    buf.memset(start=20, end=30, nbytes=4096, value=0, memory_kind=device, correlation=22)
    buf.memory(time=5, op=enums["memory_op"].index("alloc"), address=0x7F0000000000,
               nbytes=2 << 20, memory_kind=device, correlation=23, is_async=True)
    buf.memory(time=50, op=enums["memory_op"].index("free"), address=0x7F0000000000,
               nbytes=2 << 20, memory_kind=device, correlation=24)
    buf.sync(start=40, end=45, sync_type=enums["sync_type"].index("stream"), correlation=25)
    tables = build_tables(_decode(buf), enums, pd.DataFrame(), {}, lambda d, c: None)
    trace = Trace(tables, {})
    copy = trace.memcpy.iloc[0]
    assert (copy.kind, copy.src_kind, copy.dst_kind, copy.bytes) == ("htod", "pinned", "device",
                                                                   1 << 20)
    assert copy.duration_ns == 1000
    assert trace.memset.iloc[0].memory_kind == "device"
    assert trace.memory.op.tolist() == ["alloc", "free"]
    assert trace.memory.address.dtype == np.uint64
    assert trace.memory.address.iloc[0] == 0x7F0000000000
    assert trace.memory.is_async.tolist() == [True, False]
    assert trace.sync.type.tolist() == ["stream"]


def test_launch_callbacks_attach_thread_stack_and_range(enums):
    """Stacks, threads and ranges come from the launch callbacks, joined by correlation."""
    buf = SyntheticBuffer(enums["activity_kind"], 3)
    for corr in (31, 32, 33):
        buf.kernel(start=corr * 100, end=corr * 100 + 50, name="k", correlation=corr)
    raw = _decode(buf)
    raw["launches"] = {"correlation": np.array([33, 31], dtype=np.uint32),
                       "thread": np.array([777, 555]), "stack_id": np.array([2, 0], np.int32),
                       "range_id": np.array([9, -1])}
    tables = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)
    k = tables["kernels"].set_index("correlation")
    assert k.loc[31, ["thread", "stack_id", "range_id"]].tolist() == [555, 0, -1]
    assert k.loc[32, ["thread", "stack_id", "range_id"]].tolist() == [-1, -1, -1]
    assert k.loc[33, ["thread", "stack_id", "range_id"]].tolist() == [777, 2, 9]


def test_virtual_memory_rows_take_the_device_of_their_context(enums):
    buf = SyntheticBuffer(enums["activity_kind"], 1)
    buf.kernel(start=1, end=2, name="k", correlation=1, device=2, context=8)
    raw = _decode(buf)
    raw["vmm"] = {"time_ns": np.array([5, 9]), "op": np.array([1, 2], np.uint8),
                  "address": np.array([1 << 40, 1 << 40], np.uint64),
                  "bytes": np.array([1 << 21, 1 << 21]), "context": np.array([8, 8], np.uint32),
                  "correlation": np.array([3, 4], np.uint32), "thread": np.array([1, 1]),
                  "stack_id": np.array([-1, -1], np.int32)}
    memory = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)["memory"]
    assert memory.op.tolist() == ["map", "unmap"]
    assert memory.device.tolist() == [2, 2] and set(memory.source) == {"vmm"}


def test_decoding_is_fast_enough_to_keep_up(enums):
    """Sanity bound only; the measured rate is in benchmarks/bench_decode.py's table."""
    from tests.synthetic_cupti import synthetic_kernel_buffer

    buf = synthetic_kernel_buffer(enums["activity_kind"], 50_000)
    raw = _decode(buf)
    assert len(raw["kernels"]["start_ns"]) == 50_000
    assert raw["counters"]["decode_s"] < 1.0
