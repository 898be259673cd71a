"""Decoding speed of the native CUPTI decoder, on synthetic buffers in CUPTI's record layout.

    python benchmarks/bench_decode.py --out benchmarks/results

Runs anywhere (no GPU: the records are synthetic, the decoder is the real one, reached through
the test extension built from native/testing/ by `pip install -e .`). The rate on real captures
is in overhead.md (records / decode time, measured on the GPU).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import hookmagic._native as native
    from benchmarks.machine import machine_line
    from tests import hookmagic_decoder_testing as decoder
    from tests.synthetic_cupti import synthetic_kernel_buffer

    buf = synthetic_kernel_buffer(native.enum_names()["activity_kind"], args.records)
    rates, wall = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        raw = decoder.decode(buf.data, buf.offsets, buf.names)
        wall.append(time.perf_counter() - t0)
        rates.append(args.records / raw["counts"]["decode_s"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join([
        "# Native decoding speed", "", machine_line(), "",
        "Command: `python benchmarks/bench_decode.py` (synthetic kernel records in CUPTI's "
        "layout, 50 distinct names; median of 5).", "",
        "| records | decode (M records/s) | decode + hand-over to NumPy (M records/s) |",
        "|---|---|---|",
        f"| {args.records:,} | {statistics.median(rates) / 1e6:.1f} | "
        f"{args.records / statistics.median(wall) / 1e6:.1f} |", ""])
    (out / "decode.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
