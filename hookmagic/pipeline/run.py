"""The record of one pipeline run: plain tables, saved as one file of Parquet tables.

- ``events``: one row per frame per stage. ``stage_index`` 0 is the read/decode stage of the
  source. Host times (``time.perf_counter_ns``): ``enqueue_ns`` (the frame entered the stage's
  input queue; for the read stage, when the frame was due), ``start_ns``/``end_ns`` (the stage's
  ``fn`` ran, for the whole batch), ``put_ns`` (the result entered the next queue: ``put_ns -
  end_ns`` is back-pressure). ``gpu_start_ns``/``gpu_end_ns``: CUDA-event times of GPU stages on
  the host clock (-1 elsewhere). ``worker``, ``batch`` (-1 unbatched), ``batch_size``,
  ``status`` (ok, failed, none), ``error``. ``cpu_ns`` (runs recorded since it exists, with
  ``instrument=True``; -1 where unknown): the CPU time the executing thread spent in the execution (for a GPU stage, before
  the wait for its stream), what the model takes as its GIL-held part.
- ``frames``: one row per frame: ``frame``, ``source``, ``index``, ``created_ns``, ``outcome``
  (done, dropped, failed, cancelled), ``reason``, ``error``, ``stage`` (where it ended).
- ``meta``: the stages (name, workers, batch, device), queue size, overflow policy, source,
  start time; recordings add ``recorded_on`` (GPU, driver, date) and ``description``.

Analyses (``run.summary()``, ``run.stages()``, ``run.bottleneck()``, ``run.what_if()``) and
charts (``run.gantt()``, ``run.stage_chart()``) are registered on :class:`PipelineRun` by
:mod:`hookmagic.pipeline` through :mod:`hookmagic.common.accessors` (the data model imports
nothing above it).
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pandas as pd

from hookmagic.common.accessors import accepts_methods
from hookmagic.common import files
from hookmagic.common.errors import BadNumbers, InputFileError, LimitExceeded
from hookmagic.common.results import SAVED_KIND_KEY

SUFFIX = ".hmpipe"
FORMAT = "hookmagic.pipeline_run/1"
#: the most bytes a saved run may expand to when loaded (HOOKMAGIC_MAX_PIPE_BYTES overrides)
MAX_BYTES = 1 << 30
KIND = "pipeline_run"
#: the columns every saved run's tables must have (what the analyses read)
EVENT_COLUMNS = ("frame", "stage", "stage_index", "worker", "batch", "batch_size", "enqueue_ns",
                 "start_ns", "end_ns", "put_ns", "gpu_start_ns", "gpu_end_ns", "status", "error")
FRAME_COLUMNS = ("frame", "source", "index", "created_ns", "outcome", "reason", "error", "stage")


@accepts_methods("PipelineRun")
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
    def save(self, path: str | os.PathLike) -> Path:
        """Write the run to one file (a zip of Parquet tables and a JSON manifest) at ``path``
        (``.hmpipe`` appended when it has another suffix); ``hookmagic.load`` opens it."""
        path = Path(path)
        if path.suffix != SUFFIX:
            path = path.with_name(path.name + SUFFIX)
        tmp = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, table in (("events", self.events), ("frames", self._frames)):
                buf = io.BytesIO()
                table.to_parquet(buf, index=False)
                zf.writestr(f"{name}.parquet", buf.getvalue())
            zf.writestr("manifest.json", json.dumps(
                {"format": FORMAT, SAVED_KIND_KEY: KIND, "meta": self.meta}, default=str))
        os.replace(tmp, path)
        return path


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
            manifest = json.loads(files.read_zip_member(zf, "manifest.json", str(path)))
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                found = manifest.get("format") if isinstance(manifest, dict) else "not an object"
                raise InputFileError(f"{path}: not a saved pipeline run (format {found!r})")
            if manifest.get(SAVED_KIND_KEY, KIND) != KIND:
                raise InputFileError(f"{path}: its manifest says it holds a "
                                     f"{manifest.get(SAVED_KIND_KEY)!r}, not a pipeline run")
            meta = manifest.get("meta")
            if not isinstance(meta, dict) or not _valid_stages(meta.get("stages")):
                raise InputFileError(f"{path}: the manifest's meta lacks a list of named stages")
            # each member within the size budget and the expansion ratio
            tables = {n: pd.read_parquet(io.BytesIO(files.read_zip_member(zf, f"{n}.parquet",
                                                                         str(path))))
                      for n in ("events", "frames")}
            for n, cols in (("events", EVENT_COLUMNS), ("frames", FRAME_COLUMNS)):
                missing = [c for c in cols if c not in tables[n].columns]
                if missing:
                    raise InputFileError(f"{path}: the {n} table lacks columns {missing}")
            _check_numbers(path, tables["events"], tables["frames"])
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as err:
        if isinstance(err, InputFileError):
            raise
        raise InputFileError(f"{path}: not a readable pipeline run ({err})") from err
    return PipelineRun(tables["events"], tables["frames"], meta)


#: integer columns of a saved run's tables; times are host nanoseconds, -1 where a time does
#: not apply (no previous stage, no GPU)
_INTEGERS = {"events": ("frame", "stage_index", "worker", "batch", "batch_size", "enqueue_ns",
                        "start_ns", "end_ns", "put_ns", "gpu_start_ns", "gpu_end_ns"),
             "frames": ("frame", "index", "created_ns")}
#: integer columns a saved run may lack (recorded before they existed)
_OPTIONAL_INTEGERS = {"events": ("cpu_ns",), "frames": ()}


def _check_numbers(path: Path, events: pd.DataFrame, frames: pd.DataFrame) -> None:
    """Refuse a saved run whose times could not have been measured: not whole numbers, below
    the -1 that means "none", or an execution that ends before it starts."""
    for name, table in (("events", events), ("frames", frames)):
        cols = _INTEGERS[name] + tuple(c for c in _OPTIONAL_INTEGERS[name] if c in table.columns)
        wrong = [c for c in cols if not pd.api.types.is_integer_dtype(table[c])]
        if wrong:
            raise InputFileError(f"{path}: the {name} table holds {', '.join(wrong)} as "
                                 "something other than whole numbers")
        low = [c for c in cols if len(table) and int(table[c].min()) < -1]
        if low:
            raise BadNumbers(f"{path}: the {name} table holds impossible values in "
                             f"{', '.join(low)} (times and counts are never below -1)")
    if len(events) and bool((events["end_ns"] < events["start_ns"]).any()):
        raise BadNumbers(f"{path}: {int((events['end_ns'] < events['start_ns']).sum())} "
                         "stage execution(s) end before they start")


def _valid_stages(stages: object) -> bool:
    return (isinstance(stages, list) and len(stages) > 0
            and all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in stages))


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
            manifest = json.loads(zf.read(info))
            return isinstance(manifest, dict) and manifest.get("format") == FORMAT
    except Exception:  # a sniff answers "not mine" for anything it cannot read
        return False
