"""Copies against what the link can carry, and kernels too small to keep the GPU busy.

Peak rates are per direction. They come from ``meta["devices"]`` when the capture knows the
link (``link_gbps``, or ``pcie_gen`` and ``pcie_width``; ``memory_bandwidth_gbps`` for
device-to-device copies); otherwise from defaults per GPU family, which ``peak_source``
labels "assumed". A device-to-device copy reads and writes every byte, so its peak is half
the memory bandwidth. On integrated GPUs (Jetson) host and device share one DRAM, so host
copies are bounded the same way.

Pure functions: no plotting, no I/O, no globals (the tables are constant data).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from hookmagic.analysis.tables import event_mask, table
from hookmagic.analysis.occupancy import device_entry

#: usable GB/s per lane and direction after line encoding, by PCIe generation
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}

#: (name pattern, link description, host link GB/s per direction, memory GB/s or None,
#: integrated). First match wins, so specific names come before families.
GPU_FAMILIES: tuple[tuple[str, str, float, float | None, bool], ...] = (
    (r"GH200|GB200|Grace", "NVLink-C2C", 450.0, 4000.0, False),
    (r"Orin.*Nano", "shared LPDDR5 (integrated)", 34.0, 68.0, True),
    (r"Orin.*NX", "shared LPDDR5 (integrated)", 51.2, 102.4, True),
    (r"Orin", "shared LPDDR5 (integrated)", 102.4, 204.8, True),
    (r"Xavier", "shared LPDDR4x (integrated)", 68.25, 136.5, True),
    (r"Thor", "shared LPDDR5X (integrated)", 136.5, 273.0, True),
    (r"H100.*PCIe", "PCIe Gen5 x16", 63.0, 2000.0, False),
    (r"H100.*NVL", "PCIe Gen5 x16", 63.0, 3900.0, False),
    (r"H100|H800", "PCIe Gen5 x16", 63.0, 3350.0, False),
    (r"H200|H20\b", "PCIe Gen5 x16", 63.0, 4800.0, False),
    (r"B300|B200|B100", "PCIe Gen5 x16", 63.0, 8000.0, False),
    (r"RTX PRO 6000", "PCIe Gen5 x16", 63.0, 1792.0, False),
    (r"RTX 509\d", "PCIe Gen5 x16", 63.0, 1792.0, False),
    (r"RTX 50\d\d", "PCIe Gen5 x16", 63.0, None, False),
    (r"A100.*80GB", "PCIe Gen4 x16", 31.5, 2039.0, False),
    (r"A100", "PCIe Gen4 x16", 31.5, 1555.0, False),
    (r"L40", "PCIe Gen4 x16", 31.5, 864.0, False),
    (r"\bL4\b", "PCIe Gen4 x16", 31.5, 300.0, False),
    (r"\bA10\b", "PCIe Gen4 x16", 31.5, 600.0, False),
    (r"RTX 409\d", "PCIe Gen4 x16", 31.5, 1008.0, False),
    (r"RTX 309\d", "PCIe Gen4 x16", 31.5, 936.0, False),
    (r"A30|A40|RTX 40\d\d|RTX 30\d\d|RTX A\d|Ada", "PCIe Gen4 x16", 31.5, None, False),
    (r"V100", "PCIe Gen3 x16", 15.75, 900.0, False),
    (r"\bT4\b", "PCIe Gen3 x16", 15.75, 320.0, False),
    (r"RTX 20\d\d|TITAN RTX|Quadro RTX", "PCIe Gen3 x16", 15.75, None, False),
)
DEFAULT_LINK = ("PCIe Gen4 x16", 31.5)

HOST_KINDS = ("htod", "dtoh", "htoh")


def link_peaks(meta: Any, device: int) -> dict[str, Any]:
    """Peak copy rates of ``device`` per direction and where they came from.

    Returns ``link`` (words), ``host_gbps`` (host <-> device), ``device_gbps`` (device ->
    device; NaN when unknown), ``integrated``, ``host_source`` and ``device_source``.
    """
    entry = device_entry(meta, device)
    name = str(entry.get("name") or "")
    family = next((f for f in GPU_FAMILIES if re.search(f[0], name, re.IGNORECASE)), None)
    out: dict[str, Any] = {"integrated": bool(entry.get("integrated", family[4] if family else False))}
    gen = entry.get("pcie_gen") or entry.get("pcie_link_gen")
    width = entry.get("pcie_width") or entry.get("pcie_link_width")
    if entry.get("link_gbps"):
        out.update(link=str(entry.get("link") or "link"), host_gbps=float(entry["link_gbps"]),
                   host_source="meta")
    elif gen and width and int(gen) in PCIE_LANE_GBPS:
        out.update(link=f"PCIe Gen{int(gen)} x{int(width)}",
                   host_gbps=PCIE_LANE_GBPS[int(gen)] * int(width), host_source="meta")
    elif family:
        out.update(link=family[1], host_gbps=family[2],
                   host_source=f"assumed: default for {name or 'this GPU'} ({family[1]})")
    else:
        out.update(link=DEFAULT_LINK[0], host_gbps=DEFAULT_LINK[1],
                   host_source=f"assumed: {DEFAULT_LINK[0]} (GPU {name or 'unknown'} "
                               "not in the table)")
    if entry.get("memory_bandwidth_gbps"):
        out.update(device_gbps=float(entry["memory_bandwidth_gbps"]) / 2,
                   device_source="meta (half the memory bandwidth: read + write)")
    elif family and family[3]:
        out.update(device_gbps=family[3] / 2,
                   device_source=f"assumed: half the memory bandwidth of {name} "
                                 f"({family[3]:g} GB/s)")
    else:
        out.update(device_gbps=np.nan, device_source="unknown")
    return out


def copy_bandwidth(trace: Any, device: int | Iterable[int] | None = None,
                   stream: int | Iterable[int] | None = None) -> pd.DataFrame:
    """Achieved copy bandwidth by device, direction and host memory kind, against the peak.

    One row per (device, kind, host_memory): ``count, bytes, total_ns, mean_bytes``,
    ``achieved_gbps`` (bytes / summed copy time; GB/s = 1e9 bytes/s), ``best_gbps`` (the
    fastest single copy), ``peak_gbps``, ``fraction_of_peak``, ``link`` and ``peak_source``.
    ``host_memory`` is the host side's kind (pinned, pageable, ...) for host copies, else "".
    """
    memcpy = table(trace, "memcpy")
    mask = event_mask(memcpy, device, stream)
    m = memcpy[mask] if not mask.all() else memcpy
    cols = ["device", "kind", "host_memory", "count", "bytes", "total_ns", "mean_bytes",
            "achieved_gbps", "best_gbps", "peak_gbps", "fraction_of_peak", "link", "peak_source"]
    if len(m) == 0:
        return pd.DataFrame(columns=cols)
    kind = m["kind"].astype(str).to_numpy(dtype=object)
    host = np.where(kind == "htod", m["src_kind"].astype(str).to_numpy(dtype=object),
                    np.where(kind == "dtoh", m["dst_kind"].astype(str).to_numpy(dtype=object), ""))
    dur = m["duration_ns"].to_numpy(dtype=np.int64)
    nbytes = m["bytes"].to_numpy(dtype=np.int64)
    frame = pd.DataFrame({"device": m["device"].to_numpy(dtype=np.int64), "kind": kind,
                          "host_memory": host, "bytes": nbytes, "dur": dur,
                          "rate": np.where(dur > 0, nbytes / np.maximum(dur, 1), np.nan)})
    g = (frame.groupby(["device", "kind", "host_memory"], sort=True)
         .agg(count=("bytes", "size"), bytes=("bytes", "sum"), total_ns=("dur", "sum"),
              best_gbps=("rate", "max")).reset_index())
    g["mean_bytes"] = g["bytes"] / g["count"]
    g["achieved_gbps"] = np.where(g["total_ns"] > 0, g["bytes"] / g["total_ns"].clip(lower=1),
                                  np.nan)
    meta = getattr(trace, "meta", None) or {}
    peaks, links, sources = [], [], []
    for dev, k in zip(g["device"], g["kind"]):
        p = link_peaks(meta, int(dev))
        host_copy = k in HOST_KINDS and not (p["integrated"] and k == "htoh")
        if k == "dtod" or (p["integrated"] and k in HOST_KINDS):
            # integrated GPUs copy DRAM to DRAM whatever the direction
            peaks.append(p["device_gbps"])
            links.append("device memory" if k == "dtod" else p["link"])
            sources.append(p["device_source"])
        elif host_copy:
            peaks.append(p["host_gbps"])
            links.append(p["link"])
            sources.append(p["host_source"])
        else:  # peer-to-peer, arrays, unknown: no honest peak to compare with
            peaks.append(np.nan)
            links.append("")
            sources.append("unknown")
    g["peak_gbps"] = np.asarray(peaks, dtype=np.float64)
    g["fraction_of_peak"] = g["achieved_gbps"] / g["peak_gbps"]
    g["link"] = links
    g["peak_source"] = sources
    return g[cols].sort_values(["device", "total_ns"], ascending=[True, False],
                               kind="stable").reset_index(drop=True)


def tiny_kernels(trace: Any, threshold_ns: int = 10_000,
                 device: int | Iterable[int] | None = None,
                 stream: int | Iterable[int] | None = None) -> pd.DataFrame:
    """Kernels shorter than ``threshold_ns`` (default 10 us), grouped by name, most first.

    A launch costs the host a few microseconds (more from Python), so kernels shorter than
    that cannot keep the GPU busy one after another. Columns: ``name, count, total_ns,
    mean_ns, share_of_launches`` (of all kernel launches) and ``share_of_time`` (of all
    kernel time).
    """
    kernels = table(trace, "kernels")
    mask = event_mask(kernels, device, stream)
    k = kernels[mask] if not mask.all() else kernels
    cols = ["name", "count", "total_ns", "mean_ns", "share_of_launches", "share_of_time"]
    if len(k) == 0:
        return pd.DataFrame(columns=cols)
    dur = k["duration_ns"].to_numpy(dtype=np.int64)
    small = dur < threshold_ns
    if not small.any():
        return pd.DataFrame(columns=cols)
    code, names = pd.factorize(k["name"][small] if small.sum() < len(k) else k["name"],
                               sort=False)
    counts = np.bincount(code, minlength=len(names))
    totals = np.bincount(code, weights=dur[small], minlength=len(names))
    all_time = dur.sum()
    out = pd.DataFrame({"name": np.asarray(names, dtype=object), "count": counts.astype(np.int64),
                        "total_ns": totals.astype(np.int64), "mean_ns": totals / counts,
                        "share_of_launches": counts / len(k),
                        "share_of_time": totals / all_time if all_time else 0.0})
    return out.sort_values(["count", "name"], ascending=[False, True],
                           kind="stable").reset_index(drop=True)
