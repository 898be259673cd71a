"""The capture on a machine without a GPU: the code runs, one plain message says why nothing
was captured, and nothing else changes."""
from __future__ import annotations

import warnings

import pytest

import hookmagic
from hookmagic.cupti import library


def _no_driver(monkeypatch):
    library.driver_info.cache_clear()
    monkeypatch.setattr(library, "driver_info",
                        lambda: library.DriverInfo(error="no NVIDIA driver was found (synthetic)"))
    import hookmagic.cupti.session as session

    session._warned.clear()


def test_block_runs_and_says_why_once(monkeypatch):
    _no_driver(monkeypatch)
    ran = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with hookmagic.capture() as trace:
                ran.append(1)
    assert ran == [1, 1, 1]
    assert trace.meta["status"] == "unavailable"
    assert "no NVIDIA driver" in trace.meta["reason"]
    messages = [str(w.message) for w in caught if issubclass(w.category, hookmagic.CaptureUnavailable)]
    assert len(messages) == 1 and "nothing captured" in messages[0]
    assert len(trace.kernels) == 0 and list(trace.kernels.columns)[:2] == ["start_ns", "end_ns"]


def test_exception_propagates_once(monkeypatch):
    _no_driver(monkeypatch)
    with pytest.raises(KeyError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with hookmagic.capture() as trace:
                raise KeyError("user error")
    assert trace.meta["status"] == "unavailable"


def test_captures_do_not_nest(monkeypatch):
    import hookmagic.cupti.session as session

    session._warned.clear()
    assert session._lock.acquire(blocking=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with hookmagic.capture() as inner:
                pass
    finally:
        session._lock.release()
    assert "already running" in inner.meta["reason"]


def test_ranges_work_without_a_capture():
    with hookmagic.range("outside"):
        with hookmagic.range("nested"):
            pass

    @hookmagic.range("decorated")
    def f(x):
        return x + 1

    assert f(1) == 2
    with pytest.raises(ValueError):
        hookmagic.range("")


def test_cupti_path_override_that_does_not_exist(monkeypatch):
    monkeypatch.setenv("HOOKMAGIC_CUPTI", "/nonexistent/libcupti.so.13")
    path, why = library.find_cupti(13000)
    assert path is None and "HOOKMAGIC_CUPTI" in why


def test_conflicting_tools_are_named(monkeypatch):
    from hookmagic.cupti.conflicts import cupti_holder

    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/compute-sanitizer/libsanitizer-collection.so")
    assert cupti_holder() == "compute-sanitizer"
    monkeypatch.delenv("CUDA_INJECTION64_PATH")
    monkeypatch.setenv("NSYS_PROFILING_SESSION_ID", "1")
    assert cupti_holder() == "Nsight Systems (nsys)"
