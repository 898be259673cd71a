"""Argument validators for public constructors, and bad-number counting for importers.

Constructors call these so that a NaN latency, a zero frame rate or a batch size of 2.5 fails
at once, with a message naming the argument, instead of hanging or dividing by zero later::

    max_batch = checks.integer("max_batch", max_batch, minimum=1)
    fps = checks.number("fps", fps, positive=True)

Every failure is an :class:`~hookmagic.common.errors.InvalidArgument`.
:func:`bad_numbers` counts NaN, infinite and negative values in measured columns, for the
importers' warnings and :class:`~hookmagic.common.errors.BadNumbers`.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import numpy as np

from hookmagic.common.errors import InvalidArgument

__all__ = ["number", "integer", "optional_number", "optional_integer", "choice",
           "bad_numbers", "describe_bad"]


def number(name: str, value: Any, *, positive: bool = False, non_negative: bool = False,
           allow_inf: bool = False, maximum: float | None = None) -> float:
    """``value`` as a finite float (``allow_inf``: +inf too), or :class:`InvalidArgument`.

    ``positive``: > 0; ``non_negative``: >= 0; ``maximum``: <= maximum. Booleans and strings
    are refused (``"5"`` is not a number here: say ``5``).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"{name} must be a number, not {_show(value)}")
    x = float(value)
    if math.isnan(x):
        raise InvalidArgument(f"{name} must be a number, not NaN")
    if math.isinf(x) and not (allow_inf and x > 0):
        raise InvalidArgument(f"{name} must be finite, not {x}")
    if positive and not x > 0:
        raise InvalidArgument(f"{name} must be > 0, not {_show(value)}")
    if non_negative and not x >= 0:
        raise InvalidArgument(f"{name} must be >= 0, not {_show(value)}")
    if maximum is not None and x > maximum:
        raise InvalidArgument(f"{name} must be <= {maximum}, not {_show(value)}")
    return x


def integer(name: str, value: Any, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    """``value`` as an int (a float with an integral value is accepted: ``8.0``), or
    :class:`InvalidArgument` (``2.5``, NaN, booleans, strings)."""
    if isinstance(value, (bool, np.bool_)):
        raise InvalidArgument(f"{name} must be an integer, not {_show(value)}")
    if isinstance(value, numbers.Integral):
        n = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(float(value)) \
            and float(value).is_integer():
        n = int(value)
    else:
        raise InvalidArgument(f"{name} must be an integer, not {_show(value)}")
    if minimum is not None and n < minimum:
        raise InvalidArgument(f"{name} must be >= {minimum}, not {n}")
    if maximum is not None and n > maximum:
        raise InvalidArgument(f"{name} must be <= {maximum}, not {n}")
    return n


def optional_number(name: str, value: Any, **kw: Any) -> float | None:
    """:func:`number`, with ``None`` passed through."""
    return None if value is None else number(name, value, **kw)


def optional_integer(name: str, value: Any, **kw: Any) -> int | None:
    """:func:`integer`, with ``None`` passed through."""
    return None if value is None else integer(name, value, **kw)


def choice(name: str, value: Any, options: Iterable[Any]) -> Any:
    """``value`` if it is one of ``options``, else :class:`InvalidArgument` listing them."""
    opts = tuple(options)
    if value not in opts:
        raise InvalidArgument(f"{name} must be one of {', '.join(map(repr, opts))}; "
                              f"got {_show(value)}")
    return value


def bad_numbers(values: Any, *, negative_ok: bool = False) -> dict[str, int]:
    """Counts of NaN, infinite and (unless ``negative_ok``) negative entries in ``values``.

    Only the kinds present are in the dict, so an empty dict means all values are good.
    Entries that are not numbers at all (strings) count as ``"not numbers"``.
    """
    arr = np.asarray(values)
    out: dict[str, int] = {}
    if arr.dtype == object or arr.dtype.kind in "USb":
        flat = arr.ravel()
        junk = sum(1 for v in flat if v is not None and (isinstance(v, (bool, np.bool_))
                                                        or not isinstance(v, numbers.Real)))
        if junk:
            out["not numbers"] = int(junk)
        arr = np.array([float(v) for v in flat if isinstance(v, numbers.Real)
                        and not isinstance(v, (bool, np.bool_))], dtype=float)
    arr = np.asarray(arr, dtype=float)
    n_nan = int(np.isnan(arr).sum())
    n_inf = int(np.isinf(arr).sum())
    n_neg = 0 if negative_ok else int((arr < 0).sum())
    for key, n in (("NaN", n_nan), ("infinite", n_inf), ("negative", n_neg)):
        if n:
            out[key] = n
    return out


def describe_bad(counts: dict[str, int], where: str) -> str:
    """``"3 NaN, 1 negative value(s) in mean_ms"``-style text for a warning or error."""
    parts = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    return f"{parts} value(s) in {where}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

