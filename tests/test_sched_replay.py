"""``benchmarks/sched_fidelity.py --replay`` recomputes, without a GPU, the table that three
processes computed on an H100 (2026-11-25 18:12 UTC; compact copies in
benchmarks/results/sched_fidelity_runs): the scenarios rebuilt from the stored latency tables
give the stored arrivals, and the simulator with the stored calibration gives the same errors
the processes wrote (their fidelity.csv is the independent reference)."""
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "results" / "sched_fidelity_runs" / "2026-11-25_h100"


def _bench():
    spec = importlib.util.spec_from_file_location("sched_fidelity", ROOT / "benchmarks" / "sched_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("run", ["run1", "run3"])
def test_replay_gives_the_table_the_gpu_process_wrote(run, tmp_path):
    bench = _bench()
    bench.replay_run(RUNS / run, tmp_path)
    got = pd.read_csv(tmp_path / "fidelity.csv")
    want = pd.read_csv(RUNS / run / "fidelity.csv")
    assert list(got["scenario"] + "/" + got["group"]) == list(want["scenario"] + "/" + want["group"])
    for col in ("p50_sim_ms", "p50_real_ms", "p99_sim_ms", "p99_real_ms", "slo_sim_pct",
                "slo_real_pct"):
        assert got[col].to_numpy() == pytest.approx(want[col].to_numpy(), rel=1e-9), col
    assert got["ok"].tolist() == want["ok"].tolist()
