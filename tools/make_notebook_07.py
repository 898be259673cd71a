"""Write and execute notebooks/07_multirank.ipynb (the replay of the 2-GPU DDP recordings).

    python tools/make_notebook_07.py
"""
from __future__ import annotations

from pathlib import Path

from notebook_writer import write_notebook

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks" / "07_multirank.ipynb"

CELLS: list[tuple[str, str]] = [
    ("md", """# 07 · Many ranks: a real 2-GPU DDP job, one trace per rank, analysed together

This notebook is a **REPLAY of recordings made on a 2-GPU machine** (the GPU, driver and date are
printed below, from the recordings themselves). `benchmarks/gpu/multirank.sh` ran a real
`torchrun --nproc-per-node 2` DDP job (a 4-layer transformer encoder, NCCL all-reduce of the
gradients) three times: without a straggler, with rank 1 sleeping 20 ms before every forward
pass, and with rank 0 sleeping 50 ms. The training script only does `import hookmagic`: each
rank captured optimizer steps 6 to 9 because `HOOKMAGIC_CAPTURE_DIR` and
`HOOKMAGIC_CAPTURE_STEPS=6:10` were set, and wrote its own trace folder `rank=<N>` (kept here as one file per rank, `rank=<N>.hmtrace`).
Each job also wrote `truth_rank=<N>.json`: the sleeps really taken, the reference for the
straggler analysis. Guide: `docs/multirank.md`."""),
    ("code", """# NBVAL_CHECK_OUTPUT
import json
import warnings
from pathlib import Path

import hookmagic

runs = Path("recordings/multirank")
for job in sorted(p for p in runs.iterdir() if p.is_dir()):
    meta = hookmagic.load(job / "rank=0.hmtrace").meta
    print(f"{job.name}: {meta['description']}")
    print(f"    recorded on {meta['recorded_on']}")"""),
    ("md", """## One job, two ranks

`hookmagic.load_many` opens every rank's folder as one `TraceSet`. Nothing is loaded into
Python: DuckDB reads the Parquet files when a question is asked."""),
    ("code", """# NBVAL_CHECK_OUTPUT
ts = hookmagic.load_many(runs / "ddp_slow1_20ms")
print(ts)
ts.ranks[["rank", "status", "host", "gpu", "gpu_uuid", "launcher", "kernels"]]"""),
    ("md", """## Who is late, by how much, and why

For every step: the collective where the last rank arrived latest, that rank, its lateness
(its arrival minus the other's), and the cause: `host` when its GPU sat idle longer before the
collective (waiting for its host: here, the sleep), `compute` when it computed longer. Next to
it, the sleep rank 1 really took in that step (`time.perf_counter` around `time.sleep` in the
job)."""),
    ("code", """# NBVAL_CHECK_OUTPUT
truth = json.loads((runs / "ddp_slow1_20ms" / "truth_rank=1.json").read_text())
st = ts.stragglers()
table = st[["step", "collective", "straggler_rank", "cause"]].assign(
    lateness_ms=(st["lateness_ns"] / 1e6).round(2),
    slept_ms=[round(truth["sleep_s"][s] * 1e3, 2) for s in st["step"]],
    others_wait_ms=(st["others_wait_ns"] / 1e6).round(2))
table["error_pct"] = (100 * (table["lateness_ms"] - table["slept_ms"]) / table["slept_ms"]).round(1)
named = (st["straggler_rank"] == truth["slow_rank"]).sum()
later = table.iloc[1:]  # the first captured step also carries the capture's own start
start_ms = ts.meta(truth["slow_rank"])["overhead"]["start_s"] * 1e3
print(f"rank {truth['slow_rank']} was slowed; it is named last in {named} of {len(st)} steps; "
      f"from the second captured step on, lateness within {later['error_pct'].abs().max():.1f}% "
      f"of the measured sleep")
print(f"first captured step: {table['lateness_ms'].iloc[0] - table['slept_ms'].iloc[0]:.1f} ms "
      f"more than the sleep; that rank's capture start took {start_ms:.1f} ms")
table"""),
    ("md", """The first captured step is late by more than the sleep, and that is real: the capture
starts at the previous step's `optimizer.step()`, and on the slowed rank, whose host is the
bottleneck, attaching CUPTI (the `start_s` in each rank's `meta["overhead"]`) delays the
next step for real; on the fast rank the same start hides in its wait for the GPU. The
analysis leaves that step's cause empty (nothing before it was captured to compare)."""),
    ("code", "ts.straggler_chart()"),
    ("md", """## The same question on the other two jobs

Without a straggler the last rank is late by little (noise); with rank 0 sleeping 50 ms,
rank 0 is named."""),
    ("code", """# NBVAL_CHECK_OUTPUT
for job in ("ddp_baseline", "ddp_slow0_50ms"):
    other = hookmagic.load_many(runs / job)
    s = other.stragglers()
    print(f"{job}: last rank per step {s['straggler_rank'].tolist()}, "
          f"lateness {', '.join(f'{x / 1e6:.2f}' for x in s['lateness_ns'])} ms, "
          f"causes {s['cause'].tolist()}")
    other.close()"""),
    ("md", """## Communication and computation

Overlap (as Holistic Trace Analysis defines it): the share of NCCL kernel time during which a
compute kernel also ran on the rank's GPU. `wait_ns` in `per_rank()` is the time spent inside
collectives beyond the shortest kernel of each: waiting for the other rank."""),
    ("code", """# NBVAL_CHECK_OUTPUT
ov = ts.overlap()
ns = [c for c in ov.columns if c.endswith("_ns")]
ms = {c.replace("_ns", "_ms"): (ov[c] / 1e6).round(2) for c in ns}
ov.assign(**ms).drop(columns=ns).round(1)"""),
    ("code", """# NBVAL_CHECK_OUTPUT
summ = ts.per_rank()
summ[["rank", "kernels", "times_last"]].assign(
    compute_ms=(summ["compute_ns"] / 1e6).round(2), comm_ms=(summ["comm_ns"] / 1e6).round(2),
    wait_ms=(summ["wait_ns"] / 1e6).round(2))"""),
    ("md", """## One row per rank

The timeline draws each rank's busy time, compute and NCCL, on one clock (both ranks ran on one
host, so they share CUPTI's clock; `ts.clock()` says so). Zoom in on a step: rank 1's GPU idles
during its sleep while rank 0 sits inside the all-reduce, waiting."""),
    ("code", """# NBVAL_CHECK_OUTPUT
ts.clock()"""),
    ("code", "ts.timeline()"),
    ("md", """## Each rank against the median rank

GPU time per kernel name, rank minus median (with two ranks the median is their mean): the
NCCL kernel of the rank that waited stands out."""),
    ("code", "ts.vs_median_heatmap(top=12)"),
    ("md", """## Anything else: SQL

The set's DuckDB connection has one view per trace table, each with a `rank` column."""),
    ("code", """# NBVAL_CHECK_OUTPUT
ts.sql(\"\"\"
    SELECT rank, count(*) AS kernels, round(sum(duration_ns) / 1e6, 2) AS gpu_ms,
           count(*) FILTER (WHERE name LIKE 'nccl%') AS nccl_kernels
    FROM kernels GROUP BY rank ORDER BY rank\"\"\")"""),
    ("md", """## Capturing your own job

```bash
HOOKMAGIC_CAPTURE_DIR=/tmp/run HOOKMAGIC_CAPTURE_STEPS=6:10 torchrun --nproc-per-node 2 train.py
```

or `with hookmagic.capture(dir="/tmp/run"):` in code, or on Ray workers
`with hookmagic.ray.capture("train"):` and `hookmagic.ray.gather("train")` on the driver."""),
]


def build() -> None:
    write_notebook(CELLS, NB, timeout=300)


if __name__ == "__main__":
    build()
