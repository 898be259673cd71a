"""Allocator models against hand-worked sequences and PyTorch's documented rounding rules."""
import pytest

from hookmagic.memory import torch_rules as R
from hookmagic.common.errors import HookmagicError
from hookmagic.memory.allocators import BestFitModel, CupyPoolModel, InvalidFree, OutOfMemory
from hookmagic.memory.torch_model import TorchCachingModel, TorchConfig

MiB = 1 << 20


def actions(model, name):
    return [e for e in model._log if e[1] == name]


@pytest.mark.parametrize("asked, block", [(1, 512), (512, 512), (513, 1024), (1000, 1024),
                                          (MiB, MiB), (MiB + 1, MiB + 512)])
def test_round_size_documented(asked, block):
    # PyTorch notes: every block is a multiple of 512 bytes
    assert R.round_size(asked) == block


@pytest.mark.parametrize("block, segment", [(512, 2 * MiB), (MiB, 2 * MiB), (MiB + 512, 20 * MiB),
                                            (10 * MiB - 512, 20 * MiB), (10 * MiB, 10 * MiB),
                                            (11 * MiB, 12 * MiB)])
def test_allocation_size_documented(block, segment):
    assert R.allocation_size(block) == segment


def test_power2_divisions_documented_example():
    # PyTorch docs: with 4 divisions, 1200 MB lies between 1024 and 2048 -> rounds to 1280
    assert R.round_size(1200 * MiB, 4) == 1280 * MiB
    assert R.round_size(1024 * MiB, 4) == 1024 * MiB
    assert R.round_size(1000, 4) == 1024       # 512*4 = 2048 >= size: plain 512 rounding


def test_small_pool_packs_into_one_2mib_segment():
    m = TorchCachingModel()
    a = m.malloc(1000)
    b = m.malloc(MiB)
    assert m.reserved == 2 * MiB and m.allocated == 1024 + MiB
    assert b == a + 1024          # split: the next block starts right after the first


def test_large_remainder_under_1mib_is_not_split():
    m = TorchCachingModel()
    m.malloc(int(19.5 * MiB))     # >= 10 MiB: segment = 20 MiB; 0.5 MiB left is not split off
    (alloc,) = actions(m, "alloc")
    assert alloc[3] == 20 * MiB and alloc[4] == int(19.5 * MiB)


def test_cached_block_is_reused_without_a_new_segment():
    m = TorchCachingModel()
    a = m.malloc(5 * MiB)
    m.free(a)
    assert m.reserved == 20 * MiB       # cached, not returned
    assert m.malloc(5 * MiB) == a
    assert len(actions(m, "segment_alloc")) == 1


def test_fragmented_segment_forces_a_new_one():
    # 20 MiB segment: A, B, C of 6 MiB and a 2 MiB tail; free A and C -> free runs 6 and 8 MiB
    m = TorchCachingModel()
    a, b, c = (m.malloc(6 * MiB) for _ in range(3))
    m.free(a)
    m.free(c)
    assert m.reserved - m.allocated == 14 * MiB
    m.malloc(9 * MiB)                   # 14 MiB free, but no run of 9 MiB
    assert m.reserved == 40 * MiB


def test_oom_releases_cached_segments_then_retries():
    m = TorchCachingModel(capacity=40 * MiB)
    a = m.malloc(15 * MiB)              # 16 MiB segment, whole block (1 MiB rest not split)
    m.free(a)
    m.malloc(30 * MiB)                  # 16 + 30 > 40: cached segment goes back first
    assert [e[1] for e in m._log].count("segment_free") == 1
    assert m.reserved == 30 * MiB and m.ooms == 0
    with pytest.raises(OutOfMemory):
        m.malloc(30 * MiB)
    assert m.ooms == 1


def test_expandable_segments_grow_one_range():
    m = TorchCachingModel(TorchConfig(expandable_segments=True))
    a = m.malloc(5 * MiB)
    b = m.malloc(5 * MiB)
    c = m.malloc(12 * MiB)              # 10 MiB free tail + a new 20 MiB page: contiguous
    assert (b, c) == (a + 5 * MiB, a + 10 * MiB)
    assert m.reserved == 40 * MiB
    assert len(actions(m, "segment_map")) == 2
    m.free(a), m.free(b), m.free(c)
    m.empty_cache()
    assert m.reserved == 0


def test_expandable_segments_map_unmap_sequence_synthetic():
    """SYNTHETIC requests; the expected driver calls are worked out by hand from PyTorch's
    expandable-segment rules (Note [Expandable Segments] in CUDACachingAllocator.cpp): pages of
    2 MiB (small pool) and 20 MiB (large pool); one ``segment_map`` per growth, of whole pages,
    starting at the lowest address of the segment where free + unmapped room fits the request
    (free tails merge with the new pages); ``empty_cache`` unmaps only whole free pages."""
    m = TorchCachingModel(TorchConfig(expandable_segments=True))
    m.malloc(500 * 1024)                # small pool: one 2 MiB page              -> map 2 (small)
    b = m.malloc(3 * MiB)               # large pool: page 0 [0, 20)               -> map 20 @ 0
    c = m.malloc(25 * MiB)              # free [3, 20) + page 1 [20, 40): c = [3, 28) -> map 20 @ 20
    d = m.malloc(12 * MiB)              # exactly the free [28, 40): nothing mapped
    m.free(b)
    m.empty_cache()                     # free [0, 3) holds no whole page: nothing unmapped
    m.free(c)                           # free [0, 28)
    m.empty_cache()                     # page 0 is wholly free               -> unmap 20 @ 0
    e = m.malloc(30 * MiB)              # [0, 20) unmapped + [20, 28) free = 28 < 30: not there;
    #                                     after d: two pages in one call     -> map 40 @ 40
    f = m.malloc(18 * MiB)              # [0, 20) unmapped + [20, 28) free = 28 >= 18 -> map 20 @ 0
    base = b
    seq = [(e[1], e[7], (e[2] - base) // MiB if e[7] == "large" else None, e[3] // MiB)
           for e in m._log if e[1] in ("segment_map", "segment_unmap")]
    assert seq == [("segment_map", "small", None, 2),
                   ("segment_map", "large", 0, 20),
                   ("segment_map", "large", 20, 20),
                   ("segment_unmap", "large", 0, 20),
                   ("segment_map", "large", 40, 40),
                   ("segment_map", "large", 0, 20)]
    assert (c - base, d - base, e - base, f - base) == (3 * MiB, 28 * MiB, 40 * MiB, 0)
    assert m.device_allocs == 5
    assert m.reserved == 2 * MiB + 80 * MiB and m.peak_reserved == 82 * MiB


def test_max_split_size_keeps_oversize_blocks_for_large_requests():
    m = TorchCachingModel(TorchConfig(max_split_size_mb=32))
    big = m.malloc(40 * MiB)
    m.free(big)
    m.malloc(8 * MiB)                   # may not carve the 40 MiB oversize block
    assert len(actions(m, "segment_alloc")) == 2
    assert m.malloc(40 * MiB) == big    # a large request may use it


def test_cupy_pool_rounds_to_512_and_splits():
    m = CupyPoolModel()
    a = m.malloc(1000)                  # miss: exactly 1024 bytes from the device
    assert m.reserved == 1024
    m.free(a)
    b = m.malloc(512)                   # from the cached 1024 chunk, split
    c = m.malloc(512)
    assert (b, c) == (a, a + 512) and m.reserved == 1024


def test_best_fit_picks_smallest_hole_and_shrinks_top():
    m = BestFitModel()
    a = m.malloc(4096)
    m.malloc(1024)                      # stays: the holes either side cannot merge
    c = m.malloc(2048)
    d = m.malloc(512)
    m.free(a)                           # hole 4096 at a
    m.free(c)                           # hole 2048 at c
    assert m.malloc(1500) == c          # best fit: the 2048 hole
    m.free(d)                           # top block: heap shrinks
    # its 512 B remainder merged with the freed top block, so the top drops to c + 1536
    assert m.reserved == 4096 + 1024 + 1536 and m.peak_reserved == 4096 + 1024 + 2048 + 512


@pytest.mark.parametrize("make", [lambda: TorchCachingModel(TorchConfig()), CupyPoolModel,
                                  BestFitModel])
def test_freeing_what_was_not_allocated_is_a_project_error(make):
    model = make()
    addr = model.malloc(4096)
    model.free(addr)
    # a second free, and a free of an address never handed out, are refused: a model that
    # accepted them would count the bytes twice
    with pytest.raises(InvalidFree):
        model.free(addr)
    with pytest.raises(InvalidFree):
        model.free(addr + 12345)
    assert issubclass(InvalidFree, HookmagicError) and issubclass(InvalidFree, KeyError)


def test_out_of_memory_is_in_the_project_hierarchy():
    model = BestFitModel(capacity=1 << 20)
    with pytest.raises(OutOfMemory) as err:
        model.malloc(4 << 20)
    assert isinstance(err.value, HookmagicError) and isinstance(err.value, RuntimeError)
