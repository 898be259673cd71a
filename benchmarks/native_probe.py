"""The native session's benchmark-only entry (``_native.probe_start``) for the overhead probes.

The switches here (an exact set of activity kinds, callback domains, callbacks that return at
once) measure what CUPTI itself costs; they are not capture options and never reach
``hookmagic.capture``.
"""
from __future__ import annotations

from typing import Any, Sequence

from hookmagic.cupti.options import CaptureOptions


def probe_start(native: Any, *, activity_kinds: Sequence[int] = (), callback_domains: int = 3,
                noop_callbacks: bool = False, **options: Any) -> dict:
    """Start the native session with capture ``options`` plus the probe overrides."""
    probe = native.ProbeOptions()
    probe.activity_kinds = list(activity_kinds)
    probe.callback_domains = callback_domains
    probe.noop_callbacks = noop_callbacks
    native_options = CaptureOptions.from_kwargs(**options).to_native(native)
    return native.probe_start(native_options, None, probe)
