"""Workloads: when requests arrive, for which model, with what deadline and priority.

Describe traffic as a list of sources and turn it into a :class:`Workload` (a table of
requests sorted by arrival) with :func:`make_workload`::

    wl = make_workload([Poisson("resnet50", rate=200, slo_ms=30),
                        Cameras("yolo", n=8, fps=30, slo_ms=50, priority=0),
                        Bursty("bert", rate_on=800, on_s=0.2, off_s=1.0, slo_ms=100, priority=2)],
                       duration_s=10, seed=1)

Each source draws from its own random stream (spawned from ``seed``), so adding or editing
one source never changes the arrivals of another. Priority 0 is the most urgent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from hookmagic.common import checks
from hookmagic.common.errors import InvalidArgument

__all__ = ["Poisson", "Cameras", "Bursty", "Replay", "Workload", "make_workload"]

COLUMNS = ("arrival_s", "model", "priority", "slo_ms", "deadline_s", "camera", "source")

#: a source draws at most this many arrivals (a guard against rate=1e12 exhausting memory)
MAX_ARRIVALS = 50_000_000


def _common(src) -> None:
    """Checks every source shares: a model name, an SLO > 0 in ms (inf: none), an int priority."""
    if not isinstance(src.model, str) or not src.model:
        raise InvalidArgument(f"{type(src).__name__}: model must be a model name, "
                              f"not {src.model!r}")
    kind = type(src).__name__
    object.__setattr__(src, "slo_ms", checks.number(f"{kind}({src.model!r}) slo_ms", src.slo_ms,
                                                    positive=True, allow_inf=True))
    object.__setattr__(src, "priority", checks.integer(f"{kind}({src.model!r}) priority",
                                                       src.priority))


def _expected(kind: str, rate: float, duration_s: float) -> None:
    if rate * duration_s > MAX_ARRIVALS:
        raise InvalidArgument(f"{kind}: {rate:g} requests/s over {duration_s:g} s is more than "
                              f"{MAX_ARRIVALS:,} arrivals; shorten duration_s or lower the rate")


@dataclass(frozen=True)
class Poisson:
    """Poisson arrivals at ``rate`` requests per second."""
    model: str
    rate: float
    slo_ms: float = 100.0
    priority: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        _common(self)
        object.__setattr__(self, "rate", checks.number(f"Poisson({self.model!r}) rate (requests/s)",
                                                       self.rate, non_negative=True))

    def arrivals(self, duration_s: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        _expected("Poisson", self.rate, duration_s)
        if self.rate <= 0:
            return np.empty(0), np.empty(0, dtype=np.int64)
        # Draw a few extra gaps so one cumsum nearly always covers the window.
        n = int(self.rate * duration_s + 6 * np.sqrt(self.rate * duration_s) + 16)
        t = np.cumsum(rng.exponential(1.0 / self.rate, n))
        while t[-1] < duration_s:
            more = np.cumsum(rng.exponential(1.0 / self.rate, n)) + t[-1]
            t = np.concatenate([t, more])
        t = t[t < duration_s]
        return t, np.full(len(t), -1, dtype=np.int64)


@dataclass(frozen=True)
class Cameras:
    """``n`` periodic cameras at ``fps``, each with a random phase and Gaussian jitter.

    Frames of camera ``k`` arrive near ``phase_k + j / fps``; ``jitter_ms`` is the standard
    deviation of each frame's offset (clipped to a third of the frame period so frames of one
    camera stay in order).
    """
    model: str
    n: int = 4
    fps: float = 30.0
    jitter_ms: float = 1.0
    slo_ms: float = 66.0
    priority: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        _common(self)
        what = f"Cameras({self.model!r})"
        object.__setattr__(self, "n", checks.integer(f"{what} n (cameras)", self.n, minimum=1))
        object.__setattr__(self, "fps", checks.number(f"{what} fps (frames/s)", self.fps,
                                                      positive=True))
        object.__setattr__(self, "jitter_ms", checks.number(f"{what} jitter_ms", self.jitter_ms,
                                                            non_negative=True))

    def arrivals(self, duration_s: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        _expected("Cameras", self.n * self.fps, duration_s)
        period = 1.0 / self.fps
        frames = int(np.ceil(duration_s * self.fps)) + 1
        phase = rng.uniform(0.0, period, self.n)
        jit = rng.normal(0.0, self.jitter_ms / 1e3, (self.n, frames))
        jit = np.clip(jit, -period / 3, period / 3)
        t = phase[:, None] + np.arange(frames)[None, :] * period + jit
        cam = np.repeat(np.arange(self.n, dtype=np.int64), frames)
        t = t.ravel()
        keep = (t >= 0) & (t < duration_s)
        return t[keep], cam[keep]


@dataclass(frozen=True)
class Bursty:
    """On/off (two-state Markov-modulated Poisson) traffic.

    Poisson at ``rate_on`` during on-periods of mean ``on_s`` seconds and at ``rate_off``
    during off-periods of mean ``off_s``; period lengths are exponential. Starts off.

    The period lengths come from a random stream of their own and the arrivals from unit-rate
    exponential gaps scaled by the rate, so that for one seed the bursts fall at the same times
    whatever the rates, and arrival times move continuously with them: a latency table measured
    again (a rate 1 % different) gives the same bursts, not other ones.
    """
    model: str
    rate_on: float
    on_s: float = 0.2
    off_s: float = 1.0
    rate_off: float = 0.0
    slo_ms: float = 100.0
    priority: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        _common(self)
        what = f"Bursty({self.model!r})"
        for field_, positive in (("rate_on", False), ("rate_off", False), ("on_s", True),
                                 ("off_s", True)):
            object.__setattr__(self, field_, checks.number(
                f"{what} {field_}", getattr(self, field_), positive=positive,
                non_negative=True))

    def arrivals(self, duration_s: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        _expected("Bursty", max(self.rate_on, self.rate_off), duration_s)
        _expected("Bursty (on/off periods)", 1.0 / (self.on_s + self.off_s), duration_s)
        return self._draw(duration_s, rng)

    def _draw(self, duration_s: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Periods from one child stream, arrivals of each state from another (a Poisson process
        on that state's own time axis, mapped back onto the periods)."""
        periods, on_arr, off_arr = rng.spawn(3)
        edges, t, on = [0.0], 0.0, False
        while t < duration_s:
            t += periods.exponential(self.on_s if on else self.off_s)
            edges.append(min(t, duration_s))
            on = not on
        e = np.asarray(edges)
        starts, ends = e[:-1], e[1:]
        out = []
        for state, rate, g in ((False, self.rate_off, off_arr), (True, self.rate_on, on_arr)):
            sel = (np.arange(len(starts)) % 2 == 1) == state  # periods alternate, off first
            s0, s1 = starts[sel], ends[sel]
            total = float((s1 - s0).sum())
            if rate <= 0 or total <= 0:
                continue
            # unit-rate gaps scaled by 1/rate: the same draws at another rate move continuously
            n = int(rate * total + 6 * np.sqrt(rate * total) + 16)
            u = np.cumsum(g.exponential(1.0, n))
            while u[-1] < rate * total:
                u = np.concatenate([u, u[-1] + np.cumsum(g.exponential(1.0, n))])
            x = u[u < rate * total] / rate  # seconds on this state's own clock
            cum = np.concatenate([[0.0], np.cumsum(s1 - s0)])
            k = np.clip(np.searchsorted(cum, x, side="right") - 1, 0, len(s0) - 1)
            out.append(s0[k] + (x - cum[k]))
        a = np.sort(np.concatenate(out)) if out else np.empty(0)
        a = a[a < duration_s]
        return a, np.full(len(a), -1, dtype=np.int64)


@dataclass(frozen=True)
class Replay:
    """Recorded arrival times (seconds from the start) replayed as they are."""
    model: str
    arrivals_s: tuple[float, ...]
    slo_ms: float = 100.0
    priority: int = 0
    camera: int = -1
    name: str = ""

    def __post_init__(self) -> None:
        _common(self)
        what = f"Replay({self.model!r})"
        try:
            times = tuple(self.arrivals_s)
        except TypeError:
            raise InvalidArgument(f"{what} arrivals_s must be a sequence of seconds") from None
        object.__setattr__(self, "arrivals_s", tuple(
            checks.number(f"{what} arrivals_s[{i}]", t, non_negative=True)
            for i, t in enumerate(times)))
        object.__setattr__(self, "camera", checks.integer(f"{what} camera", self.camera,
                                                          minimum=-1))

    def arrivals(self, duration_s: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        a = np.sort(np.asarray(self.arrivals_s, dtype=float))
        a = a[a < duration_s]
        return a, np.full(len(a), self.camera, dtype=np.int64)


Source = Poisson | Cameras | Bursty | Replay


class Workload:
    """A table of requests sorted by arrival: one row per request.

    Columns: ``arrival_s`` (seconds from the start), ``model``, ``priority`` (0 most urgent),
    ``slo_ms``, ``deadline_s`` (arrival + SLO), ``camera`` (-1 when not from a camera; camera
    ids are unique across sources) and ``source`` (the source's name).
    """

    def __init__(self, requests: pd.DataFrame, duration_s: float | None = None,
                 sources: Sequence[Source] = (), seed: int | None = None) -> None:
        missing = {"arrival_s", "model"} - set(requests.columns)
        if missing:
            raise InvalidArgument(f"workload table lacks {sorted(missing)}")
        if duration_s is not None:
            duration_s = checks.number("duration_s", duration_s, non_negative=True)
        r = requests.copy()
        try:
            r["arrival_s"] = pd.to_numeric(r["arrival_s"]).astype(float)
            if "slo_ms" in r:
                r["slo_ms"] = pd.to_numeric(r["slo_ms"]).astype(float)
        except (ValueError, TypeError):
            raise InvalidArgument("workload arrival_s and slo_ms must be numbers") from None
        bad = ~np.isfinite(r["arrival_s"].to_numpy()) | (r["arrival_s"].to_numpy() < 0)
        if bad.any():
            raise InvalidArgument(f"workload has {int(bad.sum())} arrival time(s) that are NaN, "
                                  "infinite or negative")
        if "slo_ms" in r and (np.isnan(r["slo_ms"].to_numpy()).any()
                              or (r["slo_ms"].to_numpy() <= 0).any()):
            raise InvalidArgument("workload slo_ms must be > 0 (inf: no SLO), not NaN")
        r["priority"] = r["priority"].astype(np.int64) if "priority" in r else np.int64(0)
        r["slo_ms"] = r["slo_ms"].astype(float) if "slo_ms" in r else np.inf
        r["deadline_s"] = r["arrival_s"] + r["slo_ms"] / 1e3
        r["camera"] = r["camera"].astype(np.int64) if "camera" in r else np.int64(-1)
        r["source"] = r["source"] if "source" in r else r["model"]
        # Categoricals: cheap to copy into results, and fast to group by.
        for col in ("model", "source"):
            if not isinstance(r[col].dtype, pd.CategoricalDtype):
                r[col] = pd.Categorical(r[col].astype(str),
                                        categories=list(dict.fromkeys(r[col].astype(str))))
        r = r.sort_values("arrival_s", kind="stable").reset_index(drop=True)
        self.requests: pd.DataFrame = r[list(COLUMNS)]
        self.duration_s = float(duration_s if duration_s is not None
                                else (r["arrival_s"].max() if len(r) else 0.0))
        self.sources = tuple(sources)
        self.seed = seed

    def __len__(self) -> int:
        return len(self.requests)

    def __repr__(self) -> str:
        per = self.requests.groupby("model").size().to_dict()
        return f"Workload({len(self)} requests over {self.duration_s:g} s: {per})"

    @property
    def models(self) -> list[str]:
        """Model names in order of first appearance."""
        return [str(m) for m in dict.fromkeys(self.requests["model"])]

    def arrays(self, model_names: Sequence[str]) -> dict[str, np.ndarray]:
        """Plain arrays for the engines; ``model`` becomes an index into ``model_names``."""
        r = self.requests
        unknown = set(r["model"].cat.categories) - set(model_names)
        used = set(r["model"].unique())
        if unknown & used:
            from .names import unknown_model
            raise InvalidArgument(f"the workload's {unknown_model(sorted(unknown & used)[0], model_names)}"
                                  " (no spec of that name)")
        codes = pd.Categorical(r["model"], categories=list(model_names)).codes
        return {
            "arrival": r["arrival_s"].to_numpy(float),
            "model": codes.astype(np.int64),
            "priority": r["priority"].to_numpy(np.int64),
            "deadline": r["deadline_s"].to_numpy(float),
            "camera": r["camera"].to_numpy(np.int64),
        }


def make_workload(sources: Sequence[Source], duration_s: float, seed: int = 0) -> Workload:
    """Draw every source's arrivals over ``[0, duration_s)`` and merge them into a Workload."""
    duration_s = checks.number("duration_s", duration_s, non_negative=True)
    seed = checks.integer("seed", seed, minimum=0)
    sources = list(sources)
    for src in sources:
        if not isinstance(src, (Poisson, Cameras, Bursty, Replay)):
            raise InvalidArgument(f"a workload source is Poisson, Cameras, Bursty or Replay, "
                                  f"not {type(src).__name__}")
    children = np.random.SeedSequence(seed).spawn(len(sources))
    frames, cam_base = [], 0
    for k, (src, ss) in enumerate(zip(sources, children)):
        t, cam = src.arrivals(duration_s, np.random.default_rng(ss))
        if isinstance(src, Cameras):
            cam = cam + cam_base
            cam_base += src.n
        elif isinstance(src, Replay) and src.camera >= 0:
            cam_base = max(cam_base, src.camera + 1)
        frames.append(pd.DataFrame({
            "arrival_s": t, "model": src.model, "priority": int(src.priority),
            "slo_ms": float(src.slo_ms), "camera": cam,
            "source": src.name or f"{type(src).__name__.lower()}{k}:{src.model}",
        }))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        {c: [] for c in ("arrival_s", "model")})
    return Workload(table, duration_s=duration_s, sources=sources, seed=seed)
