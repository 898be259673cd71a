"""Native decoding speed: synthetic kernel records in CUPTI's layout through the real decoder."""
from __future__ import annotations

import statistics
import time

DESCRIPTION = ("native CUPTI record decoding, M records/s, on synthetic kernel records in "
               "CUPTI's layout (50 distinct names); median of 5 per process")
PARAMS = {"records": 1_000_000}
NEEDS: tuple[str, ...] = ()


def measure(records: int) -> dict[str, float]:
    import hookmagic._native as native
    from tests import hookmagic_decoder_testing as decoder
    from tests.synthetic_cupti import synthetic_kernel_buffer

    buf = synthetic_kernel_buffer(native.enum_names()["activity_kind"], records)
    rates, wall = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        raw = decoder.decode(buf.data, buf.offsets, buf.names)
        wall.append(time.perf_counter() - t0)
        rates.append(records / raw["counts"]["decode_s"])
    return {"decode_M_records_per_s": statistics.median(rates) / 1e6,
            "decode_and_handover_M_records_per_s": records / statistics.median(wall) / 1e6}
