"""What makes many ranks cheap, checked against independent references: the unions of kernel
intervals of many ranks at once equal the per-rank numpy unions of hookmagic.common.intervals;
the grouped timeline's shares equal a brute-force count over a fine grid; a set of 150
SYNTHETIC ranks draws a grouped timeline and a one-series straggler chart, and zooms to ranks."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import hookmagic
from hookmagic.analysis.ranks import _segmented_unions, busy_share
from hookmagic.common.intervals import merge_intervals
from benchmarks.multirank_scale import make_ranks   # the scale benchmark's SYNTHETIC ranks

pytest.importorskip("duckdb")


def test_unions_of_many_ranks_at_once_equal_each_rank_alone():
    rng = np.random.default_rng(7)
    rank = rng.integers(0, 40, 5000)
    s = 1_795_000_000_000_000_000 + rng.integers(0, 10**7, 5000)   # CUPTI-sized clock values
    e = s + rng.integers(-5, 50_000, 5000)                          # some empty (end < start)
    ranks = np.unique(rank)
    owner, ms, me = _segmented_unions(ranks, rank, s, e)
    for r in ranks:
        want_s, want_e = merge_intervals(s[rank == r], e[rank == r])
        np.testing.assert_array_equal(ms[owner == r], want_s)
        np.testing.assert_array_equal(me[owner == r], want_e)


def test_busy_share_equals_a_brute_force_count():
    iv = pd.DataFrame({"rank": [0, 0, 1, 2], "start_ns": [0, 50, 10, 0],
                       "end_ns": [30, 100, 90, 100]})
    groups = np.array([0, 0, 1])
    edges = np.array([0, 25, 50, 75, 100])
    got = busy_share(iv, groups, edges)
    grid = np.arange(100) + 0.5
    for g, members in ((0, [0, 1]), (1, [2])):
        cover = sum(((grid >= a) & (grid < b)).astype(float)
                    for r, a, b in iv[["rank", "start_ns", "end_ns"]].itertuples(index=False)
                    if r in members)
        want = [cover[i * 25:(i + 1) * 25].sum() / 25 / len(members) for i in range(4)]
        np.testing.assert_allclose(got[g], want)


def test_many_ranks_draw_grouped_rows_and_zoom(tmp_path):
    make_ranks(tmp_path, 150, 400)      # SYNTHETIC ranks; rank 75 is 2 ms late every step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = hookmagic.load_many(tmp_path)
    with ts:
        st = ts.stragglers()
        assert (st["straggler_rank"] == 75).all() and len(st) == 2
        assert st["lateness_ns"].tolist() == [2_000_000, 2_000_000]
        fig = ts.timeline()
        assert fig.data[0].type == "heatmap" and len(fig.data[0].y) == 50   # 3 ranks a row
        z = np.asarray(fig.data[0].z)
        assert z.min() >= 0 and z.max() <= 1
        zoom = ts.timeline(ranks=range(74, 77))
        assert {t.type for t in zoom.data} == {"scattergl"}
        assert set(zoom.layout.yaxis.categoryarray) == {"rank 74", "rank 75", "rank 76"}
        assert len(ts.straggler_chart(max_legend=0).data) == 1
