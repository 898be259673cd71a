"""Captures of every rank of a distributed job (a source: it produces per-rank traces).

- :func:`rank_identity` (``identity.py``): who this process is in its job (rank, local rank,
  world size, host, job id, launcher), read from the environment torchrun, SLURM, MPI or Ray set.
- :func:`save_rank_trace` (``output.py``): write a finished capture as ``DIR/rank=<N>``, a trace
  folder DuckDB reads directly; what ``hookmagic.capture(dir=DIR)`` calls.
- The environment-variable form (``HOOKMAGIC_CAPTURE_DIR``, ``HOOKMAGIC_CAPTURE_STEPS``,
  ``HOOKMAGIC_CAPTURE_RANKS``) lives with the capture it starts, in
  :mod:`hookmagic.cupti.autocapture`; ``import hookmagic`` installs it, so a ``torchrun`` job
  needs nothing beyond that import.

Reading many ranks together is :func:`hookmagic.load_many` (:mod:`hookmagic.traceset`).
"""
from hookmagic.distributed.identity import RankIdentity, rank_identity
from hookmagic.distributed.output import save_rank_trace

__all__ = ["RankIdentity", "rank_identity", "save_rank_trace"]
