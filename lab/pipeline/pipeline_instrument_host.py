"""Where a GPU stage's instrumentation cost goes on the host — measured on a CPU with the CUDA
calls STUBBED (no GPU here). Analysis aid, not a GPU measurement.

    python lab/pipeline/pipeline_instrument_host.py [--processes 5] [--out DIR]

``torch.cuda.Stream``/``set_stream``/``synchronize`` and the driver calls of
``hookmagic.pipeline.cuda_events`` are replaced by pure-Python stand-ins, so a ``device="cuda"``
stage runs hookmagic.pipeline's real GPU-stage host path (event pair from the worker's own
pairs, two ``record`` calls, the stream's ``synchronize``, the reading of the pairs) with every
CUDA call costing nothing but its Python call, every execution timed (``INTERVAL_S`` set to 0).
The figures in ``pipeline_instrument_host.md`` were taken with the runner before it recorded
through the driver API (torch's ``Event`` objects then). Variants:

- ``stub``: the stand-ins do nothing: what hookmagic's own Python bookkeeping costs.
- ``stub-end``: as ``stub``, with the event pairs resolved only after the run (none read
  inside it past ``PENDING_MAX``): what the in-run resolution costs.
- ``stub+gil-sync-only``: as ``stub+gil``, but the two ``record`` stand-ins spend their ~2 µs
  with the GIL held (as a native helper recording the events without releasing it could):
  one GIL hand-over per execution, as without instrumentation.
- ``stub+gil``: each stand-in spends ~2 µs outside the GIL (hashing 4 KiB, which releases
  it) and re-takes it, as torch's
  ``Event.record``, ``Event.synchronize`` and ``Stream.synchronize`` do around the driver call:
  what the extra GIL hand-overs of the instrumented path cost when three stage threads compete
  (instrumented: three releases per stage execution, record ×2 + event sync; not: one, the
  stream sync).

Per variant: a 3-stage pipeline (identity stages, ``device="cuda"``), ``instrument`` on vs off,
ABBA pairs over the same frames in each fresh process; process CPU µs per frame and fps. Also a
single-thread loop of the instrumented vs plain stage body (µs per stage execution).
Writes ``pipeline_instrument_host.md``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _stub_cuda(release_gil: bool, record_holds_gil: bool = False) -> None:
    import torch

    # hashlib hashes a buffer of >= 2 KiB with the GIL released: a ~2 µs call outside the GIL,
    # like a short driver call (time.sleep(0) would also yield the CPU to the OS scheduler)
    buf, small = bytes(4096), bytes(1536)
    yield_gil = (lambda: hashlib.sha256(buf)) if release_gil else (lambda: None)
    # ~2 µs of work with the GIL held (hashlib keeps it for < 2 KiB): a record call that does not
    # release the GIL, as a native helper could do it
    record_cost = (lambda: [hashlib.sha256(small) for _ in range(2)]) if record_holds_gil \
        else yield_gil

    class Stream:
        cuda_stream = 0

        class device:  # noqa: N801 - torch.device's one attribute read here
            index = 0

        def synchronize(self) -> None:
            yield_gil()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.t = 0

        def record(self, stream=None) -> None:
            record_cost()
            self.t = time.perf_counter_ns()

        def synchronize(self) -> None:
            yield_gil()

        def elapsed_time(self, other) -> float:
            return (other.t - self.t) / 1e6

    torch.cuda.Stream, torch.cuda.Event = Stream, Event
    torch.cuda.set_stream = lambda stream: None
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0

    from hookmagic.pipeline import cuda_events

    def record(event, stream) -> int:
        record_cost()
        return 0

    class Driver:  # the driver calls cuda_events makes, costing their Python call only
        hm_record = staticmethod(record)
        hm_create = hm_sync = hm_destroy = hm_set_ctx = staticmethod(lambda *a: 0)
        hm_elapsed = staticmethod(lambda ms, a, b: 0)   # leaves 0.0 ms
        hm_get_ctx = staticmethod(lambda ctx: 0)
        hm_retain = hm_device = staticmethod(lambda *a: 0)

    cuda_events.driver = lambda: Driver
    cuda_events.bind_context = lambda device: None
    counter = iter(range(1, 1 << 62))
    cuda_events.new_event = lambda: next(counter)
    cuda_events.INTERVAL_S = 0.0


def _body_us(n: int) -> dict:
    """µs per stage execution of the instrumented vs plain GPU-stage body (one thread, stubs,
    the same statements as hookmagic.pipeline.runner._Run._work)."""
    import collections

    import torch

    from hookmagic.pipeline import cuda_events
    stream, out, done = torch.cuda.Stream(), collections.deque(), []
    pairs = cuda_events.EventPairs()
    record, take, handle = pairs.record, pairs.take, stream.cuda_stream
    ref = cuda_events.Reference(cuda_events.new_event())

    def fn(x):
        return x

    res = {}
    for inst in (True, False, True, False):
        t = time.perf_counter()
        for i in range(n):
            if inst:
                p = take()
                record(p[0], handle)
                fn(i)
                record(p[1], handle)
                stream.synchronize()
                out.append((i, 1, p))
                if len(out) >= cuda_events.PENDING_MAX:
                    cuda_events.resolve(ref, pairs, out, done, 2)
            else:
                fn(i)
                stream.synchronize()
        cuda_events.resolve(ref, pairs, out, done)
        us = (time.perf_counter() - t) / n * 1e6
        key = "on" if inst else "off"
        res[key] = min(res.get(key, np.inf), us)
    return res


def worker(variant: str, frames: int, pairs: int) -> dict:
    _stub_cuda(release_gil=variant in ("stub+gil", "stub+gil-sync-only"),
               record_holds_gil=variant == "stub+gil-sync-only")
    from hookmagic.pipeline import Pipeline, Stage
    if variant == "stub-end":  # no resolution inside the run: all at its end
        from hookmagic.pipeline import cuda_events
        cuda_events.PENDING_MAX = 1 << 62

    def make():
        return [Stage(f"g{k}", lambda x: x, device="cuda") for k in range(3)]
    pipes = {inst: Pipeline(make(), queue_size=32, instrument=inst) for inst in (True, False)}
    data = list(range(frames))
    for inst in (True, False):
        pipes[inst].run(data)
    runs = []
    for p in range(pairs):
        for inst in ((True, False) if p % 2 == 0 else (False, True)):
            c = time.process_time()
            run = pipes[inst].run(data)
            cpu = time.process_time() - c
            assert run.outcomes.to_dict() == {"done": frames}
            runs.append({"pair": p, "on": inst, "fps": run.throughput()["fps"],
                         "cpu_us": cpu / frames * 1e6})
    on = [r for r in runs if r["on"]]
    off = [r for r in runs if not r["on"]]
    ratio = [a["fps"] / b["fps"] - 1 for a, b in zip(sorted(on, key=lambda r: r["pair"]),
                                                     sorted(off, key=lambda r: r["pair"]))]
    body = _body_us(20000)
    buf = bytes(4096)
    t = time.perf_counter()
    for _ in range(20000):
        hashlib.sha256(buf)
    body["gil_call_us"] = (time.perf_counter() - t) / 20000 * 1e6
    return {"variant": variant, "frames": frames, "pairs": pairs,
            "fps_on": float(np.median([r["fps"] for r in on])),
            "fps_off": float(np.median([r["fps"] for r in off])),
            "change": float(np.median(ratio)),
            "cpu_us_on": float(np.median([r["cpu_us"] for r in on])),
            "cpu_us_off": float(np.median([r["cpu_us"] for r in off])),
            "body_us_on": body["on"], "body_us_off": body["off"],
            "gil_call_us": body["gil_call_us"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--variants", default="stub,stub-end,stub+gil,stub+gil-sync-only")
    ap.add_argument("--worker", default="")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.frames, args.pairs)))
        return 0
    rows = []
    for proc in range(args.processes):
        for variant in args.variants.split(","):
            res = subprocess.run([sys.executable, __file__, "--worker", variant, "--frames",
                                  str(args.frames), "--pairs", str(args.pairs)],
                                 capture_output=True, text=True)
            if res.returncode:
                print(res.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"worker {variant} failed")
            r = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(r)
            print(f"[host {time.strftime('%H:%M:%S')}] {proc} {variant}: fps {r['fps_on']:.0f} on "
                  f"/ {r['fps_off']:.0f} off ({100 * r['change']:+.1f} %), CPU µs/frame "
                  f"{r['cpu_us_on']:.1f} / {r['cpu_us_off']:.1f}, body µs {r['body_us_on']:.2f}"
                  f" / {r['body_us_off']:.2f}", flush=True)

    def mm(vals, fmt):
        a, b = fmt.format(min(vals)), fmt.format(max(vals))
        return a if a == b else f"{a} – {b}"
    lines = [f"# GPU-stage instrumentation on the host, CUDA calls stubbed (CPU only), "
             f"{time.strftime('%Y-%m-%d')}", "",
             f"NOT a GPU measurement: `lab/pipeline/pipeline_instrument_host.py` replaces "
             "torch.cuda's Stream/Event/synchronize with pure-Python stand-ins and runs "
             "hookmagic.pipeline's real GPU-stage host path (3 identity stages, "
             f"`device=\"cuda\"`). {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores (shared, loaded), Python {platform.python_version()}; "
             f"{args.processes} fresh processes, {args.frames} frames × {args.pairs} ABBA pairs "
             "each; min–max over processes.", "",
             "| stand-ins | fps change on vs off | added µs per stage execution (1/fps) | "
             "process CPU µs / frame, on / off | one-thread stage body µs, on / off |",
             "|---|---|---|---|---|"]
    for variant, label in (("stub", "do nothing"),
                           ("stub-end", "do nothing; events resolved only after the run"),
                           ("stub+gil", "release + re-take the GIL, like torch's calls"),
                           ("stub+gil-sync-only", "as above, but the two record calls keep "
                            "the GIL (~2 µs each)")):
        d = [r for r in rows if r["variant"] == variant]
        if not d:
            continue
        per = ", ".join(f"{100 * r['change']:+.1f}" for r in d)
        added = [(1e6 / r["fps_on"] - 1e6 / r["fps_off"]) / 3 for r in d]
        lines.append(f"| {label} | {mm([100 * r['change'] for r in d], '{:+.1f}')} % "
                     f"({per}) | {mm(added, '{:+.2f}')} | "
                     f"{mm([r['cpu_us_on'] for r in d], '{:.1f}')} / "
                     f"{mm([r['cpu_us_off'] for r in d], '{:.1f}')} | "
                     f"{mm([r['body_us_on'] for r in d], '{:.2f}')} / "
                     f"{mm([r['body_us_off'] for r in d], '{:.2f}')} |")
    g = [r["gil_call_us"] for r in rows]
    lines += ["", f"A stand-in call outside the GIL took {mm(g, '{:.1f}')} µs here (one thread)."]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pipeline_instrument_host.md").write_text(text)
    (out / "pipeline_instrument_host.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
