"""The native Session's lifecycle and error paths, run over a CPU stand-in for CUPTI.

The stand-in (native/testing/fake_cupti.cpp) fails or throws where told; the Session, its
buffers, callbacks and entry points are the real ones the extension ships. A C++ exception that
reached CUPTI's C frames would terminate this process: each test surviving is the first check.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

native = pytest.importorskip("tests.hookmagic_decoder_testing",
                             reason="the native test extension is built by `pip install -e .`")

CONCURRENT_KERNEL = 10   # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL in cupti_activity.h


def test_a_clean_capture_takes_and_returns_every_buffer():
    out = native.fake_session("clean")
    assert out["start_error"] is None and out["running_after_start"] and out["subscribed"]
    assert out["buffers_out_during"] == 1 and out["buffers_out_after"] == 0
    assert out["sync_rows"] == 1                     # the synchronising call became one row
    calls = out["calls"]
    assert calls["enable"] == calls["disable"] > 0 and calls["subscribe"] == calls["unsubscribe"] == 1
    assert sum(out[k] for k in out if k.startswith("faults_")) == 0


def test_an_exception_while_decoding_is_caught_counted_and_the_buffer_returned():
    out = native.fake_session("throw_in_decode")
    assert out["faults_buffer_completed"] == 1
    assert out["buffers_out_after"] == 0             # handed back to the pool all the same
    assert not out["running_after_stop"]


def test_an_exception_inside_an_api_callback_is_caught_and_counted():
    out = native.fake_session("throw_in_callback")
    assert out["faults_api_callback"] == 2           # the entry and the exit callback
    assert out["sync_rows"] == 0                     # that call's row was lost, and counted
    assert out["calls"]["unsubscribe"] == 1


def test_the_process_survives_in_a_fresh_interpreter():
    # The same faults in a child process: a C++ exception escaping into CUPTI's frames would
    # end it with SIGABRT (std::terminate) instead of exit status 0.
    code = ("import tests.hookmagic_decoder_testing as n\n"
            "for s in ('throw_in_decode', 'throw_in_callback'):\n"
            "    n.fake_session(s)\n"
            "print('survived')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "survived" in done.stdout, done.stderr


def test_a_refused_activity_kind_rolls_back_what_was_enabled():
    out = native.fake_session("enable_refused")
    assert f"activity kind {CONCURRENT_KERNEL}" in out["start_error"]
    assert not out["running_after_start"] and not out["subscribed"]
    calls = out["calls"]
    assert calls["disable"] == calls["enable"] - 1   # all but the refused kind turned off
    assert calls["subscribe"] == calls["unsubscribe"] == 1


def test_another_subscriber_is_an_error_unless_activities_alone_are_allowed():
    refused = native.fake_session("subscribe_refused")
    assert refused["start_error"] and not refused["running_after_start"]
    assert refused["calls"]["enable"] == 0
    alone = native.fake_session("subscribe_refused", activities_without_callbacks=True)
    assert alone["start_error"] is None and alone["running_after_start"]
    assert not alone["subscribed"] and alone["calls"]["unsubscribe"] == 0
    # without callbacks, synchronisation comes from CUPTI's own records: one more kind enabled
    assert alone["calls"]["enable"] == native.fake_session("clean")["calls"]["enable"] + 1


def test_unknown_scenario_is_refused():
    with pytest.raises(ValueError):
        native.fake_session("nope")
