"""The one correlation-id join, against a pandas merge as the independent reference."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hookmagic.trace.correlation import CorrelationIndex


def _reference(callers: pd.DataFrame, query: np.ndarray, keep: str, by: str | None) -> np.ndarray:
    """Row of each query id's caller by pandas: sort, drop duplicates, merge."""
    c = callers[callers["correlation"] > 0].reset_index().rename(columns={"index": "row"})
    c = c.sort_values([by or "row", "row"], kind="stable")
    c = c.drop_duplicates("correlation", keep=keep)
    q = pd.DataFrame({"correlation": query})
    return q.merge(c[["correlation", "row"]], on="correlation", how="left")["row"] \
        .fillna(-1).astype(np.int64).to_numpy()


@pytest.mark.parametrize("keep", ["first", "last"])
@pytest.mark.parametrize("by", [None, "start_ns"])
def test_rows_match_a_pandas_merge_on_synthetic_ids(keep, by):
    rng = np.random.default_rng(7)
    callers = pd.DataFrame({"correlation": rng.integers(-2, 40, 300),
                            "start_ns": rng.permutation(300) * 10})
    query = rng.integers(-2, 45, 500)
    index = CorrelationIndex(callers["correlation"].to_numpy(), keep=keep,
                             by=None if by is None else callers[by].to_numpy(),
                             start_ns=callers["start_ns"].to_numpy())
    expected = _reference(callers, query, keep, by)
    np.testing.assert_array_equal(index.row_of(query), expected)
    starts = callers["start_ns"].to_numpy()
    np.testing.assert_array_equal(index.get("start_ns", query, -1),
                                  np.where(expected >= 0, starts[expected], -1))


def test_ids_of_zero_or_below_never_match():
    index = CorrelationIndex(np.array([0, -1, 3]), thread=np.array([10, 11, 12]))
    assert index.row_of(np.array([0, -1, 3, 4])).tolist() == [-1, -1, 2, -1]
    assert index.get("thread", np.array([0, 3]), -1).tolist() == [-1, 12]


def test_sorted_unique_ids_and_empty_inputs():
    index = CorrelationIndex(np.array([1, 2, 5]))
    assert index.row_of(np.array([5, 1, 3])).tolist() == [2, 0, -1]
    assert len(CorrelationIndex(np.array([], dtype=np.int64))) == 0
    assert CorrelationIndex(np.array([], dtype=np.int64)).row_of(np.array([1])).tolist() == [-1]
    with pytest.raises(ValueError, match="keep"):
        CorrelationIndex(np.array([2, 1]), keep="middle")
