"""Allocator models for what-if replay.

- :class:`BestFitModel`: an ideal heap — exact sizes (512 B aligned), best fit over all holes,
  neighbours coalesce, the heap top grows and shrinks with use. No allocator that cannot move
  memory does much better; it is the yardstick.
- :class:`~hookmagic.memory.torch_model.TorchCachingModel`: PyTorch's caching allocator, with
  any :class:`~hookmagic.memory.torch_model.TorchConfig` (expandable segments included).
- :class:`CupyPoolModel`: CuPy's default memory pool (``cupy.cuda.MemoryPool``).

Every model logs allocator events (``allocator_events`` in :mod:`hookmagic.trace.schema`), so
its replay can be measured and drawn like a capture.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from hookmagic.memory.linked import absorb_next, link_after
from hookmagic.memory.model_base import MODEL_VA_BASE, InvalidFree, ModelBase, OutOfMemory
from hookmagic.memory.torch_model import TorchCachingModel, TorchConfig

__all__ = ["BestFitModel", "CupyPoolModel", "TorchCachingModel", "TorchConfig", "OutOfMemory",
           "InvalidFree", "ModelBase", "standard_models"]

ALIGN = 512


def _align(size: int) -> int:
    return max(ALIGN, (size + ALIGN - 1) // ALIGN * ALIGN)


class BestFitModel(ModelBase):
    """Ideal best-fit heap: one growing address range, exact (512 B aligned) blocks."""

    name = "best-fit (ideal heap)"

    def __init__(self, capacity: int | None = None) -> None:
        super().__init__(capacity)
        self.base = self.top = MODEL_VA_BASE
        self._holes: list[tuple[int, int]] = []      # (size, addr), sorted
        self._hole_at: dict[int, int] = {}           # start -> size
        self._hole_end: dict[int, int] = {}          # end -> start
        self._live: dict[int, tuple[int, int]] = {}  # addr -> (size, requested)

    def _add_hole(self, addr: int, size: int) -> None:
        insort(self._holes, (size, addr))
        self._hole_at[addr] = size
        self._hole_end[addr + size] = addr

    def _drop_hole(self, addr: int) -> int:
        size = self._hole_at.pop(addr)
        del self._hole_end[addr + size]
        del self._holes[bisect_left(self._holes, (size, addr))]
        return size

    def malloc(self, size: int, stream: int = 0) -> int:
        requested, size = size, _align(size)
        i = bisect_left(self._holes, (size, -1))
        if i < len(self._holes):
            hsize, addr = self._holes[i]
            self._drop_hole(addr)
            if hsize > size:
                self._add_hole(addr + size, hsize - size)
        else:
            # grow the heap, reusing a hole that touches the top
            addr = self._hole_end.get(self.top, self.top)
            if addr != self.top:
                self._drop_hole(addr)
            grow = addr + size - self.top
            if not self.fits(grow):
                self._emit("oom", 0, grow, requested, self.base, stream, "")
                if addr != self.top:
                    self._add_hole(addr, self.top - addr)
                raise OutOfMemory(f"{self.name}: cannot allocate {requested} bytes")
            self._emit("segment_map", self.top, grow, grow, self.base, stream, "")
            self.top += grow
        self._live[addr] = (size, requested)
        self._emit("alloc", addr, size, requested, self.base, stream, "")
        return addr

    def free(self, address: int) -> None:
        if address not in self._live:
            raise InvalidFree(f"{self.name}: free of {address:#x}, which is not allocated")
        size, requested = self._live.pop(address)
        self._emit("free_requested", address, size, requested, self.base, 0, "")
        self._emit("free_completed", address, size, requested, self.base, 0, "")
        start, end = address, address + size
        if end in self._hole_at:
            end += self._drop_hole(end)
        if start in self._hole_end:
            start = self._hole_end[start]
            self._drop_hole(start)
        if end == self.top:
            # the ideal heap gives its top back at once
            self._emit("segment_unmap", start, end - start, end - start, self.base, 0, "")
            self.top = start
        else:
            self._add_hole(start, end - start)


class _Chunk:
    __slots__ = ("addr", "size", "requested", "stream", "prev", "next", "allocated", "segment")

    def __init__(self, addr: int, size: int, stream: int, segment: int) -> None:
        self.addr, self.size, self.stream, self.segment = addr, size, stream, segment
        self.requested = 0
        self.prev: _Chunk | None = None
        self.next: _Chunk | None = None
        self.allocated = False


class CupyPoolModel(ModelBase):
    """CuPy's ``MemoryPool``: 512 B bins per stream, exact-size device allocations on a miss.

    Rules (from CuPy's documentation and ``cupy/cuda/memory.pyx`` behaviour): sizes round up to
    512 B; each stream has an arena of free chunks binned by size; a request takes a chunk from
    the smallest non-empty bin that fits and splits off the rest; a miss allocates exactly the
    rounded size from the device; freed chunks merge with free neighbours of the same device
    allocation; nothing is released until an allocation fails, then every whole free chunk of
    the stream is freed and the allocation retried. Within one bin the most recently freed
    chunk is taken (an assumption: CuPy does not document the order).
    """

    name = "cupy pool"

    def __init__(self, capacity: int | None = None) -> None:
        super().__init__(capacity)
        self._bins: dict[int, dict[int, list[int]]] = {}    # stream -> bin index -> addrs
        self._index: dict[int, list[int]] = {}              # stream -> sorted non-empty bins
        self._chunks: dict[int, _Chunk] = {}
        self._next_va = MODEL_VA_BASE

    def _push(self, c: _Chunk) -> None:
        bins = self._bins.setdefault(c.stream, {})
        k = c.size // ALIGN - 1
        lst = bins.get(k)
        if not lst:
            bins[k] = lst = []
            insort(self._index.setdefault(c.stream, []), k)
        lst.append(c.addr)

    def _remove(self, c: _Chunk) -> None:
        k = c.size // ALIGN - 1
        lst = self._bins[c.stream][k]
        lst.remove(c.addr)
        if not lst:
            idx = self._index[c.stream]
            del idx[bisect_left(idx, k)]

    def malloc(self, size: int, stream: int = 0) -> int:
        requested, size = size, _align(size)
        idx = self._index.get(stream, [])
        i = bisect_left(idx, size // ALIGN - 1)
        if i < len(idx):
            c = self._chunks[self._bins[stream][idx[i]][-1]]
            self._remove(c)
            if c.size > size:
                r = _Chunk(c.addr + size, c.size - size, stream, c.segment)
                link_after(c, r, self._chunks)
                self._push(r)
        else:
            if not self.fits(size):
                self.free_all_blocks(stream)
            if not self.fits(size):
                self._emit("oom", 0, size, requested, 0, stream, "")
                raise OutOfMemory(f"{self.name}: cannot allocate {requested} bytes")
            addr = self._next_va
            self._next_va += (size + (2 << 20) - 1) // (2 << 20) * (2 << 20)
            c = _Chunk(addr, size, stream, addr)
            self._chunks[addr] = c
            self._emit("segment_alloc", addr, size, size, addr, stream, "")
        c.allocated, c.requested = True, requested
        self._emit("alloc", c.addr, c.size, requested, c.segment, stream, "")
        return c.addr

    def free(self, address: int) -> None:
        c = self._chunks.get(address)
        if c is None or not c.allocated:
            raise InvalidFree(f"{self.name}: free of {address:#x}, which is not allocated")
        c.allocated = False
        self._emit("free_requested", c.addr, c.size, c.requested, c.segment, c.stream, "")
        self._emit("free_completed", c.addr, c.size, c.requested, c.segment, c.stream, "")
        p = c.prev
        if p is not None and not p.allocated:
            self._remove(p)
            absorb_next(p, self._chunks)
            c = p
        n = c.next
        if n is not None and not n.allocated:
            self._remove(n)
            absorb_next(c, self._chunks)
        self._push(c)

    def free_all_blocks(self, stream: int | None = None) -> None:
        """``MemoryPool.free_all_blocks``: release whole free device allocations."""
        for st in ([stream] if stream is not None else list(self._bins)):
            for k, addrs in list(self._bins.get(st, {}).items()):
                for addr in list(addrs):
                    c = self._chunks[addr]
                    if c.prev is None and c.next is None:
                        self._remove(c)
                        del self._chunks[addr]
                        self._emit("segment_free", addr, c.size, c.size, addr, st, "")

    def empty_cache(self) -> None:
        self.free_all_blocks()


def standard_models(capacity: int | None = None) -> dict[str, ModelBase]:
    """The what-if line-up: ideal heap, PyTorch defaults and the settings worth trying, CuPy."""
    torch_confs = [
        TorchConfig(),
        TorchConfig(expandable_segments=True),
        TorchConfig(max_split_size_mb=64),
        TorchConfig(max_split_size_mb=256),
        TorchConfig(roundup_power2_divisions=4),
    ]
    models: dict[str, ModelBase] = {"best-fit": BestFitModel(capacity)}
    for conf in torch_confs:
        m = TorchCachingModel(conf, capacity)
        models[m.name] = m
    models["cupy"] = CupyPoolModel(capacity)
    return models
