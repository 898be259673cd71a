"""The allocator model against recordings (hookmagic.memory.fidelity): a SYNTHETIC snapshot in
PyTorch's layout worked out by hand from its expandable-segment rules, and the real H100
recording the memory notebook replays, against the benchmark's figure for it."""
from pathlib import Path

import pandas as pd
import pytest

import hookmagic
from hookmagic.memory.fidelity import (config_of, device_allocations, model_fidelity,
                                       peak_reserved, sequence_match)
from hookmagic.memory.torch_history import events_from_snapshot
from hookmagic.memory.torch_model import TorchConfig

from tests.test_memory_sources import expandable_snapshot

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "notebooks" / "recordings" / "fragmenting_churn.hmtrace"
RESULTS = ROOT / "benchmarks" / "results" / "memory_fidelity.csv"


@pytest.mark.parametrize("empty_cache_at_end", [False, True])
def test_expandable_recording_and_model_map_the_same_pages_synthetic(empty_cache_at_end):
    # recorded: 20 MiB (large page 0) and 2 MiB (small page) mapped before the history, then one
    # 20 MiB page. The model, replaying the blocks alive at the start and the 30 MiB request,
    # must map the same: a 20 MiB page for the 8 MiB block, a 2 MiB small page, and one more
    # 20 MiB page behind the 12 MiB free tail.
    ev, _ = events_from_snapshot(expandable_snapshot(empty_cache_at_end))
    fid = model_fidelity(ev, TorchConfig(expandable_segments=True))
    assert sorted(device_allocations(ev) // MiB) == [2, 20, 20]
    assert sorted(device_allocations(fid.result.events) // MiB) == [2, 20, 20]
    assert (fid.measured_device_allocs, fid.model_device_allocs) == (3, 3)
    assert fid.device_bytes_err_pct == 0.0 and fid.sizes_matched_pct == 100.0
    assert fid.recorded_peak_reserved == fid.predicted_peak_reserved == 42 * MiB
    assert fid.error_pct == 0.0 and fid.passes()


def test_sequence_match_counts_bytes_and_exact_sizes():
    import numpy as np
    m = sequence_match(np.array([20, 20, 2]) * MiB, np.array([20, 40]) * MiB)
    assert m["device_allocs_err_pct"] == pytest.approx(-100 / 3)
    assert m["device_bytes_err_pct"] == pytest.approx(100 * (60 - 42) / 42)
    assert m["sizes_matched_pct"] == pytest.approx(100 / 3)     # one 20 MiB in common, of 3


def test_peak_reserved_follows_device_allocations_and_frees():
    ev = pd.DataFrame({"action": ["segment_map", "alloc", "segment_map", "segment_unmap",
                                  "segment_alloc"],
                       "size": [20, 5, 40, 20, 2]})
    assert peak_reserved(ev) == 60


@pytest.mark.parametrize("setting, conf", [
    ("", TorchConfig()), ("default", TorchConfig()),
    ("expandable_segments:True", TorchConfig(expandable_segments=True)),
    ("max_split_size_mb:64,roundup_power2_divisions:4",
     TorchConfig(max_split_size_mb=64, roundup_power2_divisions=4))])
def test_config_of_reads_the_alloc_conf(setting, conf):
    assert config_of(setting) == conf


@pytest.mark.skipif(not RECORDING.exists(), reason="the notebook's H100 recording is not here")
def test_real_recording_matches_and_agrees_with_the_benchmark_figure():
    trace = hookmagic.load(RECORDING)
    meta = trace.meta
    assert not meta.get("synthetic")
    fid = model_fidelity(trace.allocator_events, config_of(meta.get("setting", "")),
                         capacity=meta.get("device_total_memory"),
                         measured_max_reserved=meta.get("measured_max_reserved"))
    # the criteria on this workload: peak within 5%, device allocations within 10%
    assert fid.passes(peak_pct=5.0, sequence_pct=10.0), fid.row()
    # the benchmark's figure for this workload and setting comes from the same function
    table = pd.read_csv(RESULTS).set_index(["workload", "setting"])
    bench = table.loc[("random_churn", fid.setting)]
    assert fid.error_pct == pytest.approx(bench["error_pct"], abs=0.01)
    assert fid.predicted_peak_reserved == bench["predicted_peak_reserved"]
    assert fid.model_device_allocs == bench["model_device_allocs"]
    assert fid.measured_device_allocs == bench["measured_device_allocs"]
    assert fid.device_bytes_err_pct == pytest.approx(bench["device_bytes_err_pct"], abs=0.01)
