"""Synthetic CUPTI activity buffers, laid out byte for byte as CUPTI 12.x/13.x lays out its
records (offsets from the CUPTI headers; checked by static_asserts in native/src/decoder.h).

Used to test the native decoder and to benchmark it on machines without a GPU, through the
test extension built from native/testing/ (``tests/hookmagic_decoder_testing``). Where CUPTI
puts a pointer to a name, these records hold a 1-based index into :attr:`SyntheticBuffer.names`
(0: no name): the test decoder never follows pointers from caller bytes. Every value here is
synthetic.
"""
from __future__ import annotations

import struct

import numpy as np

STRIDE = 256  # larger than any record; the decoder is handed each record's offset
# CUpti_ActivityObjectKind (cupti_activity.h): the marker's objectId holds a process/thread.
OBJECT_PROCESS, OBJECT_THREAD = 1, 2


class SyntheticBuffer:
    """Builds a buffer of records; ``kinds`` are CUPTI's activity-kind numbers
    (``hookmagic._native.enum_names()["activity_kind"]``)."""

    def __init__(self, kinds: dict[str, int], capacity: int) -> None:
        self.kinds = kinds
        self.data = bytearray(STRIDE * capacity)
        self.offsets: list[int] = []
        self.names: list[str] = []          # what name fields refer to (1-based)
        self._name_index: dict[str, int] = {}

    def _slot(self, kind: str) -> int:
        offset = len(self.offsets) * STRIDE
        self.offsets.append(offset)
        struct.pack_into("<I", self.data, offset, self.kinds[kind])
        return offset

    def _name_ref(self, name: str) -> int:
        if name not in self._name_index:
            self.names.append(name)
            self._name_index[name] = len(self.names)
        return self._name_index[name]

    def kernel(self, *, start: int, end: int, name: str, correlation: int, device: int = 0,
               context: int = 1, stream: int = 7, grid=(1, 1, 1), block=(128, 1, 1),
               registers: int = 32, static_smem: int = 0, dynamic_smem: int = 0,
               local_mem: int = 0, graph_id: int = 0, graph_node: int = 0) -> None:
        o = self._slot("concurrent_kernel")
        struct.pack_into("<H", self.data, o + 6, registers)
        struct.pack_into("<QQ", self.data, o + 16, start, end)
        struct.pack_into("<III", self.data, o + 40, device, context, stream)
        struct.pack_into("<iiiiii", self.data, o + 52, *grid, *block)
        struct.pack_into("<iii", self.data, o + 76, static_smem, dynamic_smem, local_mem)
        struct.pack_into("<I", self.data, o + 92, correlation)
        struct.pack_into("<Q", self.data, o + 104, self._name_ref(name))
        struct.pack_into("<Q", self.data, o + 144, graph_node)
        struct.pack_into("<I", self.data, o + 156, graph_id)

    def memcpy(self, *, start: int, end: int, nbytes: int, copy_kind: int, src_kind: int,
               dst_kind: int, correlation: int, device: int = 0, context: int = 1,
               stream: int = 7, graph_id: int = 0) -> None:
        o = self._slot("memcpy")
        struct.pack_into("<BBB", self.data, o + 4, copy_kind, src_kind, dst_kind)
        struct.pack_into("<QQQ", self.data, o + 8, nbytes, start, end)
        struct.pack_into("<IIII", self.data, o + 32, device, context, stream, correlation)
        struct.pack_into("<I", self.data, o + 72, graph_id)

    def memset(self, *, start: int, end: int, nbytes: int, value: int, memory_kind: int,
               correlation: int, device: int = 0, context: int = 1, stream: int = 7) -> None:
        o = self._slot("memset")
        struct.pack_into("<I", self.data, o + 4, value)
        struct.pack_into("<QQQ", self.data, o + 8, nbytes, start, end)
        struct.pack_into("<IIII", self.data, o + 32, device, context, stream, correlation)
        struct.pack_into("<H", self.data, o + 50, memory_kind)

    def memory(self, *, time: int, op: int, address: int, nbytes: int, memory_kind: int,
               correlation: int, device: int = 0, context: int = 1, stream: int = 0,
               is_async: bool = False) -> None:
        o = self._slot("memory2")
        struct.pack_into("<III", self.data, o + 4, op, memory_kind, correlation)
        struct.pack_into("<QQQ", self.data, o + 16, address, nbytes, time)
        struct.pack_into("<III", self.data, o + 52, device, context, stream)
        struct.pack_into("<I", self.data, o + 72, int(is_async))

    def sync(self, *, start: int, end: int, sync_type: int, correlation: int, context: int = 1,
             stream: int = 7, event: int = 0) -> None:
        o = self._slot("synchronization")
        struct.pack_into("<I", self.data, o + 4, sync_type)
        struct.pack_into("<QQ", self.data, o + 8, start, end)
        struct.pack_into("<IIII", self.data, o + 24, correlation, context, stream, event)


    def api(self, *, kind: str, start: int, end: int, cbid: int, correlation: int,
            process: int = 1, thread: int = 2, return_code: int = 0) -> None:
        """A RUNTIME or DRIVER record (``kind`` "runtime" or "driver")."""
        o = self._slot(kind)
        struct.pack_into("<I", self.data, o + 4, cbid)
        struct.pack_into("<QQ", self.data, o + 8, start, end)
        struct.pack_into("<IIII", self.data, o + 24, process, thread, correlation, return_code)

    def marker(self, *, time: int, flags: int, marker_id: int, name: str | None,
               domain: str | None = None, object_kind: int = OBJECT_THREAD,
               thread: int = 0) -> None:
        o = self._slot("marker")
        struct.pack_into("<I", self.data, o + 4, flags)
        struct.pack_into("<Q", self.data, o + 8, time)
        struct.pack_into("<II", self.data, o + 16, marker_id, object_kind)
        struct.pack_into("<I", self.data, o + 28, thread)  # objectId.pt.threadId
        struct.pack_into("<QQ", self.data, o + 40, self._name_ref(name) if name else 0,
                         self._name_ref(domain) if domain else 0)

    def raw(self, offset: int, payload: bytes) -> None:
        """Hand-written bytes at ``offset`` (a record of any shape), listed as a record."""
        self.data[offset:offset + len(payload)] = payload
        self.offsets.append(offset)


def decode(buffer: SyntheticBuffer) -> dict:
    """Push ``buffer``'s records through the real native decoder (the test extension); the
    result has the shape of ``hookmagic._native.take()`` (no callbacks, so no launches,
    map/unmap rows or stacks)."""
    from tests import hookmagic_decoder_testing as decoder

    raw = decoder.decode(buffer.data, buffer.offsets, buffer.names)
    raw["stacks"] = {"stack_id": np.zeros(0, np.int64), "depth": np.zeros(0, np.int32),
                     "filename": [], "function": [], "line": np.zeros(0, np.int32)}
    return raw


def synthetic_kernel_buffer(kinds: dict[str, int], count: int, names: int = 50,
                            seed: int = 0) -> SyntheticBuffer:
    """``count`` synthetic kernel records with ``names`` distinct names (for the decoder's
    speed benchmark)."""
    rng = np.random.default_rng(seed)
    buf = SyntheticBuffer(kinds, count)
    starts = np.cumsum(rng.integers(1_000, 5_000, count))
    for i in range(count):
        buf.kernel(start=int(starts[i]), end=int(starts[i]) + 900, correlation=i + 1,
                   name=f"_Z6kernelILi{i % names}EEvPf")
    return buf
