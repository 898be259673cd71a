"""CaptureOptions: one dataclass holds the defaults, validates, and fills the native struct."""
from __future__ import annotations

import dataclasses
import math

import pytest

import hookmagic
from hookmagic.common.errors import HookmagicError, InvalidArgument
from hookmagic.cupti.errors import CaptureOptionError
from hookmagic.cupti.options import CaptureOptions


def test_defaults_are_the_documented_ones():
    o = CaptureOptions()
    assert (o.kernels, o.memory, o.stacks, o.api, o.nvml, o.nvtx) == (True, True, True, False,
                                                                      True, False)
    assert (o.allocator_history, o.detach, o.callbacks, o.sync_from_callbacks) == (False, True,
                                                                                 True, True)
    assert (o.buffer_mb, o.max_buffers, o.max_table_mb, o.max_stack_depth) == (8, 32, 2048, 64)


@pytest.mark.parametrize("field, value", [
    ("stacks", "yes"), ("kernels", 1), ("memory", None),
    ("max_stack_depth", 0), ("max_stack_depth", 2.5), ("max_stack_depth", True),
    ("buffer_mb", -8), ("buffer_mb", 1 << 20), ("max_buffers", 0), ("max_table_mb", "2048"),
    ("nvml_interval_s", math.nan), ("nvml_interval_s", math.inf), ("nvml_interval_s", 0),
    ("nvml_interval_s", -1.0), ("nvml_interval_s", False),
])
def test_wrong_types_and_ranges_are_refused_with_the_name(field, value):
    with pytest.raises(CaptureOptionError, match=field) as info:
        CaptureOptions(**{field: value})
    assert isinstance(info.value, InvalidArgument) and isinstance(info.value, HookmagicError)


def test_unknown_option_names_the_known_ones():
    with pytest.raises(CaptureOptionError, match="unknown capture option.*stack_depth"):
        CaptureOptions.from_kwargs(stack_depth=3)


def test_capture_validates_before_anything_runs():
    with pytest.raises(CaptureOptionError, match="buffer_mb"):
        hookmagic.capture(buffer_mb=0)
    with pytest.raises(CaptureOptionError, match="unknown"):
        hookmagic.capture(kernel=False)


def test_capture_accepts_an_options_object_and_overrides():
    base = CaptureOptions(stacks=False, max_buffers=4)
    cm = hookmagic.capture(base, nvml=False, label="x")
    assert cm.capture_options == dataclasses.replace(base, nvml=False)
    assert cm.options == dataclasses.asdict(cm.capture_options)  # what meta["options"] saves


def test_the_native_struct_gets_every_field():
    native = pytest.importorskip("hookmagic._native", reason="native extension not built")
    o = CaptureOptions(kernels=False, memory=False, stacks=False, api=True, nvtx=True,
                       detach=False, callbacks=False, sync_from_callbacks=False, max_stack_depth=9, buffer_mb=3,
                       max_buffers=5, max_table_mb=7)
    n = o.to_native(native, activities_without_callbacks=True)
    assert (n.kernels, n.memory, n.stacks, n.api, n.nvtx, n.detach, n.callbacks,
            n.sync_from_callbacks) == (False, False, False, True, True, False, False, False)
    assert n.activities_without_callbacks is True
    assert (n.max_stack_depth, n.buffer_bytes, n.max_buffers, n.max_table_bytes) == (
        9, 3 << 20, 5, 7 << 20)
    # benchmark-only switches are not capture options
    for probe_only in ("activity_kinds", "callback_domains", "noop_callbacks"):
        assert not hasattr(n, probe_only)
        assert probe_only not in {f.name for f in dataclasses.fields(CaptureOptions)}
