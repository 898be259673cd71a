"""A model of PyTorch's CUDA caching allocator, for what-if replay.

It follows the rules PyTorch documents for ``PYTORCH_CUDA_ALLOC_CONF`` and implements in
``CUDACachingAllocator.cpp`` (re-derived, not copied):

- sizes rounded by :func:`~hookmagic.memory.torch_rules.round_size`; small (<= 1 MiB) and large
  pools, each caching free blocks per stream, searched best-fit by (stream, size, address);
- on a miss a new segment of :func:`~hookmagic.memory.torch_rules.allocation_size` bytes;
- a found block is split when the remainder is >= 512 B (small pool, or expandable segments) or
  > 1 MiB (large pool, and only for requests under ``max_split_size``);
- blocks >= ``max_split_size`` are never handed out for requests under it, nor for requests
  more than 20 MiB smaller; freed blocks merge with free neighbours of the same segment;
- nothing goes back to the device until a device allocation fails: then oversize cached
  blocks are released (with ``max_split_size``), then every whole cached segment, and the
  allocation is retried; only then is it an out-of-memory;
- expandable segments: one large virtual range per (stream, pool), mapped in 2 MiB (small) or
  20 MiB (large) pages as needed, so the free tail and the new pages form one block.

Not modelled: CUDA-graph private pools, cross-stream frees (``record_stream``: the replayer
frees on ``free_completed``), ``garbage_collection_threshold``, per-interval power-of-two
divisions (one value for all sizes).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass

from hookmagic.common.errors import InvalidArgument
from hookmagic.memory import torch_rules as R
from hookmagic.memory.linked import absorb_next, link_after
from hookmagic.memory.model_base import MODEL_VA_BASE, InvalidFree, ModelBase, OutOfMemory

_INF = 1 << 62


@dataclass(frozen=True)
class TorchConfig:
    """A ``PYTORCH_CUDA_ALLOC_CONF`` setting the model can replay."""

    max_split_size_mb: int | None = None
    roundup_power2_divisions: int | None = None
    expandable_segments: bool = False

    def conf(self) -> str:
        """The setting as the ``PYTORCH_CUDA_ALLOC_CONF`` value ("" for the default)."""
        parts = []
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.max_split_size_mb is not None:
            parts.append(f"max_split_size_mb:{self.max_split_size_mb}")
        if self.roundup_power2_divisions:
            parts.append(f"roundup_power2_divisions:{self.roundup_power2_divisions}")
        return ",".join(parts)


class _Block:
    __slots__ = ("addr", "size", "requested", "stream", "small", "prev", "next", "allocated",
                 "segment", "mapped", "expandable")

    def __init__(self, addr: int, size: int, stream: int, small: bool, segment: int,
                 mapped: bool = True, expandable: bool = False) -> None:
        self.addr, self.size, self.stream, self.small = addr, size, stream, small
        self.segment, self.mapped, self.expandable = segment, mapped, expandable
        self.requested = 0
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.allocated = False


class TorchCachingModel(ModelBase):
    """PyTorch's caching allocator with a given :class:`TorchConfig` (see module docstring)."""

    def __init__(self, config: TorchConfig | None = None, capacity: int | None = None) -> None:
        super().__init__(capacity)
        self.config = config or TorchConfig()
        self.name = "pytorch " + (self.config.conf() or "default")
        self.max_split = (self.config.max_split_size_mb * R.MiB
                          if self.config.max_split_size_mb is not None else _INF)
        self.expandable = self.config.expandable_segments
        # free, mapped blocks per pool, sorted as PyTorch's set is: (stream, size, address)
        self._free = {True: [], False: []}
        # unmapped tails of expandable segments per pool: (stream, address)
        self._unmapped = {True: [], False: []}
        self._blocks: dict[int, _Block] = {}     # address -> every live block object
        self._next_va = MODEL_VA_BASE

    # -- free-list bookkeeping ------------------------------------------------------------
    def _insert_free(self, b: _Block) -> None:
        if b.mapped:
            insort(self._free[b.small], (b.stream, b.size, b.addr))
        else:
            insort(self._unmapped[b.small], (b.stream, b.addr))

    def _remove_free(self, b: _Block) -> None:
        if b.mapped:
            lst, key = self._free[b.small], (b.stream, b.size, b.addr)
        else:
            lst, key = self._unmapped[b.small], (b.stream, b.addr)
        i = bisect_left(lst, key)
        del lst[i]

    @staticmethod
    def _pool(b: _Block) -> str:
        return "small" if b.small else "large"

    def _new_va(self, size: int) -> int:
        addr = self._next_va
        self._next_va += (size + R.ROUND_LARGE - 1) // R.ROUND_LARGE * R.ROUND_LARGE + R.ROUND_LARGE
        return addr

    # -- malloc ---------------------------------------------------------------------------
    def malloc(self, size: int, stream: int = 0) -> int:
        requested = size
        size = R.round_size(size, self.config.roundup_power2_divisions)
        small = R.is_small(size)
        block = self._get_free_block(small, size, stream)
        if block is None:
            alloc_size = R.allocation_size(size)
            block = self._alloc_block(small, size, alloc_size, stream)
            if block is None and self._release_available(small, size, stream):
                block = self._alloc_block(small, size, alloc_size, stream)
            if block is None:
                self._release_cached()
                block = self._alloc_block(small, size, alloc_size, stream)
            if block is None:
                self._emit("oom", 0, alloc_size, requested, 0, stream, "small" if small else "large")
                raise OutOfMemory(f"{self.name}: cannot allocate {requested} bytes")
        return self._alloc_found(block, size, requested)

    def _get_free_block(self, small: bool, size: int, stream: int) -> _Block | None:
        keys = self._free[small]
        i = bisect_left(keys, (stream, size, -1))
        if i == len(keys) or keys[i][0] != stream:
            return None
        b = self._blocks[keys[i][2]]
        if b.expandable and self.expandable:
            # best fit counts the unmapped room behind a block as part of its size
            def room(x: _Block) -> int:
                return x.size + (x.next.size if x.next is not None and not x.next.mapped else 0)
            j = i + 1
            while j < len(keys) and keys[j][0] == stream:
                nb = self._blocks[keys[j][2]]
                if not (b.expandable and room(nb) < room(b)):
                    break
                b, i, j = nb, j, j + 1
        if size < self.max_split and b.size >= self.max_split:
            return None
        if size >= self.max_split and b.size >= size + R.LARGE_BUFFER:
            return None
        del keys[i]
        return b

    def _alloc_block(self, small: bool, size: int, alloc_size: int, stream: int) -> _Block | None:
        if self.expandable:
            return self._alloc_expandable(small, size, stream)
        if not self.fits(alloc_size):
            return None
        addr = self._new_va(alloc_size)
        b = _Block(addr, alloc_size, stream, small, segment=addr)
        self._blocks[addr] = b
        self._emit("segment_alloc", addr, alloc_size, alloc_size, addr, stream, self._pool(b))
        return b

    def _alloc_found(self, b: _Block, size: int, requested: int) -> int:
        rest = b.size - size
        if b.small or self.expandable:
            split = rest >= R.MIN_BLOCK
        else:
            split = size < self.max_split and rest > R.SMALL_SIZE
        if split:
            self._split_off(b, size, mapped=True, expandable=b.expandable)
        b.allocated = True
        b.requested = requested
        self._emit("alloc", b.addr, b.size, requested, b.segment, b.stream, self._pool(b))
        return b.addr

    # -- free -----------------------------------------------------------------------------
    def _split_off(self, b: _Block, size: int, mapped: bool, expandable: bool) -> None:
        """Keep the first ``size`` bytes in ``b``; the rest becomes a free block after it."""
        r = _Block(b.addr + size, b.size - size, b.stream, b.small, b.segment, mapped, expandable)
        link_after(b, r, self._blocks)
        self._insert_free(r)

    def free(self, address: int) -> None:
        b = self._blocks.get(address)
        if b is None or not b.allocated:
            raise InvalidFree(f"{self.name}: free of {address:#x}, which is not allocated")
        b.allocated = False
        pool = self._pool(b)
        self._emit("free_requested", b.addr, b.size, b.requested, b.segment, b.stream, pool)
        self._emit("free_completed", b.addr, b.size, b.requested, b.segment, b.stream, pool)
        b = self._merge_neighbours(b)
        self._insert_free(b)

    def _merge_neighbours(self, b: _Block) -> _Block:
        """Merge ``b`` (not in any free list) with free neighbours in the same mapping state."""
        p = b.prev
        if p is not None and not p.allocated and p.mapped == b.mapped:
            self._remove_free(p)
            absorb_next(p, self._blocks)
            b = p
        n = b.next
        if n is not None and not n.allocated and n.mapped == b.mapped:
            self._remove_free(n)
            absorb_next(b, self._blocks)
        return b

    # -- giving memory back -----------------------------------------------------------------
    def _release_segment(self, b: _Block) -> None:
        self._remove_free(b)
        del self._blocks[b.addr]
        self._emit("segment_free", b.addr, b.size, b.size, b.segment, b.stream, self._pool(b))

    def _release_available(self, small: bool, size: int, stream: int) -> bool:
        """With ``max_split_size``: free oversize cached segments, largest first."""
        if self.max_split == _INF or self.expandable:
            return False
        keys = self._free[small]
        need = max(size, self.max_split)
        i = bisect_left(keys, (stream, need, -1))
        if i < len(keys) and keys[i][0] == stream:
            b = self._blocks[keys[i][2]]
            if b.prev is None and b.next is None:
                self._release_segment(b)
                return True
            return False
        released = 0
        i -= 1
        while i >= 0 and released < need:
            st, sz, addr = keys[i]
            if st != stream or sz < self.max_split:
                break
            b = self._blocks[addr]
            if b.prev is None and b.next is None:   # only whole segments go back
                self._release_segment(b)
                released += sz
            i -= 1
        return released >= need

    def _release_cached(self) -> None:
        """Release every cached whole segment (and unmap free pages of expandable ones)."""
        for small in (True, False):
            for st, sz, addr in list(self._free[small]):
                b = self._blocks[addr]
                if b.expandable:
                    self._unmap_free(b)
                elif b.prev is None and b.next is None:
                    self._release_segment(b)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: release what :meth:`_release_cached` releases."""
        self._release_cached()

    # -- expandable segments ----------------------------------------------------------------
    def _granule(self, small: bool) -> int:
        return R.SMALL_BUFFER if small else R.LARGE_BUFFER

    def _alloc_expandable(self, small: bool, size: int, stream: int) -> _Block | None:
        c = self._find_expandable(small, size, stream)
        if not c.mapped:
            c = self._map(c, min(c.size, size))
            if c is None:
                return None
        while c.size < size:
            nxt = c.next
            m = self._map(nxt, min(size - c.size, nxt.size))
            if m is None:
                return None
            c = m
        self._remove_free(c)
        return c

    def _find_expandable(self, small: bool, size: int, stream: int) -> _Block:
        def usable(x: _Block | None) -> bool:
            return x is not None and not x.allocated

        lst = self._unmapped[small]
        i = bisect_left(lst, (stream, -1))
        while i < len(lst) and lst[i][0] == stream:
            c = self._blocks[lst[i][1]]
            if usable(c.prev) and c.prev.mapped:
                c = c.prev
            room, x = 0, c
            while room < size and usable(x):
                room += x.size
                x = x.next
            if room >= size:
                return c
            i += 1
        va = self.expandable_va_size()
        addr = self._new_va(va)
        b = _Block(addr, va, stream, small, segment=addr, mapped=False, expandable=True)
        self._blocks[addr] = b
        self._insert_free(b)
        return b

    def expandable_va_size(self) -> int:
        """Bytes of address space one expandable segment reserves: more than the device holds
        (PyTorch reserves 1.125x device memory; 1 TiB when the capacity is not known)."""
        va = self.capacity * 9 // 8 if self.capacity else 1 << 40
        return (va + R.LARGE_BUFFER - 1) // R.LARGE_BUFFER * R.LARGE_BUFFER

    def _map(self, b: _Block, nbytes: int) -> _Block | None:
        """Map pages at the start of unmapped block ``b``; return the merged free block."""
        g = self._granule(b.small)
        size = min((nbytes + g - 1) // g * g, b.size)
        if not self.fits(size):
            return None
        self._remove_free(b)
        if b.size > size:
            self._split_off(b, size, mapped=False, expandable=True)
        b.mapped = True
        self._emit("segment_map", b.addr, size, size, b.segment, b.stream, self._pool(b))
        b = self._merge_neighbours(b)
        self._insert_free(b)
        return b

    def _unmap_free(self, b: _Block) -> None:
        """Unmap the whole pages inside free mapped block ``b``."""
        g = self._granule(b.small)
        # pages are counted from the segment's base (20 MiB is not a power of two)
        lo = b.segment + (b.addr - b.segment + g - 1) // g * g
        hi = b.segment + (b.addr + b.size - b.segment) // g * g
        if hi <= lo:
            return
        self._remove_free(b)
        # split b into [b.addr, lo) mapped, [lo, hi) unmapped, [hi, end) mapped
        end = b.addr + b.size
        pieces = []
        if lo > b.addr:
            pieces.append((b.addr, lo, True))
        pieces.append((lo, hi, False))
        if end > hi:
            pieces.append((hi, end, True))
        prev, nxt = b.prev, b.next
        del self._blocks[b.addr]
        made = []
        for start, stop, mapped in pieces:
            x = _Block(start, stop - start, b.stream, b.small, b.segment, mapped, True)
            self._blocks[start] = x
            made.append(x)
        for left, right in zip(made, made[1:]):
            left.next, right.prev = right, left
        made[0].prev, made[-1].next = prev, nxt
        if prev is not None:
            prev.next = made[0]
        if nxt is not None:
            nxt.prev = made[-1]
        self._emit("segment_unmap", lo, hi - lo, hi - lo, b.segment, b.stream, self._pool(b))
        for x in made:
            if x.mapped:
                self._insert_free(x)
            else:
                self._insert_free(self._merge_neighbours(x))

    # -- starting from a recorded state ----------------------------------------------------
    def seed_segment(self, size: int, small: bool, stream: int,
                     blocks: Sequence[tuple[int, int, int]],
                     mapped: Sequence[tuple[int, int]] | None = None) -> list[int]:
        """Start with a segment the program already had, laid out as recorded.

        ``blocks``: (offset, size, requested) of the blocks allocated in it; the bytes between
        them are free (cached) blocks. ``mapped``: None for an ordinary (``cudaMalloc``) segment
        of ``size`` bytes; for an expandable one, the (offset, size) of its mapped ranges, page
        aligned from offset 0, the segment's base (``size`` is then ignored: the segment
        reserves :meth:`expandable_va_size`). Emits the segment's ``segment_alloc`` (or one
        ``segment_map`` per range) and an ``alloc`` per block, as a recording of that state
        starts. Returns the blocks' addresses, in the order given.
        """
        expandable = mapped is not None
        g = self._granule(small)
        if expandable:
            size = self.expandable_va_size()
            ranges = sorted((int(o), int(o) + int(n)) for o, n in mapped)
        else:
            ranges = [(0, int(size))]
        order = sorted(range(len(blocks)), key=lambda i: blocks[i][0])
        for (lo, hi), (lo2, _) in zip(ranges, ranges[1:]):
            if lo2 < hi:
                raise InvalidArgument(f"seed_segment: mapped ranges overlap at offset {lo2}")
        if expandable and any(lo % g or hi % g or hi > size for lo, hi in ranges):
            raise InvalidArgument(f"seed_segment: mapped ranges must be whole {g >> 20} MiB "
                                  "pages of the segment")
        base = self._new_va(size)
        layout: list[tuple[int, int]] = []          # touching ranges make one mapped run
        for lo, hi in ranges:
            if layout and layout[-1][1] == lo:
                layout[-1] = (layout[-1][0], hi)
            else:
                layout.append((lo, hi))
        # pieces of the segment in address order: (start, end, mapped, allocated, requested)
        pieces: list[tuple[int, int, bool, bool, int]] = []
        at, k = 0, 0
        for lo, hi in layout:
            if lo > at:
                pieces.append((at, lo, False, False, 0))
            at = lo
            while k < len(order) and blocks[order[k]][0] < hi:
                off, n, req = (int(v) for v in blocks[order[k]])
                if off < at or off + n > hi:
                    raise InvalidArgument(f"seed_segment: the block at offset {off} ({n} bytes) "
                                          "is not inside one mapped range, or overlaps another")
                if off > at:
                    pieces.append((at, off, True, False, 0))
                pieces.append((off, off + n, True, True, req))
                at, k = off + n, k + 1
            if hi > at:
                pieces.append((at, hi, True, False, 0))
            at = hi
        if k < len(order):
            raise InvalidArgument(f"seed_segment: the block at offset {blocks[order[k]][0]} is "
                                  "outside the segment's mapped ranges")
        if at < size:
            pieces.append((at, size, False, False, 0))
        pool = "small" if small else "large"
        for lo, hi in ranges:
            self._emit("segment_map" if expandable else "segment_alloc", base + lo, hi - lo,
                       hi - lo, base, stream, pool)
        made: list[_Block] = []
        for lo, hi, is_mapped, allocated, req in pieces:
            b = _Block(base + lo, hi - lo, stream, small, segment=base, mapped=is_mapped,
                       expandable=expandable)
            b.allocated, b.requested = allocated, req
            if made:
                made[-1].next, b.prev = b, made[-1]
            made.append(b)
            self._blocks[b.addr] = b
        by_offset: dict[int, int] = {}
        for b in made:
            if b.allocated:
                by_offset[b.addr - base] = b.addr
                self._emit("alloc", b.addr, b.size, b.requested, base, stream, pool)
            else:
                self._insert_free(b)
        return [by_offset[int(blocks[i][0])] for i in range(len(blocks))]
