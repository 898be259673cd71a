"""Theoretical occupancy of each kernel launch, by the CUDA occupancy calculator's rules.

Occupancy is the number of warps resident on one SM divided by the most it can hold. Four
resources cap the number of resident blocks; the smallest cap wins and names the limiter:

- warps: ``floor(max warps per SM / warps per block)``, warps per block rounded up;
- blocks: the SM's fixed maximum of resident blocks;
- registers: registers are given to whole warps in units of ``reg_alloc_unit`` (256) per
  warp, and from the register file of each of the SM's 4 sub-partitions separately, so
  ``warps = floor(regs per SM / 4 / regs per warp) * 4`` and ``blocks = floor(warps / warps per
  block)``. A block whose warps, rounded up to a multiple of 4, need more than the per-block
  register limit cannot launch at all;
- shared memory: per block, static + dynamic + the driver's reserve (1 KiB from sm_80 on),
  rounded up to the allocation unit (256 B before sm_80, 128 B from sm_80), against the
  largest shared memory carveout the SM supports (the driver picks a carveout that fits).

Limits come from ``trace.meta["devices"]`` where the capture recorded them, else from a table
of known limits by compute capability (sm_70 ... sm_120, with sm_87 Jetson Orin and sm_90
Hopper); ``limits_source`` says which.

Pure functions: no plotting, no I/O, no globals (the table is constant data).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from hookmagic.analysis.tables import event_mask, table

KiB = 1024

#: Per-SM limits by compute capability, from the CUDA C++ Programming Guide's technical
#: specifications and the occupancy calculator's allocation rules (cuda_occupancy.h).
#: max_smem_per_block is the opt-in maximum (cudaDevAttrMaxSharedMemoryPerBlockOptin).
_BASE = {"warp_size": 32, "max_regs_per_sm": 65536, "max_regs_per_block": 65536,
         "max_regs_per_thread": 255, "reg_alloc_unit": 256, "sub_partitions": 4}
KNOWN_LIMITS: dict[tuple[int, int], dict[str, int]] = {
    # Volta: V100 (7.0), Jetson Xavier (7.2)
    (7, 0): {**_BASE, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
             "max_smem_per_sm": 96 * KiB, "max_smem_per_block": 96 * KiB,
             "reserved_smem_per_block": 0, "smem_alloc_unit": 256},
    (7, 2): {**_BASE, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
             "max_smem_per_sm": 96 * KiB, "max_smem_per_block": 96 * KiB,
             "reserved_smem_per_block": 0, "smem_alloc_unit": 256},
    # Turing: T4, RTX 20
    (7, 5): {**_BASE, "max_threads_per_sm": 1024, "max_blocks_per_sm": 16,
             "max_smem_per_sm": 64 * KiB, "max_smem_per_block": 64 * KiB,
             "reserved_smem_per_block": 0, "smem_alloc_unit": 256},
    # Ampere: A100 (8.0), RTX 30 / A10 (8.6), Jetson Orin (8.7)
    (8, 0): {**_BASE, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
             "max_smem_per_sm": 164 * KiB, "max_smem_per_block": 163 * KiB,
             "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
    (8, 6): {**_BASE, "max_threads_per_sm": 1536, "max_blocks_per_sm": 16,
             "max_smem_per_sm": 100 * KiB, "max_smem_per_block": 99 * KiB,
             "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
    (8, 7): {**_BASE, "max_threads_per_sm": 1536, "max_blocks_per_sm": 16,
             "max_smem_per_sm": 164 * KiB, "max_smem_per_block": 163 * KiB,
             "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
    # Ada: L4, L40, RTX 40
    (8, 9): {**_BASE, "max_threads_per_sm": 1536, "max_blocks_per_sm": 24,
             "max_smem_per_sm": 100 * KiB, "max_smem_per_block": 99 * KiB,
             "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
    # Hopper: H100, H200, GH200
    (9, 0): {**_BASE, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
             "max_smem_per_sm": 228 * KiB, "max_smem_per_block": 227 * KiB,
             "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
    # Blackwell data centre: B200 (10.0), B300 (10.3)
    (10, 0): {**_BASE, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
              "max_smem_per_sm": 228 * KiB, "max_smem_per_block": 227 * KiB,
              "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
    (10, 3): {**_BASE, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
              "max_smem_per_sm": 228 * KiB, "max_smem_per_block": 227 * KiB,
              "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
    # Blackwell RTX: RTX 50, RTX PRO 6000 (12.0)
    (12, 0): {**_BASE, "max_threads_per_sm": 1536, "max_blocks_per_sm": 24,
              "max_smem_per_sm": 100 * KiB, "max_smem_per_block": 99 * KiB,
              "reserved_smem_per_block": KiB, "smem_alloc_unit": 128},
}

#: meta["devices"] keys that override the table (same names as the capture records)
META_KEYS = ("max_threads_per_sm", "max_blocks_per_sm", "max_regs_per_sm", "max_regs_per_block",
             "max_smem_per_sm", "max_smem_per_block", "warp_size", "reg_alloc_unit",
             "reserved_smem_per_block", "smem_alloc_unit")

LIMITERS = ("warps", "blocks", "registers", "shared memory")


def parse_compute_capability(value: Any) -> tuple[int, int] | None:
    """``(major, minor)`` from ``[8, 7]``, ``(8, 7)``, ``"8.7"``, ``"sm_87"``, ``87`` or ``8.7``."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        return int(value[0]), int(value[1])
    text = str(value).strip().lower().removeprefix("sm_").removeprefix("sm")
    if "." in text:
        major, minor = text.split(".", 1)
        return int(major), int(minor[:1] or 0)
    if text.isdigit():
        number = int(text)
        return (number // 10, number % 10) if number >= 10 else (number, 0)
    return None


def device_entry(meta: Mapping[str, Any] | None, device: int) -> dict[str, Any]:
    """The ``meta["devices"]`` dict of device ``device`` (by its ``index``/``id``, else position)."""
    devices = list((meta or {}).get("devices") or [])
    for entry in devices:
        if isinstance(entry, Mapping):
            for key in ("index", "id", "device"):
                if key in entry and entry[key] is not None and int(entry[key]) == int(device):
                    return dict(entry)
    if 0 <= int(device) < len(devices) and isinstance(devices[int(device)], Mapping):
        return dict(devices[int(device)])
    return {}


def limits_for(compute_capability: Any) -> tuple[dict[str, int] | None, str]:
    """Known limits of a compute capability, and where they came from in words.

    An unknown capability borrows the nearest lower known one and says so; one below sm_70
    gets nothing (None).
    """
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return None, "unknown (no compute capability)"
    if cc in KNOWN_LIMITS:
        return dict(KNOWN_LIMITS[cc]), f"table sm_{cc[0]}{cc[1]}"
    lower = [k for k in KNOWN_LIMITS if k < cc]
    if not lower:
        return None, f"unknown (sm_{cc[0]}{cc[1]} is older than the table)"
    near = max(lower)
    return dict(KNOWN_LIMITS[near]), (f"assumed from sm_{near[0]}{near[1]} "
                                      f"(sm_{cc[0]}{cc[1]} not in the table)")


def device_limits(meta: Mapping[str, Any] | None, device: int) -> dict[str, Any]:
    """Occupancy limits of ``device``: the capture's own values, filled in from the table.

    Returns every key of :data:`KNOWN_LIMITS` plus ``multiprocessors`` (or None),
    ``compute_capability`` and ``limits_source`` (e.g. "meta", "meta + table sm_87",
    "table sm_90", "assumed from sm_90 (sm_103 not in the table)", "unknown ...").
    All limit values are None when nothing is known.
    """
    entry = device_entry(meta, device)
    base, source = limits_for(entry.get("compute_capability"))
    out: dict[str, Any] = dict(base) if base else {k: None for k in KNOWN_LIMITS[(8, 0)]}
    from_meta = [k for k in META_KEYS if entry.get(k) is not None]
    for key in from_meta:
        out[key] = int(entry[key])
    if from_meta:
        source = "meta" if base is None and len(from_meta) == len(META_KEYS) else (
            f"meta + {source}" if base else "meta (incomplete)")
    # the per-block maximum recorded may be the default 48 KiB rather than the opt-in one
    if base and out.get("max_smem_per_block") is not None:
        out["max_smem_per_block"] = max(out["max_smem_per_block"], base["max_smem_per_block"])
    out["multiprocessors"] = entry.get("multiprocessors")
    out["compute_capability"] = entry.get("compute_capability")
    out["limits_source"] = source
    return out


def theoretical_occupancy(threads_per_block: Any, registers_per_thread: Any,
                          smem_per_block: Any, limits: Mapping[str, Any]) -> pd.DataFrame:
    """Occupancy of launches with these block sizes, registers and shared memory on one SM.

    Array-like inputs of one length (or scalars); ``smem_per_block`` is static + dynamic
    bytes, without the driver's reserve (added here). Registers of 0 mean unknown and do not
    limit.

    Returns one row per input: ``warps_per_block``, ``blocks_by_warps``, ``blocks_by_blocks``,
    ``blocks_by_registers``, ``blocks_by_smem`` (the cap each resource sets; a large number
    where it sets none), ``active_blocks``, ``active_warps``, ``max_warps``, ``occupancy``
    (0..1) and ``limiter`` (the resource(s) that set the minimum, joined by " and "; "does
    not fit" when a block cannot be resident at all).
    """
    threads = np.atleast_1d(np.asarray(threads_per_block, dtype=np.int64))
    regs = np.broadcast_to(np.atleast_1d(np.asarray(registers_per_thread, dtype=np.int64)),
                           threads.shape)
    smem = np.broadcast_to(np.atleast_1d(np.asarray(smem_per_block, dtype=np.int64)),
                           threads.shape)
    big = np.int64(1 << 30)
    if any(limits.get(k) is None for k in ("max_threads_per_sm", "max_blocks_per_sm")):
        nan = np.full(threads.shape, np.nan)
        return pd.DataFrame({"warps_per_block": nan, "blocks_by_warps": nan,
                             "blocks_by_blocks": nan, "blocks_by_registers": nan,
                             "blocks_by_smem": nan, "active_blocks": nan, "active_warps": nan,
                             "max_warps": nan, "occupancy": nan,
                             "limiter": np.full(threads.shape, "unknown", dtype=object)})
    warp = int(limits.get("warp_size") or 32)
    max_warps = int(limits["max_threads_per_sm"]) // warp
    warps_per_block = -(-threads // warp)
    safe_wpb = np.maximum(warps_per_block, 1)

    by_warps = np.where(warps_per_block > 0, max_warps // safe_wpb, 0)
    by_blocks = np.full(threads.shape, int(limits["max_blocks_per_sm"]), dtype=np.int64)

    # registers: whole warps, rounded to the allocation unit, per sub-partition
    unit = int(limits.get("reg_alloc_unit") or 256)
    parts = int(limits.get("sub_partitions") or 4)
    regs_sm = int(limits.get("max_regs_per_sm") or 65536)
    regs_block = int(limits.get("max_regs_per_block") or 65536)
    regs_per_warp = -(-(regs * warp) // unit) * unit
    warps_rounded = -(-warps_per_block // parts) * parts
    too_many = ((regs_per_warp * warps_rounded > regs_block)
                | (regs_per_warp * warps_per_block > regs_block)
                | (regs > int(limits.get("max_regs_per_thread") or 255)))
    warps_by_regs = (regs_sm // parts) // np.maximum(regs_per_warp, 1) * parts
    by_regs = np.where(regs <= 0, big, np.where(too_many, 0, warps_by_regs // safe_wpb))

    # shared memory: static + dynamic + reserve, rounded to the allocation unit
    s_unit = int(limits.get("smem_alloc_unit") or 128)
    reserve = int(limits.get("reserved_smem_per_block") or 0)
    smem_sm = int(limits.get("max_smem_per_sm") or 0)
    smem_block_max = int(limits.get("max_smem_per_block") or smem_sm)
    needed = smem + reserve
    alloc = -(-needed // s_unit) * s_unit
    by_smem = np.where(alloc <= 0, big, np.where(
        (smem > smem_block_max) | (alloc > smem_sm), 0, smem_sm // np.maximum(alloc, 1)))

    caps = np.stack([by_warps, by_blocks, by_regs, by_smem], axis=1)
    active = caps.min(axis=1)
    active_warps = active * warps_per_block
    occupancy = active_warps / max_warps if max_warps else np.full(threads.shape, np.nan)
    is_min = caps == active[:, None]
    names = np.array(LIMITERS, dtype=object)
    limiter = np.array([" and ".join(names[row]) for row in is_min], dtype=object)
    limiter = np.where(active == 0, "does not fit", limiter)
    invalid = threads <= 0
    return pd.DataFrame({
        "warps_per_block": warps_per_block, "blocks_by_warps": by_warps,
        "blocks_by_blocks": by_blocks, "blocks_by_registers": by_regs,
        "blocks_by_smem": by_smem, "active_blocks": active, "active_warps": active_warps,
        "max_warps": np.full(threads.shape, max_warps, dtype=np.int64),
        "occupancy": np.where(invalid, np.nan, occupancy),
        "limiter": np.where(invalid, "unknown", limiter),
    })


def kernel_occupancy(trace: Any, device: int | Iterable[int] | None = None,
                     stream: int | Iterable[int] | None = None) -> pd.DataFrame:
    """Theoretical occupancy of every distinct kernel launch configuration in ``trace``.

    One row per (device, kernel name, grid, block, registers, shared memory), most GPU time
    first: ``device, name, grid, block, threads_per_block, registers, smem_per_block, count,
    total_ns`` and the columns of :func:`theoretical_occupancy`, plus ``grid_blocks``,
    ``waves`` (grid blocks / (resident blocks per SM x SMs): below 1 the grid cannot fill the
    GPU whatever the occupancy; NaN when the SM count is unknown), ``compute_capability`` and
    ``limits_source``.
    """
    kernels = table(trace, "kernels")
    mask = event_mask(kernels, device, stream)
    k = kernels[mask] if not mask.all() else kernels
    cfg_cols = ["device", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                "registers", "static_smem", "dynamic_smem"]
    if len(k) == 0:
        return pd.DataFrame(columns=["device", "name", "grid", "block", "threads_per_block",
                                     "registers", "smem_per_block", "count", "total_ns",
                                     "occupancy", "limiter"])
    groups = (k.groupby(cfg_cols, sort=False, observed=True)["duration_ns"]
              .agg(["count", "sum"]).reset_index().rename(columns={"sum": "total_ns"}))
    threads = (groups["block_x"].astype(np.int64) * groups["block_y"].astype(np.int64)
               * groups["block_z"].astype(np.int64))
    smem = groups["static_smem"].astype(np.int64) + groups["dynamic_smem"].astype(np.int64)
    grid_blocks = (groups["grid_x"].astype(np.int64) * groups["grid_y"].astype(np.int64)
                   * groups["grid_z"].astype(np.int64))
    meta = getattr(trace, "meta", None) or {}
    parts = []
    for dev, idx in groups.groupby("device", sort=True).groups.items():
        lim = device_limits(meta, int(dev))
        occ = theoretical_occupancy(threads[idx], groups.loc[idx, "registers"], smem[idx], lim)
        occ.index = idx
        sms = lim.get("multiprocessors")
        per_gpu = occ["active_blocks"] * (float(sms) if sms else np.nan)
        occ["waves"] = np.where(per_gpu > 0, grid_blocks[idx] / per_gpu.replace(0, np.nan), np.nan)
        occ["compute_capability"] = str(lim.get("compute_capability"))
        occ["limits_source"] = lim["limits_source"]
        parts.append(occ)
    occ = pd.concat(parts).loc[groups.index]
    out = pd.DataFrame({
        "device": groups["device"].astype(np.int64),
        "name": groups["name"].astype(str),
        "grid": [f"({x}, {y}, {z})" for x, y, z in
                 zip(groups["grid_x"], groups["grid_y"], groups["grid_z"])],
        "block": [f"({x}, {y}, {z})" for x, y, z in
                  zip(groups["block_x"], groups["block_y"], groups["block_z"])],
        "threads_per_block": threads, "registers": groups["registers"].astype(np.int64),
        "smem_per_block": smem, "count": groups["count"].astype(np.int64),
        "total_ns": groups["total_ns"].astype(np.int64), "grid_blocks": grid_blocks,
    })
    out = pd.concat([out, occ], axis=1)
    return out.sort_values(["total_ns", "name"], ascending=[False, True],
                           kind="stable").reset_index(drop=True)
