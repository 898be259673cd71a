"""Progress bars (``tqdm.auto``: a widget in notebooks, text in terminals) for work that may
take more than a few seconds: ``hookmagic demo``, loading large trace files, sweeps.

A bar appears only once the work has run for ``DELAY_S`` seconds, so quick calls print
nothing. ``HOOKMAGIC_PROGRESS=0`` turns bars off everywhere (logs, CI).
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, TypeVar

T = TypeVar("T")
#: seconds of work before a bar is drawn
DELAY_S = 2.0


def enabled() -> bool:
    """False when ``HOOKMAGIC_PROGRESS`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get("HOOKMAGIC_PROGRESS", "1").strip().lower() not in ("0", "false", "no", "off")


def progress(iterable: Iterable[T], desc: str, total: int | None = None, unit: str = "it",
             **kw: Any) -> Iterator[T]:
    """``iterable`` wrapped in a ``tqdm.auto`` bar that shows after :data:`DELAY_S` seconds."""
    if not enabled():
        yield from iterable
        return
    from tqdm.auto import tqdm

    with tqdm(iterable, desc=desc, total=total, unit=unit, delay=DELAY_S, leave=False,
              dynamic_ncols=True, **kw) as bar:
        yield from bar


def bar(desc: str, total: int | None = None, unit: str = "it", **kw: Any) -> Any:
    """A manual ``tqdm.auto`` bar (``.update(n)``, ``.close()``), or a no-op when disabled."""
    from tqdm.auto import tqdm

    return tqdm(desc=desc, total=total, unit=unit, delay=DELAY_S, leave=False,
                dynamic_ncols=True, disable=not enabled(), **kw)
