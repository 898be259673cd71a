"""Numbers as people read them: bytes, durations, percentages, shortened names.

One copy of each for every view, analysis message and CLI line, so the same quantity reads the
same everywhere. Plain functions of numbers and strings; nothing here imports hookmagic.
"""
from __future__ import annotations

import math

__all__ = ["KiB", "MiB", "GiB", "short", "percent", "iec_bytes", "si_bytes", "duration_ns",
           "seconds", "is_missing", "plotly_text"]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

ELLIPSIS = "…"


def is_missing(x: float | None) -> bool:
    """True for None and NaN (shown as an em dash by the formatters)."""
    return x is None or (isinstance(x, float) and math.isnan(x))


def plotly_text(text: object) -> str:
    """``text`` (a name read from a file) made literal inside Plotly hover text and titles.

    Plotly reads ``<b>``, ``<br>``, ``<a href>`` ... there as markup and drops tags it does not
    know, so ``vector<float>`` would show as ``vector`` and a name could carry a link; it
    decodes ``&lt;``/``&gt;``/``&amp;`` back, so escaped names show exactly as written."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def short(text: str, width: int = 60) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis when it was cut."""
    text = str(text)
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def percent(fraction: float | None, digits: int = 1, small_digits: int | None = None) -> str:
    """A fraction (0.25) as a percentage ("25.0%"); "—" when missing.

    ``small_digits``: decimals for shares under 1% (so 0.004 reads "0.40%", not "0%").
    """
    if is_missing(fraction):
        return "—"
    x = 100 * float(fraction)
    if small_digits is not None and x != 0 and abs(x) < 1:
        digits = small_digits
    return f"{x:.{digits}f}%"


def iec_bytes(n: float, spec: str = ".3g") -> str:
    """A byte count in powers of 1024 (B, KiB, MiB, GiB); ``spec`` formats the number."""
    n = float(n)
    if abs(n) < KiB:
        return f"{n:.0f} B"
    for unit, scale in (("KiB", KiB), ("MiB", MiB)):
        if abs(n) < scale * 1024:
            return f"{n / scale:{spec}} {unit}"
    return f"{n / GiB:{spec}} GiB"


def si_bytes(n: float) -> str:
    """A byte count in powers of 1000 (B, kB, MB, GB), two decimals, as transfer sizes read."""
    n = float(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def duration_ns(ns: float) -> str:
    """A duration in nanoseconds as ns, us, ms or s (thousands separated)."""
    ns = float(ns)
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:,.3f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:,.3f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:,.2f} us"
    return f"{ns:,.0f} ns"


def seconds(s: float | None) -> str:
    """A duration in seconds, three significant digits, in s, ms, µs or ns; "—" when missing."""
    if is_missing(s):
        return "—"
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if a >= 1e-6 or a == 0:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e9:.3g} ns"
