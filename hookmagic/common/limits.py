"""Budgets every loader works within, so that no input file can exhaust memory or time.

A hostile or broken input (a zip or gzip bomb, a tiny file that claims five million rows,
``/dev/zero``, JSON nested ten thousand levels deep) ends in one
:class:`~hookmagic.common.errors.LimitExceeded` that names the budget and how to raise it,
never in ``MemoryError``, ``RecursionError`` or a hang.

=============================  ==========================  ================================
environment variable           default                     what it bounds
=============================  ==========================  ================================
``HOOKMAGIC_MAX_BYTES``        2 GiB (2147483648)          bytes of one input after
                                                           decompression (a file, a gzip
                                                           stream, all members of a zip)
``HOOKMAGIC_MAX_JSON_BYTES``   1 GiB (1073741824)          bytes of JSON text parsed at once
``HOOKMAGIC_MAX_ROWS``         20,000,000                  rows of one table (trace events,
                                                           layers, allocator events, ...)
``HOOKMAGIC_MAX_DEPTH``        100                         nesting depth of a JSON document
=============================  ==========================  ================================

Set a variable (``export HOOKMAGIC_MAX_ROWS=100000000``, or ``os.environ[...]`` before the
load) to raise a budget; it is read at every check, so a change takes effect at once. Values
take an optional ``K``/``M``/``G`` suffix (powers of 1024 for bytes, of 1000 for rows), and
``0`` means no limit. See ``docs/limits.md``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from hookmagic.common.errors import InvalidArgument, LimitExceeded

__all__ = ["Budget", "BUDGETS", "MAX_BYTES", "MAX_JSON_BYTES", "MAX_ROWS", "MAX_DEPTH",
           "limit", "check", "describe"]


@dataclass(frozen=True)
class Budget:
    """One documented budget: its environment variable, default, unit and meaning."""

    env: str
    default: int
    unit: str          # "bytes", "rows" or "levels"
    what: str          # what it bounds, as a noun phrase without the unit

    @property
    def value(self) -> int:
        """The budget now: the environment variable if set, else the default (0: no limit)."""
        return limit(self)

    def text(self, n: int) -> str:
        return _human(n, self.unit)


MAX_BYTES = Budget("HOOKMAGIC_MAX_BYTES", 2 * 1024**3, "bytes",
                   "the size of one input after decompression")
MAX_JSON_BYTES = Budget("HOOKMAGIC_MAX_JSON_BYTES", 1024**3, "bytes",
                        "the size of JSON text parsed at once")
MAX_ROWS = Budget("HOOKMAGIC_MAX_ROWS", 20_000_000, "rows", "the length of one table")
MAX_DEPTH = Budget("HOOKMAGIC_MAX_DEPTH", 100, "levels", "the nesting depth of a JSON document")

#: the largest batch size a scheduler object accepts (its engines index latency tables by size)
MAX_BATCH_SIZE = 1_000_000

#: every budget, by environment variable
BUDGETS: dict[str, Budget] = {b.env: b for b in (MAX_BYTES, MAX_JSON_BYTES, MAX_ROWS, MAX_DEPTH)}

_SUFFIX = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def limit(budget: Budget) -> int:
    """The current value of ``budget`` (0 means unlimited).

    Raises :class:`InvalidArgument` when its environment variable is set to something that is
    not a non-negative number.
    """
    raw = os.environ.get(budget.env)
    if raw is None or not raw.strip():
        return budget.default
    m = _SUFFIX.match(raw)
    if not m:
        raise InvalidArgument(f"{budget.env}={raw!r} is not a number; use e.g. "
                              f"{budget.env}={budget.default} (0 for no limit)")
    base = 1024 if budget.unit == "bytes" else 1000
    scale = {"": 1, "k": base, "m": base**2, "g": base**3, "t": base**4}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    if value == 0 and float(m.group(1)) != 0:   # 0.5 would round to 0, which means "no limit"
        raise InvalidArgument(f"{budget.env}={raw!r} rounds to 0, which means no limit; give a "
                              f"whole number of {budget.unit} (e.g. {budget.default})")
    return value


def check(budget: Budget, amount: int, what: str, headroom: int = 4) -> None:
    """Raise :class:`LimitExceeded` when ``amount`` is over ``budget``.

    ``what`` says which input, e.g. ``"'trace.json.gz' (after gunzip)"``; the message adds the
    budget, its value and the way to raise it.
    """
    cap = limit(budget)
    if cap and amount > cap:
        raise exceeded(budget, what, amount, headroom)


def exceeded(budget: Budget, what: str, amount: int | None = None,
             headroom: int = 4) -> LimitExceeded:
    """The :class:`LimitExceeded` for ``what`` going over ``budget`` (to raise), naming the
    amount once with its unit and suggesting a value that lets the load finish."""
    cap = limit(budget)
    # ``amount`` is what this one check saw; later stages of the same load (decoding Parquet,
    # inflating gzip) need more, so the suggestion keeps ``headroom`` times it
    need = max(amount * headroom if amount is not None else cap * 4, 1)
    got = f"{amount:,} {budget.unit}" if amount is not None else "more"
    return LimitExceeded(
        f"{what} needs {got}, over {budget.env}={cap} ({budget.what}); if the input is "
        f"trusted, set {budget.env}={suggestion(budget, need)} (0: no limit)")


def suggestion(budget: Budget, need: int) -> str:
    """A round value of ``budget``'s variable, in its own suffix notation, that is at least
    ``need`` (``need=5000`` bytes: ``"5K"``, i.e. 5120)."""
    base = 1024 if budget.unit == "bytes" else 1000
    for suffix, scale in (("T", base**4), ("G", base**3), ("M", base**2), ("K", base)):
        if need >= scale:
            return f"{-(-need // scale)}{suffix}"
    return str(need)


def describe() -> list[dict[str, object]]:
    """Every budget with its current value, for docs and ``--help`` texts."""
    return [{"env": b.env, "default": b.default, "value": b.value, "unit": b.unit,
             "what": b.what} for b in BUDGETS.values()]


def _human(n: int, unit: str) -> str:
    if unit == "bytes":
        for factor, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
            if n >= factor:
                return f"{n / factor:.3g} {name}"
        return f"{n} bytes"
    return f"{n:,} {unit}"
