"""A TraceSet speaks the result protocol: summary() is a Headline whose numbers match the
stragglers known by construction (synthetic traces, tests/synthetic_ranks.py); save(path) writes
one folder that hookmagic.load(path) opens again with the same ranks, statuses and analyses;
the figures are named for their chart."""
from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest

import hookmagic
from hookmagic.common.results import SAVED_KIND_KEY, Headline
from hookmagic.trace.folder import save_trace_folder
from hookmagic.traceset import io as tsio
from tests.synthetic_ranks import MS, synthetic_rank_traces

pytest.importorskip("duckdb")
HOST = [[0.4, 0, 0, 0.4], [0, 0, 0, 0], [0, 5, 0, 0]]
EXTRA = [[0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 0, 0]]


@pytest.fixture
def folder(tmp_path):
    for r, t in enumerate(synthetic_rank_traces(HOST, EXTRA, world_size=4)):
        save_trace_folder(t, tmp_path / "run" / f"rank={r}")
    return tmp_path / "run"


def _open(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hookmagic.load_many(folder)


def test_summary_is_a_headline_of_the_known_stragglers(folder):
    with _open(folder) as ts:
        head = ts.summary()
        assert isinstance(head, Headline)
        # by construction: rank 0 last in steps 0 and 3 (0.4 ms each), rank 2 in 1, rank 1 in 2
        assert head["ranks"] == 4 and head["with_data"] == 3 and head["problems"] == 1
        assert head["steps"] == 4 and head["stragglers"] == 3
        assert head["most_often_last"] == 0 and head["times_last"] == 2
        assert head["median_lateness_ms"] == pytest.approx(0.4, abs=1e-6)
        frame = head.to_frame()
        assert frame.loc["steps", "value"] == 4
        assert "rank 3" not in head._repr_html_() or "3 (missing)" in str(head)
        assert any("3 (missing)" in n for n in head.notes)


def test_save_and_load_round_trip(folder, tmp_path):
    with _open(folder) as ts:
        want_st = ts.stragglers()
        want_ranks = ts.ranks[["rank", "status", "reason"]]
        saved = ts.save(tmp_path / "saved")
    assert saved == tmp_path / "saved" and tsio.sniff(saved)
    doc = json.loads((saved / "traceset.json").read_text())
    assert doc[SAVED_KIND_KEY] == "traceset"
    back = tsio.load(saved)
    with back:
        pd.testing.assert_frame_equal(back.stragglers(), want_st)
        pd.testing.assert_frame_equal(back.ranks[["rank", "status", "reason"]], want_ranks)
        assert back.stragglers().loc[1, "lateness_ns"] == pytest.approx(5 * MS, abs=1)
    # saving again over a saved set replaces it; over anything else is refused
    with tsio.load(saved) as again:
        again.save(saved)
        (tmp_path / "other").mkdir()
        with pytest.raises(tsio.TraceSetFileError, match="not a saved TraceSet"):
            again.save(tmp_path / "other")


def test_sniff_is_true_only_for_a_saved_set(folder, tmp_path):
    assert not tsio.sniff(folder) and not tsio.sniff(folder / "rank=0")
    assert not tsio.sniff(tmp_path / "nothing-here")
    (tmp_path / "f.json").write_text("{}")
    assert not tsio.sniff(tmp_path / "f.json")


@pytest.mark.parametrize("ranks", [[{"rank": -1, "status": "missing"}],
                                   [{"rank": "0", "status": "complete"}],
                                   [{"rank": 0, "status": "<b>"}],
                                   [{"rank": 0, "status": "missing"}] * 2, "x"])
def test_a_damaged_saved_manifest_is_one_clear_error(tmp_path, ranks):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "traceset.json").write_text(json.dumps(
        {"format": "hookmagic.traceset", SAVED_KIND_KEY: "traceset", "ranks": ranks}))
    with pytest.raises(tsio.TraceSetFileError):
        tsio.load(tmp_path / "s")


def test_figures_are_named_for_their_chart(folder):
    with _open(folder) as ts:
        assert not any(n.endswith("_figure") or n.startswith("plot_") for n in dir(ts))
        assert {t.name for t in ts.straggler_chart().data} == {"rank 0 last", "rank 1 last",
                                                               "rank 2 last"}


def test_a_saved_sets_rank_linked_outside_it_is_not_read(folder, tmp_path):
    import shutil
    with _open(folder) as ts:
        saved = ts.save(tmp_path / "saved")
    outside = tmp_path / "outside"
    shutil.copytree(saved / "rank=1", outside)      # a readable rank folder, outside the set
    shutil.rmtree(saved / "rank=1")
    (saved / "rank=1").symlink_to(outside, target_is_directory=True)
    with tsio.load(saved) as back:
        row = back.ranks.set_index("rank").loc[1]
        assert row["status"] == "damaged" and "missing or unreadable" in row["reason"]
        assert 1 not in set(back.sql("SELECT DISTINCT rank FROM kernels")["rank"])
