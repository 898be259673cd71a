"""Rough edges a new user found in the views, each checked on real data."""
from __future__ import annotations

import re

import pandas as pd

import hookmagic
from hookmagic.analysis.fragmentation import would_fail
from hookmagic.analysis.kernels import kernel_summary
from hookmagic.trace.model import Trace
from hookmagic.views.memory_timeline import memory_timeline_figure, what_if_figure
from hookmagic.views.report import kernels_html

from .test_memory_fragmentation import MiB, synthetic_events


def test_timeline_says_one_stream_row_and_ticks_without_si_prefixes():
    cupy = hookmagic.recordings.load("cupy_pipeline")          # one stream
    fig = cupy.timeline()
    assert re.search(r"on 1 stream row$", fig.layout.title.text.split("<br>")[0])
    assert fig.layout.xaxis.tickformat == ",~f"                 # 14,960 ms, never "14.96k ms"
    resnet = hookmagic.recordings.load("resnet18_inference_churn")
    from hookmagic.analysis.memory import memory_over_time
    mem = memory_timeline_figure(memory_over_time(resnet))
    assert all(ax.tickformat == ",~f" for ax in (mem.layout.xaxis,))


def test_diff_of_two_parts_of_one_capture_names_before_and_after():
    mlp = hookmagic.recordings.load("mlp_training")
    t = mlp.kernels["start_ns"].median()

    def part(keep) -> Trace:
        tables = {n: (f[keep(f["start_ns"])] if "start_ns" in f else f)
                  for n, f in mlp.tables.items()}
        return Trace(tables, dict(mlp.meta))

    title = part(lambda s: s < t).diff(part(lambda s: s >= t)).layout.title.text
    assert title.startswith("Differential flame graph, mlp_training, before → after:")
    assert "mlp_training → mlp_training" not in title


def test_would_fail_states_sizes_in_binary_units():
    ev = synthetic_events()
    r = would_fail(ev, 5 * MiB, device_free=10 * MiB)
    assert "20 MiB segment" in r.reason and "10 MiB free" in r.reason
    assert not re.search(r"\d{6,}", r.reason), r.reason          # no raw byte counts


def test_report_kernels_tab_shows_whole_names_that_wrap():
    resnet = hookmagic.recordings.load("resnet18_inference_churn")
    ks = kernel_summary(resnet)
    longest = max(ks["name"].head(50), key=len)
    assert len(longest) > 90
    page = kernels_html(ks)
    import html
    assert html.escape(longest) in page and "…" not in page
    assert "overflow-wrap:anywhere" in page and 'class="hm-scroll"' in page


def test_what_if_table_is_tall_enough_for_every_wrapped_row():
    """Synthetic what-if rows with long names: the figure height counts wrapped lines."""
    table = pd.DataFrame({
        "model": ["pytorch default", "pytorch expandable_segments:True",
                  "pytorch garbage_collection_threshold:0.6,max_split_size_mb:128",
                  "best-fit (ideal heap)", "cupy pool", "pytorch roundup_power2_divisions:4",
                  "pytorch max_split_size_mb:64"],
        "setting": ["", "expandable_segments:True",
                    "garbage_collection_threshold:0.6,max_split_size_mb:128", "", "",
                    "roundup_power2_divisions:4", "max_split_size_mb:64"],
        "peak_reserved": [100 * MiB] * 7, "peak_allocated": [90 * MiB] * 7,
        "waste_at_peak": [0.1] * 7, "device_allocs": [3] * 7, "saved_bytes": [0] * 7,
        "saved_pct": [0.0] * 7,
    })
    fig = what_if_figure(table)
    rows = fig.data[0].cells.height
    # every row's lines (the two text columns wrap at ~22 and ~32 characters) fit below the
    # title and header without the table scrolling
    lines = [max(1, -(-len(m) // 22), -(-len(s or "-") // 32))
             for m, s in zip(table["model"], table["setting"])]
    assert fig.layout.height >= 60 + 40 + rows * sum(lines)
    assert sum(lines) > len(table)                                 # some rows do wrap
