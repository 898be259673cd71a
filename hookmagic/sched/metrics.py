"""Scheduling metrics: pure functions over a result's request and batch tables.

Identical for simulated and real runs. Everything takes DataFrames and returns DataFrames:
no plotting, no I/O.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["summary", "batch_histogram", "queue_depth", "mean_depth", "stream_busy",
           "camera_stats", "latency_cdf", "fidelity", "PERCENTILES"]

PERCENTILES = (50, 90, 95, 99)
_DROPS = ("rejected", "timeout", "late", "stale")
#: the columns of :func:`summary`, also when there is nothing to summarise (an empty workload)
SUMMARY_COLUMNS = (("offered", "served") + _DROPS
                   + ("throughput_rps", "goodput_rps", "slo_pct", "slo_ms", "mean_ms")
                   + tuple(f"p{p}_ms" for p in PERCENTILES)
                   + tuple(f"{n}_{s}_ms" for n in ("queue", "compute") for s in ("mean", "p50", "p99"))
                   + ("batch_mean",))


def _groups(frame: pd.DataFrame, by: str | Sequence[str] | None):
    if by is None:
        yield "all", frame
        return
    keys = [by] if isinstance(by, str) else list(by)
    for key, g in frame.groupby(keys, sort=True, observed=True):
        yield (key[0] if len(keys) == 1 else key), g


def summary(requests: pd.DataFrame, by: str | Sequence[str] | None = "model",
            duration_s: float | None = None, warmup_s: float = 0.0) -> pd.DataFrame:
    """One row per group of ``by`` (None: one row, "all").

    Columns: ``offered``, ``served``, drops by kind (``rejected``, ``timeout``, ``late``,
    ``stale``), ``throughput_rps`` (served per second), ``goodput_rps`` (served within SLO per
    second), ``slo_pct`` (share of *offered* requests served within their SLO), latency
    ``mean/p50/p90/p95/p99`` in ms, the same percentiles of ``queue_ms`` and ``compute_ms``
    (p50, p99, mean), and ``batch_mean`` (mean size of the batches the group's requests rode in).
    Requests arriving before ``warmup_s`` are left out; rates use the window
    ``duration_s - warmup_s`` (default: first to last arrival).
    """
    r = requests[requests["arrival_s"] >= warmup_s] if warmup_s else requests
    if duration_s is None:
        duration_s = float(r["arrival_s"].max()) if len(r) else 0.0
    window = max(float(duration_s) - warmup_s, 1e-12)
    rows = []
    for key, g in _groups(r, by):
        st = g["status"].astype(str).to_numpy()
        done = st == "done"
        lat = g["latency_ms"].to_numpy()[done]
        qms = g["queue_ms"].to_numpy()[done]
        cms = g["compute_ms"].to_numpy()[done]
        met = int(g["met_slo"].sum())
        row = {"group": key, "offered": len(g), "served": int(done.sum())}
        for d in _DROPS:
            row[d] = int((st == d).sum())
        row["throughput_rps"] = row["served"] / window
        row["goodput_rps"] = met / window
        row["slo_pct"] = 100.0 * met / len(g) if len(g) else np.nan
        row["slo_ms"] = float(g["slo_ms"].median()) if len(g) else np.nan
        row["mean_ms"] = float(lat.mean()) if len(lat) else np.nan
        for p in PERCENTILES:
            row[f"p{p}_ms"] = float(np.percentile(lat, p)) if len(lat) else np.nan
        for name, x in (("queue", qms), ("compute", cms)):
            row[f"{name}_mean_ms"] = float(x.mean()) if len(x) else np.nan
            row[f"{name}_p50_ms"] = float(np.percentile(x, 50)) if len(x) else np.nan
            row[f"{name}_p99_ms"] = float(np.percentile(x, 99)) if len(x) else np.nan
        sizes = g.loc[done, ["batch", "batch_size"]].drop_duplicates("batch")["batch_size"]
        row["batch_mean"] = float(sizes.mean()) if len(sizes) else np.nan
        rows.append(row)
    out = pd.DataFrame(rows)
    if not len(out):  # an empty workload: no rows, but every column, so code that reads one works
        name = "group" if by is None else (by if isinstance(by, str) else "/".join(by))
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("offered", "served") + _DROPS
                                          else "float64") for c in SUMMARY_COLUMNS},
                            index=pd.Index([], name=name))
    if by is not None and len(out):
        name = by if isinstance(by, str) else "/".join(by)
        out = out.rename(columns={"group": name}).set_index(name)
    elif len(out):
        out = out.set_index("group")
    return out


def batch_histogram(batches: pd.DataFrame, by: str = "model") -> pd.DataFrame:
    """How many batches of each size were formed: columns ``by``, ``size``, ``batches``, ``share``."""
    if batches.empty:
        return pd.DataFrame(columns=[by, "size", "batches", "share"])
    h = batches.groupby([by, "size"]).size().rename("batches").reset_index()
    h["share"] = h["batches"] / h.groupby(by)["batches"].transform("sum")
    return h


def queue_depth(requests: pd.DataFrame, by: str | None = "model") -> pd.DataFrame:
    """Requests waiting (admitted, not yet started or dropped) over time, as a step function.

    One row per change: ``time_s``, ``depth`` (after the change), and the ``by`` column. A
    request rejected on arrival never enters the queue.
    """
    st = requests["status"].astype(str).to_numpy()
    arrival = requests["arrival_s"].to_numpy(float)
    leave = np.where(st == "done", requests["start_s"].to_numpy(float),
                     requests["drop_s"].to_numpy(float) if "drop_s" in requests
                     else np.nan)
    entered = (st != "rejected") & (st != "pending")
    pending = st == "pending"
    keys = requests[by].to_numpy() if by else np.zeros(len(requests), dtype=np.int64)
    t = np.concatenate([arrival[entered | pending], leave[entered]])
    d = np.concatenate([np.ones(int((entered | pending).sum())), -np.ones(int(entered.sum()))])
    k = np.concatenate([keys[entered | pending], keys[entered]])
    frame = pd.DataFrame({"time_s": t, "delta": d, "key": k})
    # Departures before arrivals at the same instant: a request served the moment it arrives
    # never counts as waiting.
    frame = frame.sort_values(["key", "time_s", "delta"], kind="stable")
    frame["depth"] = frame.groupby("key")["delta"].cumsum()
    frame = frame.drop(columns="delta").rename(columns={"key": by or "all"})
    return frame.reset_index(drop=True)


def mean_depth(depth: pd.DataFrame, t0: float, t1: float, by: str | None = "model") -> pd.Series:
    """Time-average of a :func:`queue_depth` step function over ``[t0, t1]``, per ``by``."""
    col = by or "all"
    out = {}
    for key, g in depth.groupby(col, sort=True):
        t = g["time_s"].to_numpy()
        v = g["depth"].to_numpy()
        # depth holds from t[j] to t[j+1]
        right = np.append(t[1:], t1)
        lo = np.clip(t, t0, t1)
        hi = np.clip(right, t0, t1)
        out[key] = float(((hi - lo) * v).sum() / (t1 - t0))
    return pd.Series(out, name="mean_depth")


def stream_busy(batches: pd.DataFrame, duration_s: float) -> pd.DataFrame:
    """Per stream: ``batches``, ``busy_s`` and ``busy_pct`` of ``[0, duration_s]``.

    A stream runs one batch at a time, so its busy time is the sum of its batches' spans
    (clipped to the window).
    """
    if batches.empty:
        return pd.DataFrame(columns=["batches", "busy_s", "busy_pct"])
    b = batches.assign(span=(batches["end_s"].clip(upper=duration_s)
                             - batches["start_s"].clip(upper=duration_s)).clip(lower=0))
    g = b.groupby("stream").agg(batches=("batch", "size"), busy_s=("span", "sum"))
    g["busy_pct"] = 100.0 * g["busy_s"] / duration_s
    return g


def camera_stats(requests: pd.DataFrame) -> pd.DataFrame:
    """Per camera: frames, served, dropped, SLO %, and staleness (age at completion) p50/p99 ms."""
    cam = requests[requests["camera"] >= 0]
    rows = []
    for c, g in cam.groupby("camera"):
        done = g["status"].astype(str) == "done"
        lat = g.loc[done, "latency_ms"].to_numpy()
        rows.append({"camera": c, "model": g["model"].iloc[0], "frames": len(g),
                     "served": int(done.sum()), "dropped": int((~done).sum()),
                     "slo_pct": 100.0 * g["met_slo"].mean(),
                     "staleness_p50_ms": float(np.percentile(lat, 50)) if len(lat) else np.nan,
                     "staleness_p99_ms": float(np.percentile(lat, 99)) if len(lat) else np.nan})
    cols = ["model", "frames", "served", "dropped", "slo_pct", "staleness_p50_ms",
            "staleness_p99_ms"]
    return (pd.DataFrame(rows).set_index("camera") if rows
            else pd.DataFrame(columns=cols, index=pd.Index([], name="camera")))


def latency_cdf(requests: pd.DataFrame, by: str = "model", points: int = 200) -> pd.DataFrame:
    """Empirical CDF of served latency per ``by``: columns ``by``, ``latency_ms``, ``fraction``."""
    out = []
    done = requests[requests["status"].astype(str) == "done"]
    q = np.linspace(0, 1, points)
    for key, g in done.groupby(by, sort=True, observed=True):
        lat = g["latency_ms"].to_numpy()
        out.append(pd.DataFrame({by: key, "latency_ms": np.quantile(lat, q), "fraction": q}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=[by, "latency_ms", "fraction"])


def fidelity(sim: pd.DataFrame, real: pd.DataFrame, tolerance_pct: float = 10.0,
             slo_points: float = 2.0) -> pd.DataFrame:
    """Compare two :func:`summary` tables (same index): p50, p99 and SLO attainment.

    Columns ``p50_sim_ms``, ``p50_real_ms``, ``p50_err_pct`` (relative to real), the same for
    p99, ``slo_sim_pct``, ``slo_real_pct``, ``slo_diff_pts``, and ``ok`` (both errors within
    ``tolerance_pct`` and the SLO difference within ``slo_points``).
    """
    out = pd.DataFrame(index=real.index)
    for p in ("p50", "p99"):
        out[f"{p}_sim_ms"] = sim[f"{p}_ms"]
        out[f"{p}_real_ms"] = real[f"{p}_ms"]
        out[f"{p}_err_pct"] = 100.0 * (sim[f"{p}_ms"] - real[f"{p}_ms"]) / real[f"{p}_ms"]
    out["slo_sim_pct"] = sim["slo_pct"]
    out["slo_real_pct"] = real["slo_pct"]
    out["slo_diff_pts"] = sim["slo_pct"] - real["slo_pct"]
    out["ok"] = ((out["p50_err_pct"].abs() <= tolerance_pct)
                 & (out["p99_err_pct"].abs() <= tolerance_pct)
                 & (out["slo_diff_pts"].abs() <= slo_points))
    return out
