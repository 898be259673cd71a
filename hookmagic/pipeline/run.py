"""The record of one pipeline run: plain tables, saved as one file of Parquet tables.

- ``events``: one row per frame per stage. ``stage_index`` 0 is the read/decode stage of the
  source. Host times (``time.perf_counter_ns``): ``enqueue_ns`` (the frame entered the stage's
  input queue; for the read stage, when the frame was due), ``start_ns``/``end_ns`` (the stage's
  ``fn`` ran, for the whole batch), ``put_ns`` (the result entered the next queue: ``put_ns -
  end_ns`` is back-pressure). ``gpu_start_ns``/``gpu_end_ns``: CUDA-event times of GPU stages on
  the host clock (-1 elsewhere). ``worker``, ``batch`` (-1 unbatched), ``batch_size``,
  ``status`` (ok, failed, none), ``error``.
- ``frames``: one row per frame: ``frame``, ``source``, ``index``, ``created_ns``, ``outcome``
  (done, dropped, failed, cancelled), ``reason``, ``error``, ``stage`` (where it ended).
- ``meta``: the stages (name, workers, batch, device), queue size, overflow policy, source,
  start time; recordings add ``recorded_on`` (GPU, driver, date) and ``description``.

Analyses (``run.stages()``, ``run.bottleneck()``, ``run.what_if()``) and views (``run.gantt()``)
are attached to :class:`PipelineRun` by :mod:`hookmagic.pipeline`.
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pandas as pd

from hookmagic.common.errors import InputFileError, LimitExceeded

SUFFIX = ".hmpipe"
FORMAT = "hookmagic.pipeline_run/1"
#: the most bytes a saved run may expand to when loaded (HOOKMAGIC_MAX_PIPE_BYTES overrides)
MAX_BYTES = 1 << 30


class PipelineRun:
    """What :meth:`Pipeline.run` measured: ``events``, ``frames`` and ``meta`` (see the module)."""

    def __init__(self, events: pd.DataFrame, frames: pd.DataFrame, meta: dict) -> None:
        self.events = events
        self._frames = frames
        self.meta = meta

    # -- plain facts --------------------------------------------------------------------
    @property
    def stage_names(self) -> list[str]:
        """Stage names in pipeline order, the read/decode stage first."""
        return [s["name"] for s in self.meta["stages"]]

    @property
    def outcomes(self) -> pd.Series:
        """Frames per outcome (done, dropped, failed, cancelled)."""
        return self._frames["outcome"].value_counts()

    @property
    def frame_outcomes(self) -> pd.DataFrame:
        """The per-frame outcome table as recorded (see :attr:`frames` for the wide table)."""
        return self._frames

    @property
    def label(self) -> str:
        """Where the run was measured (a recording's GPU, driver and date, or 'live')."""
        rec = self.meta.get("recorded_on")
        if rec:
            return (f"Recorded on {rec.get('gpu', '?')} (driver {rec.get('driver', '?')}, "
                    f"{rec.get('date', '?')})")
        return f"live run on this machine, {self.meta.get('started_at', '')}"

    def __repr__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.outcomes.items())
        return (f"<PipelineRun {self.meta.get('pipeline', '')}: {' → '.join(self.stage_names)};"
                f" {len(self._frames)} frames ({counts}); {self.label}>")

    # -- files --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Write the run to one file (a zip of Parquet tables and a JSON manifest)."""
        path = Path(path)
        if path.suffix != SUFFIX:
            path = path.with_name(path.name + SUFFIX)
        tmp = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, table in (("events", self.events), ("frames", self._frames)):
                buf = io.BytesIO()
                table.to_parquet(buf, index=False)
                zf.writestr(f"{name}.parquet", buf.getvalue())
            zf.writestr("manifest.json", json.dumps({"format": FORMAT, "meta": self.meta},
                                                   default=str))
        os.replace(tmp, path)
        return str(path)


def load_run(path: str | os.PathLike) -> PipelineRun:
    """Open a run saved by :meth:`PipelineRun.save` (one InputFileError if it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{path}: no such file")
    limit = int(os.environ.get("HOOKMAGIC_MAX_PIPE_BYTES", MAX_BYTES))
    try:
        with zipfile.ZipFile(path) as zf:
            total = sum(i.file_size for i in zf.infolist())
            if total > limit:
                raise LimitExceeded(f"{path}: expands to {total} bytes, over the {limit}-byte "
                                    "limit (raise HOOKMAGIC_MAX_PIPE_BYTES)")
            manifest = json.loads(zf.read("manifest.json"))
            if manifest.get("format") != FORMAT:
                raise InputFileError(f"{path}: not a saved pipeline run "
                                     f"(format {manifest.get('format')!r})")
            tables = {n: pd.read_parquet(io.BytesIO(zf.read(f"{n}.parquet")))
                      for n in ("events", "frames")}
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as err:
        if isinstance(err, InputFileError):
            raise
        raise InputFileError(f"{path}: not a readable pipeline run ({err})") from err
    return PipelineRun(tables["events"], tables["frames"], manifest["meta"])




def sniff(path: Path) -> bool:
    """True when ``path`` is a run saved by :meth:`PipelineRun.save` (its manifest's format;
    never raises): what ``hookmagic.load`` asks before opening it with :func:`load_run`."""
    try:
        if not path.is_file() or not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo("manifest.json")
            if info.file_size > 1 << 20:
                return False
            return json.loads(zf.read(info)).get("format") == FORMAT
    except Exception:  # a sniff answers "not mine" for anything it cannot read
        return False
