"""What a capture could not record is said on screen: the summary and the report show the
capture's notes (meta["warnings"]), one line each."""
from __future__ import annotations

import pandas as pd

from hookmagic.cupti.session import missing_stack_notes
from hookmagic.trace import Trace
from hookmagic.views.summary import summary_html, summary_text
from tests.conftest import synthetic_meta, synthetic_tables

KINETO_NOTE = ("Python stacks, threads, ranges and virtual-memory map/unmap were not recorded: "
               "PyTorch's profiler (Kineto keeps CUPTI after its first use in a process) holds "
               "CUPTI's callback API; kernels, copies and allocations were still captured. "
               "Restart the kernel to get them back.")


def _trace(warnings: list[str]) -> Trace:
    meta = synthetic_meta()
    meta["warnings"] = warnings
    return Trace(synthetic_tables(), meta)


def test_summary_and_report_say_what_was_not_recorded():
    trace = _trace([KINETO_NOTE])
    summary = trace.summary()
    assert summary.warnings == [KINETO_NOTE]
    text = summary_text(summary)
    assert f"  ! {KINETO_NOTE}" in text.splitlines()
    assert "holds CUPTI&#x27;s callback API" in summary_html(summary)


def test_multi_line_notes_are_shown_on_one_line():
    summary = _trace(["first part\n   second part"]).summary()
    assert "  ! first part second part" in summary_text(summary).splitlines()


def test_no_notes_no_lines():
    assert "!" not in summary_text(_trace([]).summary())


def test_kernels_without_stacks_are_counted_in_one_note():
    kernels = pd.DataFrame({"stack_id": [0, 3, -1, -1, 2]})
    (note,) = missing_stack_notes(kernels, stacks_wanted=True, callbacks_active=True)
    assert note.startswith("2 of 5 kernels have no Python stack")
    assert missing_stack_notes(kernels, stacks_wanted=False, callbacks_active=True) == []
    assert missing_stack_notes(kernels, stacks_wanted=True, callbacks_active=False) == []
    assert missing_stack_notes(kernels[kernels.stack_id >= 0], True, True) == []
