"""Who this process is in a distributed job, read from the environment its launcher set.

Launchers recognised, first match wins:

- ``torchrun`` / torch.distributed.elastic: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
  ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (node), ``TORCHELASTIC_RUN_ID`` (job id; torchrun's
  default ``"none"`` is replaced by ``MASTER_ADDR:MASTER_PORT``).
- SLURM (``srun``): ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``, ``SLURM_NODEID``,
  ``SLURM_JOB_ID``.
- Open MPI / MPICH (``mpirun``): ``OMPI_COMM_WORLD_RANK`` ... / ``PMI_RANK``, ``PMI_SIZE``.
- Ray: a process inside a Ray worker (``ray`` imported and initialised): the job id, node id,
  actor id and GPU ids from Ray's runtime context; the rank comes from Ray Train's context
  when there is one, else from :func:`hookmagic.ray.capture`'s own numbering.

``HOOKMAGIC_RANK``, ``HOOKMAGIC_WORLD_SIZE`` and ``HOOKMAGIC_JOB_ID`` override what was found.
A process that no launcher started is rank 0 of a world of 1 (launcher ``"single"``).
"""
from __future__ import annotations

import os
import socket
import sys
import re
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from hookmagic.common.devices import gpu_identity
from hookmagic.traceset.members import MAX_RANKS


@dataclass
class RankIdentity:
    """One rank of a job; ``as_meta()`` is what a trace keeps in ``meta["rank"]``.

    ``device`` (CUDA ordinal in the process) and ``gpu_uuid`` are filled from the capture when
    it ends (the device most of its kernels ran on); -1 and "" when unknown.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    host: str = ""
    job_id: str = ""
    launcher: str = "single"
    pid: int = 0
    device: int = -1
    gpu_uuid: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_meta(self) -> dict[str, Any]:
        """A JSON-ready dict (``extra`` merged in, e.g. Ray's node and actor ids)."""
        out = asdict(self)
        extra = out.pop("extra")
        out.update(extra)
        return out


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int | None:
    """The first of ``names`` set to a whole number from 0 to :data:`MAX_RANKS`."""
    for name in names:
        value = env.get(name)
        # ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses
        if value is not None and re.fullmatch(r"[0-9]{1,9}", value.strip()) \
                and int(value) <= MAX_RANKS:
            return int(value)
    return default


def rank_identity(env: Mapping[str, str] | None = None) -> RankIdentity:
    """This process's place in its job, from ``env`` (default ``os.environ``) and Ray if running."""
    env = os.environ if env is None else env
    ident = RankIdentity(host=socket.gethostname(), pid=os.getpid())
    if _int(env, "RANK") is not None and _int(env, "WORLD_SIZE") is not None:
        ident.launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env or "LOCAL_RANK" in env \
            else "env"
        ident.rank = _int(env, "RANK", default=0)
        ident.world_size = _int(env, "WORLD_SIZE", default=1)
        ident.local_rank = _int(env, "LOCAL_RANK", default=ident.rank)
        ident.local_world_size = _int(env, "LOCAL_WORLD_SIZE", default=ident.world_size)
        ident.node_rank = _int(env, "GROUP_RANK", "NODE_RANK", default=0)
        run_id = env.get("TORCHELASTIC_RUN_ID", "none")
        if run_id in ("", "none"):
            addr, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
            run_id = f"{addr}:{port}" if addr or port else ""
        ident.job_id = run_id
    elif _int(env, "SLURM_PROCID") is not None:
        ident.launcher = "slurm"
        ident.rank = _int(env, "SLURM_PROCID", default=0)
        ident.world_size = _int(env, "SLURM_NTASKS", default=1)
        ident.local_rank = _int(env, "SLURM_LOCALID", default=0)
        ident.local_world_size = _int(env, "SLURM_NTASKS_PER_NODE", default=ident.world_size)
        ident.node_rank = _int(env, "SLURM_NODEID", default=0)
        ident.job_id = env.get("SLURM_JOB_ID", "")
    elif _int(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK") is not None:
        ident.launcher = "mpi"
        ident.rank = _int(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK", default=0)
        ident.world_size = _int(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", default=1)
        ident.local_rank = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                default=0)
        ident.local_world_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                      default=ident.world_size)
        ident.job_id = env.get("OMPI_MCA_ess_base_jobid", env.get("PMI_JOBID", ""))
    else:
        ray = _ray_context()
        if ray:
            ident.launcher = "ray"
            ident.job_id = ray.pop("job_id", "")
            train = ray.pop("train", None)
            if train:
                ident.rank, ident.world_size = train["rank"], train["world_size"]
                ident.local_rank = train["local_rank"]
                ident.local_world_size = train["local_world_size"]
                ident.node_rank = train["node_rank"]
                ident.extra["ray_train"] = True
            ident.extra.update(ray)
    ident.rank = _override(env, "HOOKMAGIC_RANK", ident.rank, low=0)
    ident.world_size = _override(env, "HOOKMAGIC_WORLD_SIZE", ident.world_size, low=1)
    ident.job_id = env.get("HOOKMAGIC_JOB_ID", ident.job_id)
    if ident.rank >= ident.world_size:
        warnings.warn(f"hookmagic: rank {ident.rank} is not below world size "
                      f"{ident.world_size} (launcher {ident.launcher!r}); the world size is "
                      f"taken as {ident.rank + 1}", stacklevel=2)
        ident.world_size = ident.rank + 1
    return ident


def _override(env: Mapping[str, str], name: str, found: int, *, low: int) -> int:
    """``env[name]`` as a whole number in ``[low, MAX_RANKS]``; unset: ``found``; anything
    else: ``found`` and one warning naming the variable (never a made-up rank or size)."""
    text = env.get(name)
    if text is None:
        return found
    value = text.strip()
    if re.fullmatch(r"[0-9]{1,9}", value) and low <= int(value) <= MAX_RANKS:
        return int(value)
    warnings.warn(f"hookmagic: {name}={text!r} is not a whole number from {low} to "
                  f"{MAX_RANKS}; it is ignored (using {found} from the launcher)", stacklevel=3)
    return found


def _ray_context() -> dict[str, Any]:
    """Ray's runtime context of this worker, or {} outside Ray (Ray is never imported here)."""
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return {}
    try:
        ctx = ray.get_runtime_context()
        out: dict[str, Any] = {"job_id": str(ctx.get_job_id()), "ray_node_id": ctx.get_node_id(),
                               "ray_worker_id": ctx.get_worker_id()}
        try:
            out["ray_actor_id"] = ctx.get_actor_id() or ""
        except Exception:
            out["ray_actor_id"] = ""
        try:
            out["ray_gpu_ids"] = [str(g) for g in ray.get_gpu_ids()]
        except Exception:
            out["ray_gpu_ids"] = []
    except Exception:
        return {}
    train = sys.modules.get("ray.train")
    if train is not None:
        try:
            tctx = train.get_context()
            out["train"] = {"rank": int(tctx.get_world_rank()),
                            "world_size": int(tctx.get_world_size()),
                            "local_rank": int(tctx.get_local_rank()),
                            "local_world_size": int(tctx.get_local_world_size()),
                            "node_rank": int(tctx.get_node_rank())}
        except Exception:
            pass
    return out


def fill_device(ident: RankIdentity, meta: Mapping[str, Any], kernel_devices: Any) -> None:
    """Set ``ident.device`` and ``gpu_uuid``: the device most kernels ran on (else the local
    rank's device when it exists, the usual one-GPU-per-rank layout), looked up in
    ``meta["devices"]``."""
    import numpy as np

    devices = meta.get("devices") or []
    values = np.asarray(kernel_devices)
    values = values[values >= 0] if values.size else values
    if values.size:
        uniq, counts = np.unique(values, return_counts=True)
        ident.device = int(uniq[np.argmax(counts)])
    elif any(int(d.get("index", -1)) == ident.local_rank for d in devices):
        ident.device = ident.local_rank
    for d in devices:
        if int(d.get("index", -2)) == ident.device:
            ident.gpu_uuid = gpu_identity(d)
