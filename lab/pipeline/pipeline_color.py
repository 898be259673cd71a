"""One colour truth: NVDEC's RGB (``nvdec_video``) against the CPU decoder's (``video_file``:
FFmpeg's swscale with the stream's matrix and range) on real x264 clips of both kinds.

    python lab/pipeline/pipeline_color.py make DIR                 # here, with PyAV: the clips
    python lab/pipeline/pipeline_color.py nvdec DIR OUTDIR         # GPU machine: NVDEC's RGB
    python lab/pipeline/pipeline_color.py compare DIR OUTDIR       # here: against PyAV's RGB

``make`` encodes two synthetic natural-looking clips with PyAV's libx264 (a pan over a 1/f
texture with a crossing disc, B-frames; ``write_synthetic_video(pattern="natural")``):
``synthetic_sd_bt601.mp4`` (640×480, 60 frames, tagged SMPTE 170M / BT.601, limited range)
and ``synthetic_hd_bt709.mp4`` (1280×720, 300 frames, tagged BT.709, limited range; the
pipeline-prediction study reads it too). ``nvdec`` decodes :data:`FRAMES` of each with
``nvdec_video(fmt="rgb")`` and saves them with the matrix and range it chose
(``nvdec_<clip>.npz``; the GPU machine has no PyAV, so the stream's tags are not read there
and the HD/SD convention decides, which these clips' tags agree with). ``compare`` decodes
the same frames with ``video_file`` and reports mean, 99th percentile and max |difference| per
clip (target: max <= 1 level) into ``OUTDIR/pipeline_color.md`` and ``.json``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

CLIPS = {"synthetic_sd_bt601.mp4": (640, 480, 60, "bt601"),
         "synthetic_hd_bt709.mp4": (1280, 720, 300, "bt709")}
#: the frames compared: the first (I), the next three (P/B) and two later ones
FRAMES = (0, 1, 2, 3, 59)


def make(folder: Path) -> None:
    from hookmagic.pipeline import write_synthetic_video
    folder.mkdir(parents=True, exist_ok=True)
    for name, (w, h, n, matrix) in CLIPS.items():
        p = write_synthetic_video(folder / name, frames=n, width=w, height=h, pattern="natural",
                                  color_matrix=matrix, seed=1)
        print(f"{p}: {p.stat().st_size} bytes")


def nvdec(folder: Path, out: Path) -> None:
    from hookmagic.pipeline import nvdec_video
    out.mkdir(parents=True, exist_ok=True)
    for name in CLIPS:
        src = nvdec_video(folder / name)
        got = {}
        for i, f in enumerate(src):
            if i in FRAMES:
                got[f"frame{i}"] = f.cpu().numpy()
        np.savez_compressed(out / f"nvdec_{Path(name).stem}.npz", **got,
                            meta=json.dumps({k: str(v) for k, v in src.meta.items()}))
        print(f"{name}: {len(got)} frames, {src.meta.get('rgb_matrix')} "
              f"{src.meta.get('rgb_range')}", flush=True)


def compare(folder: Path, out: Path) -> int:
    from hookmagic.pipeline import video_file
    rows = []
    for name in CLIPS:
        got = np.load(out / f"nvdec_{Path(name).stem}.npz")
        meta = json.loads(str(got["meta"]))
        src = video_file(folder / name)
        diffs = []
        for i, f in enumerate(src):
            key = f"frame{i}"
            if key in got:
                diffs.append(np.abs(f.astype(int) - got[key].astype(int)).ravel())
        d = np.concatenate(diffs)
        rows.append({"clip": name, "frames": len(diffs), "cpu": f"{src.meta['rgb_matrix']} "
                     f"{src.meta['rgb_range']}", "nvdec": f"{meta.get('rgb_matrix')} "
                     f"{meta.get('rgb_range')}", "decoder": meta.get("decoder"),
                     "mean": float(d.mean()), "p99": float(np.percentile(d, 99)),
                     "max": int(d.max()), "over_1": float((d > 1).mean())})
    import av
    text = ["# NVDEC RGB against the CPU decoder's RGB", "",
            f"Compared {time.strftime('%Y-%m-%d')} here (PyAV {av.__version__}) with NVDEC frames "
            f"decoded on the GPU machine (frames {', '.join(map(str, FRAMES))} of each clip that "
            "exist). Re-run: `python lab/pipeline/pipeline_color.py make DIR` here, "
            "`... nvdec DIR OUT` on the GPU machine, `... compare DIR OUT` here.", "",
            "| clip | frames | CPU (PyAV) matrix, range | NVDEC matrix, range | mean |Δ| | "
            "p99 |Δ| | max |Δ| | share > 1 level |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        text.append(f"| {r['clip']} | {r['frames']} | {r['cpu']} | {r['nvdec']} | "
                    f"{r['mean']:.3f} | {r['p99']:.0f} | {r['max']} | {100 * r['over_1']:.3f} % |")
    (out / "pipeline_color.md").write_text("\n".join(text) + "\n")
    (out / "pipeline_color.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(text))
    return 0 if all(r["max"] <= 1 for r in rows) else 1


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("make", "nvdec", "compare"):
        print(__doc__)
        return 2
    folder = Path(sys.argv[2])
    if sys.argv[1] == "make":
        make(folder)
        return 0
    out = Path(sys.argv[3])
    if sys.argv[1] == "nvdec":
        nvdec(folder, out)
        return 0
    return compare(folder, out)


if __name__ == "__main__":
    sys.exit(main())
