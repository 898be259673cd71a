"""Importer speed at 1x, 10x and 100x input sizes: every importer must scale linearly.

    python -m benchmarks run importers

Each importer reads a *synthetic* input (generated here, in a private temporary folder) of a
base size times each scale, in ``--repeats`` fresh Python processes (so caches and imports do
not flatter later runs); the table gives min–max seconds per size and the growth from 1x to
100x (linear: about 100x; quadratic: about 10,000x). Writes ``importers.md`` and
``importers.csv`` with the machine and date. The hard case: a trtexec layer file with 20,000
NoOp layers (the 100x trtexec row) took 115–169 s before NoOp folding was made linear; it must
take at most 2 s.

Base sizes: trtexec 200 layers (half of them NoOp, with profile records), Kineto 2,000 events,
ONNX Runtime 200 node events over 10 runs, memory snapshot 2,000 allocator events, saved trace
10,000 kernels.
"""
from __future__ import annotations

import re

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# -- synthetic inputs ---------------------------------------------------------------------------


def make_trtexec(folder: Path, scale: int) -> dict[str, str]:
    n = 200 * scale
    layers, records = [], [{"count": 10}]
    for i in range(n):
        noop = i % 2 == 1
        name = f"layer_{i}"
        # NoOps read a tensor no layer produces, so folding must find "the kept layer before"
        # for each: the path that was quadratic (115-169 s for 20,000 NoOps)
        src = f"external_{i}" if noop else f"t{i - 1}"
        layers.append({"Name": name, "LayerType": "NoOp" if noop else "CaskConvolution",
                       "Inputs": [{"Name": src, "Dimensions": [1, 64, 56, 56],
                                   "Format/Datatype": "Channel major FP16 format"}],
                       "Outputs": [{"Name": f"t{i}", "Dimensions": [1, 64, 56, 56],
                                    "Format/Datatype": "Channel major FP16 format"}]})
        records.append({"name": name, "timeMs": 0.0 if noop else 1.5,
                        "averageMs": 0.0 if noop else 0.015, "medianMs": 0.0 if noop else 0.015,
                        "percentage": 0.1})
    prof, graph = folder / "synthetic.profile.json", folder / "synthetic.graph.json"
    prof.write_text(json.dumps(records))
    graph.write_text(json.dumps({"Layers": layers, "Bindings": ["input", "output"]}))
    return {"profile": str(prof), "layers": str(graph)}


def make_kineto(folder: Path, scale: int) -> dict[str, str]:
    n = 1000 * scale
    events = []
    for i in range(n):
        t = 1_000_000 + i * 10
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": t, "dur": 3, "args": {"correlation": i, "cbid": 211}})
        events.append({"ph": "X", "cat": "kernel", "name": f"kernel_{i % 50}", "pid": 0,
                       "tid": 7, "ts": t + 5, "dur": 4.25,
                       "args": {"correlation": i, "device": 0, "stream": 7,
                                "grid": [128, 1, 1], "block": [256, 1, 1]}})
    path = folder / "synthetic_kineto.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return {"path": str(path)}


def make_ort(folder: Path, scale: int) -> dict[str, str]:
    nodes, runs = 20 * scale, 10
    events, t = [], 0
    for r in range(runs):
        start = t
        for k in range(nodes):
            events.append({"cat": "Node", "name": f"node{k}_kernel_time", "ts": t, "dur": 5,
                           "args": {"op_name": "Conv", "provider": "CUDAExecutionProvider"}})
            t += 6
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": t - start})
        t += 10
    path = folder / "synthetic_ort.json"
    path.write_text(json.dumps(events))
    return {"path": str(path)}


def make_snapshot(folder: Path, scale: int) -> dict[str, str]:
    n = 1000 * scale
    seg = 1 << 30
    trace = [{"action": "segment_alloc", "addr": seg, "size": 1 << 40, "stream": 0,
              "time_us": 1}]
    for i in range(n):
        addr = seg + (i % 4096) * (1 << 21)
        trace.append({"action": "alloc", "addr": addr, "size": 1 << 20, "stream": 0,
                      "time_us": 2 + 2 * i, "frames": [{"filename": "a.py", "name": "f",
                                                        "line": 3}]})
        trace.append({"action": "free_completed", "addr": addr, "size": 1 << 20, "stream": 0,
                      "time_us": 3 + 2 * i})
    path = folder / "synthetic_snapshot.json"
    path.write_text(json.dumps({"segments": [], "device_traces": [trace]}))
    return {"path": str(path)}


def make_saved_trace(folder: Path, scale: int) -> dict[str, str]:
    import numpy as np

    from hookmagic.trace.model import Trace
    n = 10_000 * scale
    start = np.arange(n, dtype=np.int64) * 1000
    trace = Trace({"kernels": pd.DataFrame({"start_ns": start, "end_ns": start + 500,
                                            "duration_ns": np.full(n, 500),
                                            "name": [f"kernel_{i % 50}" for i in range(n)]})},
                  {"label": "synthetic"})
    path = folder / "synthetic.hmtrace"
    trace.save(path)
    return {"path": str(path)}


CASES = {
    "trtexec (layers, half NoOp)": (make_trtexec, 200, "layers",
                                    "from hookmagic.layers import from_trtexec\n"
                                    "from_trtexec(profile=a['profile'], layers=a['layers'])"),
    "Kineto JSON": (make_kineto, 2000, "events",
                    "from hookmagic.importers.kineto import read_kineto\nread_kineto(a['path'])"),
    "ONNX Runtime profile": (make_ort, 200, "node events",
                             "from hookmagic.layers.onnxruntime import from_onnxruntime\n"
                             "from_onnxruntime(a['path'])"),
    "memory snapshot": (make_snapshot, 2000, "allocator events",
                        "from hookmagic.memory.torch_history import load_snapshot_events\n"
                        "load_snapshot_events(a['path'])"),
    "saved trace": (make_saved_trace, 10_000, "kernels",
                    "import hookmagic\nhookmagic.load(a['path'])"),
}

_RUNNER = textwrap.dedent("""
    import json, sys, time
    a = json.loads(sys.argv[1])
    {imports}
    t = time.perf_counter()
    {call}
    print(time.perf_counter() - t)
""")


def time_once(code: str, args: dict[str, str]) -> float:
    """Seconds of one import in a fresh process (the imports of the module are not counted)."""
    imports, call = code.split("\n", 1)
    src = _RUNNER.format(imports=imports, call=call)
    out = subprocess.run([sys.executable, "-c", src, json.dumps(args)], capture_output=True,
                         text=True, timeout=900, cwd=HERE.parent)
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "failed")
    return float(out.stdout.strip().splitlines()[-1])


def _markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


DESCRIPTION = ("importer speed at 1x, 10x and 100x synthetic inputs (trtexec, Kineto, ONNX "
               "Runtime, allocator snapshots, saved traces): seconds per import, import time "
               "excluded")
PARAMS = {"scales": "1,10,100", "only": ""}
NEEDS: tuple[str, ...] = ()


def measure(scales: str, only: str) -> dict[str, float]:
    out = {}
    with tempfile.TemporaryDirectory(prefix="hookmagic-bench-") as tmp:
        for name, (make, base, unit, code) in CASES.items():
            if only and only.lower() not in name.lower():
                continue
            for scale in (int(s) for s in str(scales).split(",")):
                folder = Path(tmp) / f"{make.__name__}_{scale}"
                folder.mkdir()
                key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
                out[f"{key}_{scale}x_s"] = time_once(code, make(folder, scale))
    return out
