"""Address-ordered, doubly linked blocks, as the allocator models keep them."""
from __future__ import annotations

from typing import Any


def absorb_next(first: Any, by_address: dict[int, Any]) -> None:
    """Merge ``first.next`` into ``first`` (adjacent in address space) and forget it."""
    second = first.next
    del by_address[second.addr]
    first.size += second.size
    first.next = second.next
    if second.next is not None:
        second.next.prev = first


def link_after(first: Any, rest: Any, by_address: dict[int, Any]) -> None:
    """Split ``first``: ``rest`` (made by the caller, starting where ``first`` now ends) takes
    the bytes beyond it and is linked in right after it."""
    rest.prev, rest.next = first, first.next
    if first.next is not None:
        first.next.prev = rest
    first.next = rest
    first.size = rest.addr - first.addr
    by_address[rest.addr] = rest
