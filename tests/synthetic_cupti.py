"""Synthetic CUPTI activity buffers, laid out byte for byte as CUPTI 12.x/13.x lays out its
records (offsets from the CUPTI headers; checked by static_asserts in native/src/session.cpp).

Used to test the native decoder and to benchmark it on machines without a GPU. Every value
here is synthetic.
"""
from __future__ import annotations

import ctypes
import struct

import numpy as np

STRIDE = 256  # larger than any record; the decoder is handed each record's offset


class SyntheticBuffer:
    """Builds a buffer of records; ``kinds`` are CUPTI's activity-kind numbers
    (``hookmagic._native.enum_names()["activity_kind"]``)."""

    def __init__(self, kinds: dict[str, int], capacity: int) -> None:
        self.kinds = kinds
        self.data = bytearray(STRIDE * capacity)
        self.offsets: list[int] = []
        self._names: dict[str, ctypes.Array] = {}  # keeps name strings alive

    def _slot(self, kind: str) -> int:
        offset = len(self.offsets) * STRIDE
        self.offsets.append(offset)
        struct.pack_into("<I", self.data, offset, self.kinds[kind])
        return offset

    def _name_ptr(self, name: str) -> int:
        if name not in self._names:
            self._names[name] = ctypes.create_string_buffer(name.encode())
        return ctypes.addressof(self._names[name])

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
        struct.pack_into("<Q", self.data, o + 104, self._name_ptr(name))
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
