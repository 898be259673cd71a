"""Decode speed of a 1080p H.264 clip: PyAV on the CPU vs NVDEC (hookmagic.pipeline.nvdec_video).

    python lab/pipeline/pipeline_nvdec_speed.py OUTDIR [--frames 120] [--processes 2]

Encodes a *synthetic* 1920x1080 x264 clip with PyAV (the pictures are generated, the encoding is
real), then in each of ``--processes`` fresh processes decodes it to RGB: PyAV with 4 FFmpeg
threads (NumPy frames) and NVDEC (CUDA tensors, each complete on the GPU), best of 3 per
process. Writes OUTDIR/nvdec_speed.md with min–max over the processes.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def worker(clip: Path) -> dict:
    import torch

    from hookmagic.pipeline import nvdec_video, video_file

    torch.zeros(1, device="cuda")  # the CUDA context, before any timing
    out = {}
    for name, make in (("pyav_cpu", lambda: video_file(clip, threads=4)),
                       ("nvdec", lambda: nvdec_video(clip))):
        best = float("inf")
        n = 0
        for _ in range(3):
            t = time.perf_counter()
            n = sum(1 for _ in make().streams[0].open())
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
        out[f"{name}_fps"] = n / best
        out["frames"] = n
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--worker", default="")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(Path(args.worker))))
        return 0
    from hookmagic.pipeline import write_synthetic_video
    out = Path(args.out)
    clip = out / "synthetic_1080p_x264.mp4"
    t = time.time()
    write_synthetic_video(clip, frames=args.frames, width=1920, height=1080, fps=30)
    print(f"nvdec_speed: encoded {clip.name} in {time.time() - t:.1f}s", flush=True)
    rows = []
    for p in range(args.processes):
        res = subprocess.run([sys.executable, __file__, args.out, "--worker", str(clip)],
                             capture_output=True, text=True, timeout=60)
        if res.returncode:
            print(res.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"nvdec_speed: process {p} failed")
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(f"nvdec_speed: process {p}: {rows[-1]}", flush=True)
    import torch
    gpu = torch.cuda.get_device_name(0)

    def mm(k):
        lo, hi = min(r[k] for r in rows), max(r[k] for r in rows)
        return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}"
    text = (f"# Decode speed, synthetic 1080p H.264 (x264 veryfast, {rows[0]['frames']} frames), "
            f"{gpu}, {time.strftime('%Y-%m-%d')}\n\n{len(rows)} fresh processes, best of 3 "
            "each, min–max over processes. Decoding to RGB: PyAV → NumPy on the CPU (4 FFmpeg "
            "threads); NVDEC → CUDA tensor (PyNvVideoCodec via hookmagic.pipeline.nvdec_video)."
            "\n\n| decoder | fps |\n|---|---:|\n"
            f"| PyAV CPU | {mm('pyav_cpu_fps')} |\n| NVDEC | {mm('nvdec_fps')} |\n")
    (out / "nvdec_speed.md").write_text(text)
    clip.unlink()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
