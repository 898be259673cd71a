"""GPU proof of the PyTorch allocator model: predicted vs measured peak reserved memory.

Runs three PyTorch workloads with different allocation churn, records the allocator's requests
through ``torch.cuda.memory._record_memory_history``, replays them through
:class:`hookmagic.memory.torch_model.TorchCachingModel` and compares the predicted peak reserved
bytes with ``torch.cuda.max_memory_reserved()`` (target: within 5%). Each workload runs under
the default allocator settings and, in a child process, under ``expandable_segments:True``.
The random-size churn workload's recording (which fragments) is saved for the notebook.

    PYTHONPATH=. python3 lab/memory/memory_model_fidelity.py OUT_DIR [--quick]

Writes OUT_DIR/fidelity.md, fidelity.csv and fragmenting_churn.hmtrace (a saved Trace with the
allocator events, stacks and meta: open it with ``hookmagic.load``), and every workload's
recording under each setting in OUT_DIR/recordings/: WORKLOAD.SETTING.hmtrace and the snapshot it
came from, WORKLOAD.SETTING.snapshot.json.gz (innermost stack frame only; ``load_snapshot``
reads it after gunzip), so the model and the conversion can be checked offline. Needs torch with
CUDA (torchvision optional: without it the CNN workload is a small hand-made CNN); no plotly.
Takes about 1-2 minutes on an H100.
"""
from __future__ import annotations

from hookmagic.memory.fidelity import bare_snapshot  # noqa: F401  (what the recordings keep)

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from hookmagic.memory.fidelity import config_of, model_fidelity
from hookmagic.memory.torch_history import events_from_snapshot
from hookmagic.trace import Trace

MiB = 1 << 20


# -- workloads -------------------------------------------------------------------------------------
def cnn_inference(torch, quick: bool) -> None:
    """A ResNet-50's inference loop at varying batch sizes (activations of many sizes)."""
    try:
        import torchvision
        model = torchvision.models.resnet50(weights=None)
    except Exception:                                     # torchvision missing: a plain CNN
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                              nn.ReLU(), nn.Conv2d(128, 256, 3, 2, 1), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000))
    model = model.cuda().eval().half()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for _ in range(15 if quick else 40):
            bs = int(rng.choice([1, 2, 4, 8, 12, 16, 24, 32, 48, 64]))
            x = torch.randn(bs, 3, 224, 224, device="cuda", dtype=torch.half)
            model(x).float().softmax(-1).argmax(-1).cpu()
    del model


def transformer_training(torch, quick: bool) -> None:
    """A transformer encoder trained on variable-length batches (growing and shrinking
    activations, gradients and optimizer state)."""
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=6).cuda()
    head = nn.Linear(512, 1000).cuda()
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    rng = np.random.default_rng(1)
    for _ in range(10 if quick else 30):
        seq = int(rng.integers(16, 1024))
        x = torch.randn(16, seq, 512, device="cuda")
        y = torch.randint(0, 1000, (16, seq), device="cuda")
        loss = nn.functional.cross_entropy(head(model(x)).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    del model, head, opt


def random_churn(torch, quick: bool) -> None:
    """Random-size tensors with random lifetimes: the churn that fragments a caching
    allocator (sizes log-uniform 1 KiB .. 256 MiB, a live set of ~60 tensors)."""
    rng = np.random.default_rng(2)
    live: list = []
    for _ in range(1500 if quick else 4000):
        if live and (len(live) > 60 or rng.random() < 0.45):
            live.pop(int(rng.integers(len(live))))
        else:
            n = int(np.exp(rng.uniform(np.log(1 << 10), np.log(256 << 20))))
            live.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    live.clear()
    torch.cuda.synchronize()


WORKLOADS = {"cnn_inference": cnn_inference, "transformer_training": transformer_training,
             "random_churn": random_churn}


# -- measuring -------------------------------------------------------------------------------------
def measure(name: str, quick: bool) -> tuple[dict, pd.DataFrame, pd.DataFrame, dict]:
    import torch

    fn = WORKLOADS[name]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    # the allocator's counters (segment.all.allocated, ...) are cumulative over the process:
    # without this, each workload's count would include the earlier workloads'
    torch.cuda.reset_accumulated_memory_stats()
    start_reserved = torch.cuda.memory_reserved()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                             max_entries=2_000_000)
    t = time.perf_counter()
    fn(torch, quick)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    measured = torch.cuda.max_memory_reserved()
    stats = torch.cuda.memory_stats()
    events, stacks = events_from_snapshot(snap)
    conf = config_of(os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    total = torch.cuda.get_device_properties(0).total_memory
    t = time.perf_counter()
    # the same code path as notebook 02's check (hookmagic.memory.fidelity). The recording
    # starts with the segments and blocks already live (events_from_snapshot adds them at its
    # first timestamp), so the replay already holds start_reserved: not added again.
    fid = model_fidelity(events, conf, capacity=total, measured_max_reserved=int(measured))
    replay_s = time.perf_counter() - t
    # and the model started empty (allocating the blocks alive at the start its own way)
    empty = model_fidelity(events, conf, capacity=total, measured_max_reserved=int(measured),
                           from_recorded_state=False)
    r = fid.row()
    row = {
        "workload": name, "setting": fid.setting, "requests": fid.requests,
        "measured_max_reserved": int(measured),
        "predicted_peak_reserved": fid.predicted_peak_reserved, "error_pct": fid.error_pct,
        "recorded_peak_reserved": fid.recorded_peak_reserved,
        "measured_max_allocated": int(stats.get("allocated_bytes.all.peak", 0)),
        "model_peak_allocated": fid.model_peak_allocated,
        **{k: r[k] for k in ("measured_device_allocs", "model_device_allocs",
                             "device_allocs_err_pct", "measured_device_bytes",
                             "model_device_bytes", "device_bytes_err_pct",
                             "sizes_matched_pct")},
        "model_start": fid.start,
        **{f"empty_{k}": v for k, v in empty.row().items()
           if k in ("predicted_peak_reserved", "error_pct", "measured_device_allocs",
                    "model_device_allocs", "device_allocs_err_pct", "measured_device_bytes",
                    "model_device_bytes", "device_bytes_err_pct", "sizes_matched_pct")},
        "stats_num_device_alloc": int(stats.get("num_device_alloc", 0)),
        "stats_segment_allocs": int(stats.get("segment.all.allocated", 0)),
        "num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "start_reserved": int(start_reserved), "device_total_memory": int(total),
        "workload_s": round(wall, 2),
        "replay_s": round(replay_s, 2),
    }
    torch.cuda.empty_cache()
    return row, events, stacks, snap


def environment() -> dict:
    import torch
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda,
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        import pynvml
        pynvml.nvmlInit()
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        env["driver"] = "unknown"
    return env


def run_child(out: Path, quick: bool, tag: str) -> list[dict]:
    rows = []
    rec = out / "recordings"
    rec.mkdir(exist_ok=True)
    for name in WORKLOADS:
        print(f"fidelity: {tag} {name} ...", flush=True)
        row, events, stacks, snap = measure(name, quick)
        rows.append(row)
        print(json.dumps(row), flush=True)
        env = environment()
        meta = {**env, "source": "recording",
                "recorded_on": f"{env['gpu']}, driver {env['driver']}, {env['date']}",
                "description": f"{name} (memory_model_fidelity.py)",
                "workload": f"{name} (memory_model_fidelity.py)", "setting": row["setting"],
                "measured_max_reserved": row["measured_max_reserved"],
                "device_total_memory": row["device_total_memory"], "synthetic": False}
        # every recording, and the snapshot it came from (JSON, innermost frames): the model and
        # the conversion can then be checked offline against exactly what the GPU did
        Trace({"allocator_events": events, "stacks": stacks}, meta).save(
            rec / f"{name}.{tag}.hmtrace")
        with gzip.open(rec / f"{name}.{tag}.snapshot.json.gz", "wt") as f:
            json.dump({"meta": meta, **bare_snapshot(snap)}, f)
        if name == "random_churn" and tag == "default":      # the notebook's recording
            Trace({"allocator_events": events, "stacks": stacks}, meta).save(
                out / "fragmenting_churn.hmtrace")
    (out / f"rows_{tag}.json").write_text(json.dumps(rows))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-expandable", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.child:
        run_child(out, args.quick, args.child)
        return
    t0 = time.perf_counter()
    rows = []
    # each setting in its own process: the allocator reads PYTORCH_CUDA_ALLOC_CONF at start-up
    settings = [("default", "")] + ([] if args.no_expandable
                                    else [("expandable", "expandable_segments:True")])
    for tag, conf in settings:
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf}
        cmd = [sys.executable, __file__, str(out), "--child", tag] + (["--quick"]
                                                                      if args.quick else [])
        subprocess.run(cmd, env=env, check=True)
        rows += json.loads((out / f"rows_{tag}.json").read_text())
    table = pd.DataFrame(rows)
    table.to_csv(out / "fidelity.csv", index=False)
    env = environment()  # imports torch, only now that the children ran
    lines = [
        "# PyTorch allocator model fidelity: predicted vs measured peak reserved memory", "",
        f"GPU: {env['gpu']}, driver {env['driver']}, CUDA {env['cuda']}, torch {env['torch']}, "
        f"{env['date']}. Re-run: `PYTHONPATH=. python3 lab/memory/memory_model_fidelity.py OUT`",
        "Device allocations: the recording's own segment_alloc (cudaMalloc) or, with expandable "
        "segments, segment_map (cuMemMap of whole pages; bytes = what each call mapped) events "
        "vs the model's; 'sizes matched' is the share of allocations whose exact size both "
        "made (multiset overlap). Computed by hookmagic.memory.fidelity.model_fidelity, as "
        "notebook 02 does. The model starts from the recorded state (the segments, or mapped "
        "ranges, and blocks alive when the history began, at their recorded offsets; 'start' "
        "says where that could not be laid out) and the device allocations are compared after "
        "it; the last columns replay the same requests from an empty model, compared over the "
        "whole recording (the recording's start state included).",
        "", "| workload | setting | requests | measured max reserved (MiB) | predicted (MiB) "
        "| error | device allocs measured / model | count error | bytes error | sizes matched "
        "| start | from empty: peak / count / bytes error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['setting']} | {r['requests']:,} | "
                     f"{r['measured_max_reserved'] / MiB:,.1f} | "
                     f"{r['predicted_peak_reserved'] / MiB:,.1f} | {r['error_pct']:+.2f}% | "
                     f"{r['measured_device_allocs']} / {r['model_device_allocs']} | "
                     f"{r['device_allocs_err_pct']:+.1f}% | {r['device_bytes_err_pct']:+.1f}% | "
                     f"{r['sizes_matched_pct']:.0f}% | {r['model_start']} | "
                     f"{r['empty_error_pct']:+.2f}% / {r['empty_device_allocs_err_pct']:+.1f}% / "
                     f"{r['empty_device_bytes_err_pct']:+.1f}% |")
    ok = all(abs(r["error_pct"]) <= 5.0 for r in rows)
    seq_ok = all(abs(r["device_allocs_err_pct"]) <= 10.0 and abs(r["device_bytes_err_pct"]) <= 10.0
                 for r in rows)
    lines += ["", f"Peaks all within 5%: {'yes' if ok else 'NO'}. Device allocations (count and "
              f"bytes) all within 10%: {'yes' if seq_ok else 'NO'}. "
              f"Total wall time {time.perf_counter() - t0:.0f} s."]
    (out / "fidelity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
