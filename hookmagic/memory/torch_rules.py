"""PyTorch caching-allocator size rules, as documented in PyTorch's CUDA memory notes and
``CUDACachingAllocator.cpp`` (constants and rules restated here, not copied).

- every block is a multiple of 512 B (``kMinBlockSize``);
- requests of at most 1 MiB (``kSmallSize``) go to the *small* pool, whose segments are 2 MiB
  (``kSmallBuffer``);
- larger requests go to the *large* pool: under 10 MiB (``kMinLargeAlloc``) the segment is 20 MiB
  (``kLargeBuffer``), from 10 MiB up the segment is the request rounded up to 2 MiB
  (``kRoundLarge``);
- ``roundup_power2_divisions:N`` rounds a size up to the next of N equal steps between two
  powers of two (only for sizes above 512*N).
"""
from __future__ import annotations

MIN_BLOCK = 512                 # kMinBlockSize
SMALL_SIZE = 1 << 20            # kSmallSize: largest small-pool request
SMALL_BUFFER = 2 << 20          # kSmallBuffer: small-pool segment size
LARGE_BUFFER = 20 << 20         # kLargeBuffer: segment for 1..10 MiB requests
MIN_LARGE_ALLOC = 10 << 20      # kMinLargeAlloc
ROUND_LARGE = 2 << 20           # kRoundLarge
MiB = 1 << 20


def power2_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between powers of two."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)   # divisions is a power of two
    if step == 0:
        return floor << 1
    base = size & ~(step - 1)
    return size if base == size else base + step


def round_size(size: int, divisions: int | None = None) -> int:
    """Block size PyTorch hands out for a request of ``size`` bytes."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    if divisions and divisions > 1 and size > MIN_BLOCK * divisions:
        return power2_division(size, divisions)
    return MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


def allocation_size(block_size: int) -> int:
    """Bytes PyTorch asks ``cudaMalloc`` for when no cached block fits ``block_size``."""
    if block_size <= SMALL_SIZE:
        return SMALL_BUFFER
    if block_size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((block_size + ROUND_LARGE - 1) // ROUND_LARGE)


def is_small(block_size: int) -> bool:
    """Whether a rounded block goes to the small pool."""
    return block_size <= SMALL_SIZE
