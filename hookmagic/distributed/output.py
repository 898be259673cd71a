"""Writing a finished capture as one rank's trace folder: ``DIR/rank=<N>``."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from hookmagic.distributed.identity import RankIdentity, fill_device, rank_identity
from hookmagic.trace.folder import save_trace_folder
from hookmagic.trace.model import Trace

_counts: dict[tuple[str, int], int] = {}
_lock = threading.Lock()


def rank_folder_name(rank: int, index: int) -> str:
    """``rank=<N>`` for a rank's first capture in a process, ``rank=<N>.<K>`` for its K-th after."""
    return f"rank={rank}" if index == 0 else f"rank={rank}.{index}"


def save_rank_trace(trace: Trace, directory: str | os.PathLike,
                    identity: RankIdentity | None = None) -> str:
    """Put this rank's identity in ``trace.meta["rank"]`` and write it under ``directory``.

    The folder is ``rank=<N>`` (``rank=<N>.<K>`` for the same process's K-th capture into the
    same directory); an unavailable capture is written too, so the set shows why that rank has
    no data instead of silently lacking it. Returns the folder's path.
    """
    ident = identity or rank_identity()
    kernels = trace.kernels["device"].to_numpy() if "kernels" in trace.__dict__ else []
    fill_device(ident, trace.meta, kernels)
    directory = Path(os.path.expanduser(os.fspath(directory)))
    with _lock:
        key = (str(directory.resolve()), ident.rank)
        index = _counts.get(key, 0)
        _counts[key] = index + 1
    meta = ident.as_meta()
    meta["capture"] = index
    trace.meta["rank"] = meta
    return save_trace_folder(trace, directory / rank_folder_name(ident.rank, index))
