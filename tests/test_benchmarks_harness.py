"""The benchmark runner: a real benchmark (native record decoding, on the CPU) in fresh
processes, written in the one result schema."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_run_writes_the_schema_with_min_max_over_fresh_processes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks", "run", "decode",
                           "--processes", "2", "--set", "records=20000", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "decode-20000.json").read_text())
    assert result["benchmark"] == "decode" and result["processes"] == 2
    assert result["command"] == "python -m benchmarks run decode --processes 2 --set records=20000"
    assert result["params"] == {"records": 20000}
    for key in ("date", "commit", "machine", "gpu"):
        assert key in result
    assert result["machine"]["cores"] >= 1
    sweep = result["metrics"]["decode_M_records_per_s"]
    assert len(sweep["values"]) == 2 and sweep["min"] <= sweep["median"] <= sweep["max"]
    assert sweep["min"] == min(sweep["values"]) and sweep["max"] == max(sweep["values"])
    # every process measured every metric, and each is a positive speed or time
    assert all(len(m["values"]) == 2 and m["min"] > 0 for m in result["metrics"].values())
    md = (tmp_path / "decode-20000.md").read_text()
    assert result["command"] in md and "min–max" in md


def test_list_names_every_benchmark_and_an_unknown_name_is_refused():
    listed = subprocess.run([sys.executable, "-m", "benchmarks", "list"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0
    for name in ("overhead", "kernels", "decode", "simulator", "multirank"):
        assert f"{name} " in listed.stdout
    bad = subprocess.run([sys.executable, "-m", "benchmarks", "run", "nope"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown benchmark" in bad.stderr
