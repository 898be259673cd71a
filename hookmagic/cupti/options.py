"""What a capture records: :class:`CaptureOptions`, the one place that holds the defaults.

``hookmagic.capture(**options)``, ``%%cudahook`` and the benchmarks all build one of these; it
validates its fields and fills the native session's single options struct
(``hookmagic._native.CaptureOptions``), field by field.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from hookmagic.cupti.errors import CaptureOptionError
from hookmagic.cupti.pm_sampling import INTERVAL_US as PM_INTERVAL_US

# (low, high) for each integer option; the message of a refusal quotes them.
_INT_RANGES = {
    "max_stack_depth": (1, 1024),
    "buffer_mb": (1, 256),
    "max_buffers": (1, 4096),
    "max_table_mb": (1, 1 << 22),
}
_NVML_INTERVAL_S = (0.001, 60.0)

#: What ``lite=True`` turns off (and may not be asked for beside it).
LITE_OFF = ("stacks", "module_names", "nvml", "sync")
#: Costlier options that contradict ``lite=True`` (off by default; asking for them is an error).
LITE_CONFLICTS = ("api", "nvtx", "allocator_history")


@dataclass(frozen=True)
class CaptureOptions:
    """What one capture records, and the limits it keeps to.

    Parameters
    ----------
    kernels, memory, stacks, api, nvml, nvtx:
        What to record. ``memory``: device allocations and frees (CUPTI's MEMORY2 records) and
        virtual-memory map/unmap. ``stacks``: the Python stack of every launch, copy and
        allocation, including the allocator recorders' events (``allocator_history``).
        ``api`` adds every runtime/driver API call (costly on launch-bound code); ``nvtx``
        needs NVTX_INJECTION64_PATH pointing at CUPTI before NVTX's first use (a capture sets it
        if unset). ``torch.cuda.nvtx`` ranges and the ``nvtx`` package's named-domain ranges
        arrive; its default domain's did not on an H100.
    allocator_history:
        With ``memory``, also record PyTorch's caching-allocator history and CuPy's pool
        hand-outs when those libraries are in use (off by default: costly, see
        :class:`hookmagic.capture`).
    detach:
        Finalize CUPTI when the capture ends, so the program runs at full speed again.
    callbacks:
        CUPTI API callbacks at all (threads, stacks, ranges, map/unmap). Off: activity
        records only.
    module_names:
        With ``stacks`` and torch in use: name the ``nn.Module`` each kernel was launched in
        (``layer1.0.conv1 (Conv2d)``, as ``named_modules()`` names it) in place of its
        ``Module._call_impl`` frames, read by the stack walk (no module hooks; see
        :mod:`hookmagic.cupti.modules`), and backward kernels' ``backward of <module/op>``. False
        keeps the raw frames.
    sync_from_callbacks:
        Record synchronisation (stream/device/event/context synchronize, stream wait event)
        from those calls' API callbacks, timed entry to exit, instead of CUPTI's
        SYNCHRONIZATION activity records, which made launch-bound loops ~0.28x slower on the
        GPU machine. Same ``sync`` table; its ``event`` column is unknown (-1 as
        uint32 max) for these rows. Falls back to the activity records when callbacks are off
        or held by another tool.
    lite:
        The cheapest capture: kernels, copies, memsets and (with ``memory``) allocations and
        frees, as CUPTI activity records only. No Python stacks, threads, ranges,
        synchronisation or NVML samples; CUPTI's callback API is used only for the
        virtual-memory map/unmap calls that ``memory`` needs (none with ``memory=False`` or
        ``callbacks=False``). Turns off ``stacks``, ``module_names``, ``nvml`` and ``sync``;
        asking for any of them, or for ``api``, ``nvtx`` or ``allocator_history``, beside it
        raises :class:`~hookmagic.cupti.errors.CaptureOptionError`.
    sync:
        Record synchronisation (the ``sync`` table) at all.
    nvml_interval_s:
        NVML sampling period in seconds (0.001 to 60).
    counters:
        Hardware counters per kernel launch (the Trace's ``counters`` table): None/False (the
        default) for none, True or ``"default"`` for
        :data:`~hookmagic.cupti.counters.DEFAULT_COUNTERS`, or a list of Nsight Compute metric
        names. Each kernel is then replayed once per pass of the set (kernel replay, launches
        serialised): see :mod:`hookmagic.cupti.counters`. Stored as a tuple of names or None.
    pm_sampling:
        GPU-wide metrics sampled over time (CUPTI's PM sampling; the Trace's ``pm_samples``
        table and a lane under the timeline): None/False (the default) for none, True or
        ``"default"`` for the default set, a number for the default set every that many µs,
        or a list of metric names that fit in one hardware pass. Nothing is replayed: see
        :mod:`hookmagic.cupti.pm_sampling`. Not with ``counters``. Stored as ``"default"``,
        a tuple of names or None.
    pm_interval_us:
        The PM sampling interval in µs of GPU time (1 to 1,000,000; default 100).
    max_stack_depth, buffer_mb, max_buffers, max_table_mb:
        Deepest Python stack kept (1-1024 frames); CUPTI buffer size (1-256 MiB); buffers in
        flight at once (1-4096); the most decoded data kept (MiB; beyond it records are
        dropped and counted in ``meta["dropped"]``).

    Raises :class:`~hookmagic.cupti.errors.CaptureOptionError` (an ``InvalidArgument``) for a
    wrong type or an out-of-range value.
    """

    kernels: bool = True
    memory: bool = True
    stacks: bool = True
    api: bool = False
    nvml: bool = True
    nvtx: bool = False
    allocator_history: bool = False
    detach: bool = True
    callbacks: bool = True
    sync_from_callbacks: bool = True
    module_names: bool = True
    lite: bool = False
    sync: bool = True
    nvml_interval_s: float = 0.02
    max_stack_depth: int = 64
    buffer_mb: int = 8
    max_buffers: int = 32
    max_table_mb: int = 2048
    counters: Any = None
    pm_sampling: Any = None
    pm_interval_us: float = PM_INTERVAL_US

    def __post_init__(self) -> None:
        from hookmagic.cupti import pm_sampling as pm
        from hookmagic.cupti.counters import resolve

        object.__setattr__(self, "counters", resolve(self.counters))
        metrics, interval_us = pm.resolve(self.pm_sampling)
        object.__setattr__(self, "pm_sampling", metrics)
        object.__setattr__(self, "pm_interval_us", pm.check_interval(
            interval_us if interval_us is not None else self.pm_interval_us))
        if metrics is not None and self.counters:
            raise pm.PmSamplingOptionError(
                "pm_sampling= and counters= cannot be asked for in one capture: both program "
                "the GPU's performance monitors, and with the range profiler running CUPTI "
                "refuses PM sampling (CUPTI_ERROR_HARDWARE_BUSY); capture twice, one with each")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise CaptureOptionError(f"capture option {f.name} must be True or False, "
                                         f"not {value!r}")
        if self.lite:
            wanted = [name for name in LITE_CONFLICTS if getattr(self, name)]
            if wanted:
                raise CaptureOptionError(_lite_conflict(wanted))
            for name in LITE_OFF:
                object.__setattr__(self, name, False)
        for name, (low, high) in _INT_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise CaptureOptionError(f"capture option {name} must be an integer from {low} "
                                         f"to {high}, not {value!r}")
        value = self.nvml_interval_s
        low, high = _NVML_INTERVAL_S
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not low <= value <= high):
            raise CaptureOptionError(f"capture option nvml_interval_s must be a number of "
                                     f"seconds from {low} to {high}, not {value!r}")

    @classmethod
    def from_kwargs(cls, **options: Any) -> CaptureOptions:
        """Build from keyword arguments, naming any unknown option in the error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise CaptureOptionError(f"unknown capture option(s) {', '.join(unknown)}; "
                                     f"known: {', '.join(sorted(known))}")
        if options.get("lite") is True:
            wanted = [name for name in LITE_OFF + LITE_CONFLICTS if options.get(name) is True]
            if wanted:
                raise CaptureOptionError(_lite_conflict(wanted))
        return cls(**options)

    def as_dict(self) -> dict[str, Any]:
        """The options as a plain dict (saved in ``trace.meta["options"]``)."""
        return asdict(self)

    def to_native(self, native: Any, *, activities_without_callbacks: bool = False) -> Any:
        """The native session's options struct (``native`` is ``hookmagic._native``).

        ``activities_without_callbacks``: if another tool holds CUPTI's callback API, record
        activities anyway (decided per capture by who holds CUPTI, not by the user)."""
        o = native.CaptureOptions()
        o.kernels, o.memory, o.stacks = self.kernels, self.memory, self.stacks
        o.api, o.nvtx, o.detach, o.callbacks = self.api, self.nvtx, self.detach, self.callbacks
        o.sync_from_callbacks = self.sync_from_callbacks
        o.sync = self.sync
        o.launch_callbacks = not self.lite
        o.activities_without_callbacks = activities_without_callbacks
        o.max_stack_depth = self.max_stack_depth
        o.buffer_bytes = self.buffer_mb << 20
        o.max_buffers = self.max_buffers
        o.max_table_bytes = self.max_table_mb << 20
        return o


def _lite_conflict(wanted: list[str]) -> str:
    return (f"capture option lite=True contradicts {', '.join(f'{n}=True' for n in wanted)}: "
            "a lite capture records kernels, copies, memsets and memory only, without "
            "stacks, threads, ranges, synchronisation, API records or NVML samples")
