"""Lite captures: ``hookmagic.capture(lite=True)`` / ``%%cudahook --lite``.

What CUPTI turns on is decided by the native session's own selection functions (the ones
``start()`` uses), so these tests read the real choice without a GPU; the GPU tests
(tests/gpu/test_lite_schedule_gpu.py) check what a lite capture records against torch.profiler.
"""
from __future__ import annotations

import dataclasses

import pytest
import hookmagic
from hookmagic.common.errors import HookmagicError, InvalidArgument
from hookmagic.cupti import library
from hookmagic.cupti.errors import CaptureOptionError
from hookmagic.cupti.options import CaptureOptions
from hookmagic.cupti.session import not_recorded_notes
from hookmagic.trace import Trace
from hookmagic.views.summary import summary_text
from tests.conftest import synthetic_meta, synthetic_tables

native = pytest.importorskip("hookmagic._native", reason="native extension not built")
KINDS = native.enum_names()["activity_kind"]


def _kinds(options: CaptureOptions, subscribed: bool) -> set[str]:
    names = {v: k for k, v in KINDS.items()}
    return {names[k] for k in native.activity_selection(options.to_native(native), subscribed)}


def test_lite_turns_off_everything_but_the_four_record_kinds():
    o = CaptureOptions(lite=True)
    assert (o.stacks, o.module_names, o.nvml, o.sync) == (False, False, False, False)
    assert (o.kernels, o.memory, o.api, o.nvtx, o.allocator_history) == (True, True, False,
                                                                          False, False)
    chosen = native.callback_selection(o.to_native(native))
    # CUPTI's callback API only for what memory needs: cuMemMap/cuMemUnmap, never launches
    assert chosen == {"subscribe": True, "roles": ["map", "unmap"]}
    for subscribed in (True, False):
        assert _kinds(o, subscribed) == {"concurrent_kernel", "memcpy", "memset", "memory2"}


def test_the_native_struct_gets_the_lite_switches():
    n = CaptureOptions(lite=True).to_native(native)
    assert (n.launch_callbacks, n.sync, n.stacks, n.kernels, n.memory) == (False, False, False,
                                                                           True, True)
    n = CaptureOptions(sync=False).to_native(native)
    assert (n.launch_callbacks, n.sync) == (True, False)


def test_lite_without_memory_does_not_subscribe_at_all():
    o = CaptureOptions(lite=True, memory=False)
    assert native.callback_selection(o.to_native(native)) == {"subscribe": False, "roles": []}
    assert _kinds(o, False) == {"concurrent_kernel", "memcpy", "memset"}
    o = CaptureOptions(lite=True, callbacks=False)
    assert native.callback_selection(o.to_native(native))["subscribe"] is False


def test_defaults_are_unchanged_by_the_selection():
    o = CaptureOptions()
    chosen = native.callback_selection(o.to_native(native))
    assert chosen == {"subscribe": True, "roles": ["launch", "map", "unmap", "sync"]}
    # synchronisation from callbacks when subscribed, from CUPTI's records when not
    assert _kinds(o, True) == {"concurrent_kernel", "memcpy", "memset", "memory2"}
    assert _kinds(o, False) == {"concurrent_kernel", "memcpy", "memset", "memory2",
                                "synchronization"}
    assert "runtime" in _kinds(CaptureOptions(api=True), True)
    assert "synchronization" not in _kinds(CaptureOptions(sync=False), False)


@pytest.mark.parametrize("clash", ["stacks", "module_names", "nvml", "sync", "api", "nvtx",
                                   "allocator_history"])
def test_contradictory_options_are_refused_in_one_line(clash):
    with pytest.raises(CaptureOptionError, match=f"lite=True contradicts {clash}=True") as info:
        hookmagic.capture(lite=True, **{clash: True})
    assert isinstance(info.value, InvalidArgument) and isinstance(info.value, ValueError)
    assert isinstance(info.value, HookmagicError) and "\n" not in str(info.value)


def test_lite_over_an_options_object_is_not_a_contradiction():
    cm = hookmagic.capture(CaptureOptions(max_buffers=4), lite=True)
    assert cm.capture_options == CaptureOptions(lite=True, max_buffers=4)
    assert cm.options["lite"] is True and cm.options["stacks"] is False
    assert dataclasses.asdict(cm.capture_options) == cm.options


def test_notes_say_what_a_capture_could_not_record():
    lite = not_recorded_notes(CaptureOptions(lite=True), refused=False, holder="X",
                              frames_supported=True, python="3.12.1")
    assert lite == ["Lite capture: Python stacks, threads, ranges, synchronisation and GPU "
                    "samples were not recorded (kernels, copies, memsets and memory only)."]
    refused = not_recorded_notes(CaptureOptions(lite=True), refused=True, holder="torch.profiler",
                                 frames_supported=True, python="3.12.1")
    assert len(refused) == 2 and "torch.profiler holds CUPTI" in refused[1]
    old = not_recorded_notes(CaptureOptions(), refused=False, holder="X",
                             frames_supported=False, python="3.14.0")
    assert len(old) == 1 and "not Python 3.14.0" in old[0]
    assert not_recorded_notes(CaptureOptions(), refused=False, holder="X",
                              frames_supported=True, python="3.12.1") == []
    assert not_recorded_notes(CaptureOptions(stacks=False), refused=False, holder="X",
                              frames_supported=False, python="3.14.0") == []
    (no_cb,) = not_recorded_notes(CaptureOptions(callbacks=False), refused=False, holder="X",
                                  frames_supported=True, python="3.12.1")
    assert "callbacks=False" in no_cb


def test_this_build_reads_this_pythons_frames():
    import sys

    assert native.frames_supported() is ((3, 10) <= sys.version_info[:2] <= (3, 13))


def test_the_lite_note_is_one_line_of_the_printed_summary():
    (note,) = not_recorded_notes(CaptureOptions(lite=True), refused=False, holder="X",
                                 frames_supported=True, python="3.12.1")
    meta = synthetic_meta()
    meta["warnings"] = [note]
    text = summary_text(Trace(synthetic_tables(), meta).summary())
    assert f"  ! {note}" in text.splitlines()


# -- %%cudahook --lite, through a real IPython shell and the real capture (no GPU here) --------
@pytest.fixture
def ip(monkeypatch):
    # IPython is imported here, not at the top: the GPU machine runs this file without it
    shell_module = pytest.importorskip("IPython.core.interactiveshell",
                                       reason="needs IPython (a dev dependency)")
    InteractiveShell = shell_module.InteractiveShell  # noqa: N806
    library.driver_info.cache_clear()
    monkeypatch.setattr(library, "driver_info",
                        lambda: library.DriverInfo(error="no NVIDIA driver was found (synthetic)"))
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "hookmagic")
    yield shell
    shell.run_line_magic("unload_ext", "hookmagic")


def test_magic_lite_runs_the_cell_with_a_lite_capture(ip):
    result = ip.run_cell("%%cudahook --lite -v t\nx = 41\nx + 1")
    assert result.success and result.result == 42
    trace = ip.user_ns["t"]
    assert trace.status == "unavailable"          # no GPU here; the options are still saved
    options = trace.meta["options"]
    assert options["lite"] is True and options["stacks"] is False and options["nvml"] is False


@pytest.mark.parametrize("flag", ["--stacks", "--api", "--allocator"])
def test_magic_lite_with_a_stack_option_is_one_usage_error(ip, flag):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("cudahook", f"--lite {flag}", "lite_cell_ran = 1")
    message = str(info.value)
    assert "\n" not in message and "--lite" in message and flag in message
    assert "lite_cell_ran" not in ip.user_ns  # refused before the cell ran
