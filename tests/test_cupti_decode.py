"""The native decoder and the table builder, on hand-built CUPTI records (no GPU needed).

Records are laid out byte for byte like CUPTI's (tests/synthetic_cupti.py) and pushed through
the real decoder (native/src/decoder.h) by the test extension built from native/testing/; the
expected values are the ones written into them. The decoder must survive any bytes: offsets
outside the buffer are refused, short records and bad name references are counted and
skipped, and name fields are never followed as pointers.
"""
from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest

from tests.synthetic_cupti import STRIDE, SyntheticBuffer, decode

native = pytest.importorskip("hookmagic._native", reason="native extension not built")
decoder = pytest.importorskip("tests.hookmagic_decoder_testing",
                              reason="decoder test extension not built (pip install -e .)")

from hookmagic.cupti.columns import build_tables  # noqa: E402
from hookmagic.trace import Trace  # noqa: E402

# Bytes each kind's decoded fields reach (CUPTI 13.0 headers: offset + size of the last field
# read: kernel graphId @156, memcpy graphId @72, sync cudaEventId @36).
KERNEL_NEEDS, MEMCPY_NEEDS, SYNC_NEEDS = 160, 76, 40


@pytest.fixture
def enums():
    return native.enum_names()


def test_kernel_fields_and_demangled_names(enums):
    buf = SyntheticBuffer(enums["activity_kind"], 4)
    buf.kernel(start=1_000, end=1_750, name="_Z9my_kernelPfi", correlation=11, device=1,
               context=3, stream=14, grid=(80, 2, 1), block=(256, 1, 1), registers=72,
               static_smem=4096, dynamic_smem=32768, local_mem=16, graph_id=5, graph_node=99)
    buf.kernel(start=2_000, end=2_100, name="plain_c_name", correlation=12)
    raw = decode(buf)
    k = raw["kernels"]
    assert k["start_ns"].tolist() == [1_000, 2_000]
    assert k["end_ns"].tolist() == [1_750, 2_100]
    assert [raw["strings"][i] for i in k["name"]] == ["my_kernel(float*, int)", "plain_c_name"]
    assert (k["grid_x"][0], k["grid_y"][0], k["block_x"][0]) == (80, 2, 256)
    assert (k["registers"][0], k["static_smem"][0], k["dynamic_smem"][0]) == (72, 4096, 32768)
    assert (k["device"][0], k["context"][0], k["stream"][0]) == (1, 3, 14)
    assert (k["graph_id"][0], k["graph_node"][0], k["local_mem"][0]) == (5, 99, 16)
    assert raw["counts"]["decoded"] == 2


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
    tables = build_tables(decode(buf), enums, pd.DataFrame(), {}, lambda d, c: None)
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


def test_api_and_marker_records(enums):
    from tests.synthetic_cupti import OBJECT_PROCESS

    flags = enums["marker_flags"]
    buf = SyntheticBuffer(enums["activity_kind"], 4)
    buf.api(kind="runtime", start=5, end=9, cbid=211, correlation=41, thread=77, return_code=0)
    buf.api(kind="driver", start=6, end=8, cbid=307, correlation=42, return_code=2)
    buf.marker(time=100, flags=flags["start"], marker_id=3, name="step", domain="train",
               thread=1234)
    buf.marker(time=200, flags=flags["end"], marker_id=3, name=None,
               object_kind=OBJECT_PROCESS + 7, thread=99)  # neither thread nor process
    raw = decode(buf)
    a = raw["api"]
    assert a["domain"].tolist() == [0, 1]
    assert a["cbid"].tolist() == [211, 307] and a["correlation"].tolist() == [41, 42]
    assert a["thread"][0] == 77 and a["return_code"].tolist() == [0, 2]
    m = raw["markers"]
    assert [raw["strings"][i] for i in m["name"][:1]] == ["step"]
    assert raw["strings"][m["domain"][0]] == "train"
    assert m["name"][1] == -1 and m["domain"][1] == -1
    assert m["thread"].tolist() == [1234, 0]
    assert m["flags"].tolist() == [flags["start"], flags["end"]]


def test_launch_callbacks_attach_thread_stack_and_range(enums):
    """Stacks, threads and ranges come from the launch callbacks, joined by correlation."""
    buf = SyntheticBuffer(enums["activity_kind"], 3)
    for corr in (31, 32, 33):
        buf.kernel(start=corr * 100, end=corr * 100 + 50, name="k", correlation=corr)
    raw = decode(buf)
    raw["launches"] = {"correlation": np.array([33, 31], dtype=np.uint32),
                       "thread": np.array([777, 555]), "stack_id": np.array([2, 0], np.int32),
                       "range_id": np.array([9, -1])}
    tables = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)
    k = tables["kernels"].set_index("correlation")
    assert k.loc[31, ["thread", "stack_id", "range_id"]].tolist() == [555, 0, -1]
    assert k.loc[32, ["thread", "stack_id", "range_id"]].tolist() == [-1, -1, -1]
    assert k.loc[33, ["thread", "stack_id", "range_id"]].tolist() == [777, 2, 9]


def _synthetic_map_unmap() -> dict:
    """The map/unmap callbacks' columns for a 2 MiB map at t=5 and its unmap at t=9, context 8."""
    return {"time_ns": np.array([5, 9]), "op": np.array([1, 2], np.uint8),
            "address": np.array([1 << 40, 1 << 40], np.uint64),
            "bytes": np.array([1 << 21, 1 << 21]), "context": np.array([8, 8], np.uint32),
            "correlation": np.array([3, 4], np.uint32), "thread": np.array([1, 1]),
            "stack_id": np.array([-1, -1], np.int32)}


def test_virtual_memory_rows_take_the_device_of_their_context(enums):
    buf = SyntheticBuffer(enums["activity_kind"], 1)
    buf.kernel(start=1, end=2, name="k", correlation=1, device=2, context=8)
    raw = decode(buf)
    raw["vmm"] = _synthetic_map_unmap()
    memory = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)["memory"]
    assert memory.op.tolist() == ["map", "unmap"]
    assert memory.device.tolist() == [2, 2] and set(memory.source) == {"vmm"}


def test_memory_records_and_virtual_memory_rows_in_one_time_order(enums):
    dev = enums["memory_kind"].index("device")
    buf = SyntheticBuffer(enums["activity_kind"], 2)
    buf.kernel(start=1, end=2, name="k", correlation=1, device=2, context=8)
    buf.memory(time=7, op=enums["memory_op"].index("alloc"), address=0x7F0000000000,
               nbytes=4096, memory_kind=dev, correlation=2, device=2, context=8)
    raw = decode(buf)
    raw["vmm"] = _synthetic_map_unmap()
    memory = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)["memory"]
    assert memory.time_ns.tolist() == [5, 7, 9]
    assert memory.op.tolist() == ["map", "alloc", "unmap"]
    assert memory.source.tolist() == ["vmm", "cupti", "vmm"]
    assert memory.device.tolist() == [2, 2, 2] and memory.bytes.tolist() == [1 << 21, 4096, 1 << 21]


# -- CUDA graphs: replayed work takes the line that captured its node --------------------------
# Synthetic graph-node callback rows (the shape of _native.take()["graph_nodes"]): nodes 11, 12
# and 13 created under stream capture on stacks 3, 4 and 5; instantiation then made nodes 101,
# 102 and 103 (each also reported as created, on the instantiating line's stack 9) cloned from
# them; node 104 is a clone of 14, whose creation the capture did not see. The two replays are
# launched by calls 50 and 51 on stack 8; call 40 launched a kernel directly on stack 2.
CAPTURED, INSTANTIATE_STACK, REPLAY_STACK, DIRECT_STACK = {11: 3, 12: 4, 13: 5}, 9, 8, 2


def _synthetic_graph_nodes(clones_first: bool) -> dict:
    created = [(n, 0, s) for n, s in CAPTURED.items()]
    at_instantiation = [(101, 0, INSTANTIATE_STACK), (102, 0, INSTANTIATE_STACK),
                        (103, 0, INSTANTIATE_STACK), (104, 0, INSTANTIATE_STACK)]
    clones = [(101, 11, -1), (102, 12, -1), (103, 13, -1), (104, 14, -1)]
    rows = created + (clones + at_instantiation if clones_first else at_instantiation + clones)
    node, original, stack = (np.array(c) for c in zip(*rows))
    n = len(rows)
    return {"node": node.astype(np.uint64), "original": original.astype(np.uint64),
            "time_ns": np.arange(n, dtype=np.int64),
            "thread": np.full(n, 555, np.int64), "stack_id": stack.astype(np.int32)}


def _synthetic_memset_node(buf: SyntheticBuffer, graph_id: int, graph_node: int) -> None:
    """Stamps graph and node ids into the buffer's last record, a memset (graphNodeId @64,
    graphId @72 in CUpti_ActivityMemset4)."""
    struct.pack_into("<QI", buf.data, buf.offsets[-1] + 64, graph_node, graph_id)


def _synthetic_replays(enums, clones_first: bool = True) -> dict:
    device = enums["memory_kind"].index("device")
    buf = SyntheticBuffer(enums["activity_kind"], 9)
    buf.kernel(start=10, end=20, name="direct", correlation=40)
    for corr, t0 in ((50, 100), (51, 200)):
        buf.kernel(start=t0, end=t0 + 10, name="exp", correlation=corr, graph_id=7, graph_node=101)
        buf.kernel(start=t0 + 10, end=t0 + 25, name="softmax", correlation=corr, graph_id=7,
                   graph_node=102)
        buf.memset(start=t0 + 25, end=t0 + 27, nbytes=64, value=0, memory_kind=device,
                   correlation=corr)
        _synthetic_memset_node(buf, 7, 103)
        buf.kernel(start=t0 + 27, end=t0 + 30, name="sum", correlation=corr, graph_id=7,
                   graph_node=104)
    raw = decode(buf)
    raw["launches"] = {"correlation": np.array([40, 50, 51], np.uint32),
                       "thread": np.array([555, 555, 555]),
                       "stack_id": np.array([DIRECT_STACK, REPLAY_STACK, REPLAY_STACK], np.int32),
                       "range_id": np.array([-1, -1, -1])}
    raw["graph_nodes"] = _synthetic_graph_nodes(clones_first)
    return raw


@pytest.mark.parametrize("clones_first", [True, False])
def test_replayed_work_takes_the_stack_that_captured_its_node(enums, clones_first):
    raw = _synthetic_replays(enums, clones_first)
    tables = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)
    k = tables["kernels"]
    by_name = {name: rows for name, rows in k.groupby("name")}
    assert by_name["direct"][["stack_id", "launch_stack_id"]].values.tolist() == [[2, 2]]
    assert by_name["exp"]["stack_id"].tolist() == [3, 3]        # node 11's capture line
    assert by_name["softmax"]["stack_id"].tolist() == [4, 4]    # node 12's
    # node 14 was created before the capture: the launch's stack is all there is
    assert by_name["sum"]["stack_id"].tolist() == [REPLAY_STACK] * 2
    assert (k.loc[k.graph_id != 0, "launch_stack_id"] == REPLAY_STACK).all()
    assert k["graph_node"].tolist() == [0, 101, 102, 104, 101, 102, 104]
    memset = tables["memset"]
    assert memset["graph_node"].tolist() == [103, 103] and memset["graph_id"].tolist() == [7, 7]
    assert memset["stack_id"].tolist() == [5, 5] and memset["launch_stack_id"].tolist() == [8, 8]


def test_without_graph_node_rows_every_record_keeps_its_launch_stack(enums):
    raw = _synthetic_replays(enums)
    del raw["graph_nodes"]    # a decoder that hands over no graph-node table
    k = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)["kernels"]
    assert k["stack_id"].tolist() == k["launch_stack_id"].tolist() == [2] + [8] * 6


def test_a_note_counts_replayed_kernels_whose_capture_line_is_unknown(enums):
    from hookmagic.cupti.columns import uncaptured_graph_notes

    raw = _synthetic_replays(enums)
    kernels = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)["kernels"]
    (note,) = uncaptured_graph_notes(kernels)
    assert note.startswith("2 of 6 kernels replayed from CUDA graphs")   # node 14's two
    del raw["graph_nodes"]
    kernels = build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None)["kernels"]
    assert uncaptured_graph_notes(kernels)[0].startswith("6 of 6 ")
    assert uncaptured_graph_notes(kernels[kernels.graph_id == 0]) == []
    assert uncaptured_graph_notes(None) == []


def test_clone_chains_resolve_and_cycles_end_unresolved():
    from hookmagic.cupti.columns import CaptureStacks

    synthetic = {"node": np.array([1, 2, 3, 7, 8, 20]), "original": np.array([0, 1, 2, 8, 7, 0]),
                 "stack_id": np.array([6, -1, -1, -1, -1, -1])}
    captured = CaptureStacks(synthetic)
    # 3 is a clone of 2, a clone of 1 (created on stack 6); 7 and 8 clone each other; node 20
    # was created on a thread without Python frames; 0 is "not a graph node", 99 unknown
    assert captured.of(np.array([3, 2, 1, 7, 8, 20, 0, 99])).tolist() == [6, 6, 6, -1, -1, -1,
                                                                           -1, -1]
    assert CaptureStacks(None).of(np.array([1, 2])).tolist() == [-1, -1]


def _synthetic_graph_stacks() -> dict:
    """Stacks 3, 4, 5: the capture lines 21, 22, 23 of train.py under main(); 8: replay() called
    on train.py line 30 (the torch frame above it is library code); 2: line 12."""
    rows = [(2, 0, "/home/u/train.py", "main", 12)]
    for sid, line in ((3, 21), (4, 22), (5, 23)):
        rows += [(sid, 0, "/home/u/train.py", "main", 40),
                 (sid, 1, "/home/u/train.py", "step", line)]
    rows += [(8, 0, "/home/u/train.py", "main", 30),
             (8, 1, "/usr/lib/python3.11/site-packages/torch/cuda/graphs.py", "replay", 88)]
    sid, depth, filename, function, line = (list(c) for c in zip(*rows))
    return {"stack_id": np.array(sid), "depth": np.array(depth, np.int32), "filename": filename,
            "function": function, "line": np.array(line, np.int32)}


def test_graph_launches_are_one_row_each_with_their_nodes_beneath(enums):
    raw = _synthetic_replays(enums)
    raw["stacks"] = _synthetic_graph_stacks()
    trace = Trace(build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None), {})
    g = trace.graphs()
    assert g["kind"].tolist() == ["launch", "kernel", "kernel", "memset", "kernel"] * 2
    assert g["launch"].tolist() == [0] * 5 + [1] * 5
    launches = g[g.kind == "launch"]
    assert launches["correlation"].tolist() == [50, 51] and launches["nodes"].tolist() == [4, 4]
    assert launches["start_ns"].tolist() == [100, 200] and launches["end_ns"].tolist() == [130, 230]
    assert launches["duration_ns"].tolist() == [30, 30]
    assert launches["gpu_ns"].tolist() == [10 + 15 + 2 + 3] * 2
    assert launches["name"].tolist() == ["graph 7", "graph 7"]
    assert launches[["file", "line", "function"]].values.tolist() == [
        ["/home/u/train.py", 30, "main"]] * 2   # the user's line, not torch's replay()
    nodes = g[(g.kind != "launch") & (g.launch == 0)]
    assert nodes["name"].tolist() == ["exp", "softmax", "memset", "sum"]
    assert nodes["graph_node"].tolist() == [101, 102, 103, 104]
    assert nodes["line"].tolist() == [21, 22, 23, 30]   # capture lines; node 14's is unknown
    assert nodes["nodes"].tolist() == [0] * 4
    assert int(g.loc[g.kind != "launch", "gpu_ns"].sum()) == int(launches["gpu_ns"].sum())


def test_lines_and_flame_name_the_capture_lines(enums):
    from hookmagic.analysis.flame import flame_tree

    raw = _synthetic_replays(enums)
    raw["stacks"] = _synthetic_graph_stacks()
    trace = Trace(build_tables(raw, enums, pd.DataFrame(), {}, lambda d, c: None), {})
    lines = trace.lines().set_index("line")
    assert lines.loc[21, "launches"] == 2 and lines.loc[21, "kernels"] == "exp ×2"
    assert lines.loc[22, "launches"] == 2 and lines.loc[12, "launches"] == 1
    assert lines.loc[30, "launches"] == 2   # node 14's kernels: only their replay line is known
    nodes = flame_tree(trace, weight="launches").set_index("id")
    leaf = nodes[nodes["label"] == "exp"].iloc[0]
    assert nodes.loc[leaf["parent"], "file_line"] == "/home/u/train.py:21" and leaf["value"] == 2


def test_a_trace_without_graph_launches_has_an_empty_graphs_table(enums):
    buf = SyntheticBuffer(enums["activity_kind"], 1)
    buf.kernel(start=1, end=2, name="k", correlation=1)
    trace = Trace(build_tables(decode(buf), enums, pd.DataFrame(), {}, lambda d, c: None), {})
    g = trace.graphs()
    assert len(g) == 0 and list(g.columns) == list(Trace().graphs().columns)
    assert "launch" in g.columns and "line" in g.columns


def test_tables_from_before_capture_lines_take_the_launch_stack(enums):
    """An older recording's kernels, copies and memsets have no launch_stack_id nor (copies,
    memsets) graph_node: the stack they have was the launch's; nothing came from a graph node."""
    old = {"start_ns": [1, 5], "end_ns": [2, 9], "duration_ns": [1, 4], "correlation": [3, 4],
           "stack_id": [6, -1]}
    trace = Trace({"kernels": pd.DataFrame({**old, "name": ["a", "b"]}),
                   "memcpy": pd.DataFrame(old), "memset": pd.DataFrame(old)}, {})
    for table in (trace.kernels, trace.memcpy, trace.memset):
        assert table["launch_stack_id"].tolist() == [6, -1]
        assert table["graph_node"].tolist() == [0, 0]


def test_many_records_with_repeated_names(enums):
    """The benchmark's buffer (50 names over 50,000 records): every record decoded, each
    distinct name interned once."""
    from tests.synthetic_cupti import synthetic_kernel_buffer

    buf = synthetic_kernel_buffer(enums["activity_kind"], 50_000, names=50)
    raw = decode(buf)
    assert len(raw["kernels"]["start_ns"]) == 50_000
    assert len(raw["strings"]) == 50
    assert raw["kernels"]["correlation"].tolist() == list(range(1, 50_001))


# -- hostile bytes -----------------------------------------------------------------------------
@pytest.mark.parametrize("offset", [2**64 - 1, 2**64 - 8, 2**63, STRIDE, STRIDE - 3])
def test_offsets_outside_the_buffer_are_refused(enums, offset):
    buf = SyntheticBuffer(enums["activity_kind"], 1)
    buf.kernel(start=1, end=2, name="k", correlation=1)
    with pytest.raises(ValueError, match="leaves no record header"):
        decoder.decode(buf.data, [0, offset], buf.names)


def test_records_shorter_than_their_fields_are_skipped(enums):
    kinds = enums["activity_kind"]
    full = SyntheticBuffer(kinds, 2)
    full.kernel(start=1, end=2, name="k", correlation=1)
    full.sync(start=3, end=4, sync_type=1, correlation=2)
    kernel_bytes = bytes(full.data[:KERNEL_NEEDS])
    sync_bytes = bytes(full.data[STRIDE:STRIDE + SYNC_NEEDS])
    for cut in (4, KERNEL_NEEDS - 1):
        raw = decoder.decode(kernel_bytes[:cut], [0], full.names)
        assert raw["counts"]["too_short"] == 1 and len(raw["kernels"]["start_ns"]) == 0
    assert decoder.decode(kernel_bytes, [0], full.names)["counts"]["decoded"] == 1
    assert decoder.decode(sync_bytes, [0], [])["counts"]["decoded"] == 1
    assert decoder.decode(sync_bytes[:SYNC_NEEDS - 1], [0], [])["counts"]["too_short"] == 1


def test_name_fields_are_indices_never_pointers(enums):
    """A name field holding an address (as CUPTI's would) or an index past the list is a bad
    reference: the record is skipped, nothing is read through it."""
    buf = SyntheticBuffer(enums["activity_kind"], 3)
    buf.kernel(start=1, end=2, name="good", correlation=1)
    buf.kernel(start=3, end=4, name="x", correlation=2)
    buf.kernel(start=5, end=6, name="y", correlation=3)
    struct.pack_into("<Q", buf.data, STRIDE + 104, 0x7F00DEADBEEF)   # an address
    struct.pack_into("<Q", buf.data, 2 * STRIDE + 104, 2**64 - 1)    # far past the list
    raw = decode(buf)
    assert raw["counts"] == {**raw["counts"], "decoded": 1, "bad_string": 2}
    assert raw["kernels"]["correlation"].tolist() == [1]
    assert raw["strings"] == ["good"]


def test_misaligned_records_and_unknown_kinds(enums):
    kinds = enums["activity_kind"]
    aligned = SyntheticBuffer(kinds, 1)
    aligned.memcpy(start=7, end=9, nbytes=3, copy_kind=1, src_kind=1, dst_kind=3, correlation=5)
    data = bytearray(1) + bytes(aligned.data[:MEMCPY_NEEDS]) + struct.pack("<I", 0xFFFFFFF0)
    raw = decoder.decode(data, [1, 1 + MEMCPY_NEEDS], [])
    assert raw["memcpy"]["start_ns"].tolist() == [7] and raw["memcpy"]["bytes"].tolist() == [3]
    assert raw["counts"]["skipped"] == 1


def test_random_bytes_never_crash_the_decoder(enums):
    """Synthetic random buffers with every record kind stamped at random offsets: every
    record is counted exactly once, under one of the four outcomes."""
    rng = np.random.default_rng(7)
    kind_ids = np.array(sorted(enums["activity_kind"].values()) + [0, 999], dtype=np.uint32)
    for size in (4, 64, 300, 4096):
        data = bytearray(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        offsets = sorted(rng.integers(0, size - 3, 40).tolist())
        for off in offsets:
            struct.pack_into("<I", data, off, int(rng.choice(kind_ids)))
        raw = decoder.decode(data, offsets, ["a", "_Z1fv"])
        assert sum(v for k, v in raw["counts"].items() if k != "decode_s") == len(offsets)
