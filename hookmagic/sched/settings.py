"""Plain settings (what a user edits in the panel) turned into sources and a policy.

Pure functions, so the panel only wires widgets to them and tests can check them directly.
A settings dict looks like::

    {"order": "priority", "streams": 2, "aimd": False,
     "models": {"det": {"rate": 240.0, "priority": 0, "slo_ms": 50.0,
                        "max_batch": 8, "max_delay_ms": 2.0}, ...}}
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from .policies import AIMD, Batching, Policy, Stream
from .workloads import Bursty, Cameras, Poisson, Replay

__all__ = ["offered_rate", "settings_from", "sources_from_settings", "policy_from_settings"]


def offered_rate(source: Any, duration_s: float = 1.0) -> float:
    """Mean requests per second a source offers."""
    if isinstance(source, Poisson):
        return source.rate
    if isinstance(source, Cameras):
        return source.n * source.fps
    if isinstance(source, Bursty):
        on, off = source.on_s, source.off_s
        return (source.rate_on * on + source.rate_off * off) / (on + off)
    if isinstance(source, Replay):
        return len(source.arrivals_s) / max(duration_s, 1e-9)
    raise TypeError(f"unknown source {source!r}")


def settings_from(models: Sequence[Any], sources: Sequence[Any], policy: Policy) -> dict[str, Any]:
    """Settings describing ``sources`` and ``policy`` (the panel's starting values)."""
    out: dict[str, Any] = {"order": policy.order, "streams": len(policy.streams),
                           "aimd": policy.adaptive is not None, "models": {}}
    for spec in models:
        mine = [s for s in sources if s.model == spec.name]
        b = policy.batching_for(spec.name)
        out["models"][spec.name] = {
            "rate": float(sum(offered_rate(s) for s in mine)),
            "priority": int(min((s.priority for s in mine), default=0)),
            "slo_ms": float(min((s.slo_ms for s in mine), default=100.0)),
            "max_batch": int(b.max_batch), "max_delay_ms": float(b.max_delay_ms)}
    return out


def sources_from_settings(sources: Sequence[Any], settings: Mapping[str, Any]) -> list[Any]:
    """``sources`` rescaled to each model's ``rate`` and given its ``priority`` and ``slo_ms``.

    Rates scale every source of the model by the same factor (Poisson rate, bursty rates,
    camera frame rate); replayed arrivals cannot be rescaled and keep their times.
    """
    per_model = settings["models"]
    current: dict[str, float] = {}
    for s in sources:
        current[s.model] = current.get(s.model, 0.0) + offered_rate(s)
    out = []
    for s in sources:
        ms = per_model.get(s.model)
        if ms is None:
            out.append(s)
            continue
        f = ms["rate"] / current[s.model] if current[s.model] > 0 else 0.0
        common = {"priority": int(ms["priority"]), "slo_ms": float(ms["slo_ms"])}
        if isinstance(s, Poisson):
            out.append(replace(s, rate=s.rate * f, **common))
        elif isinstance(s, Cameras):
            out.append(replace(s, fps=s.fps * f, **common))
        elif isinstance(s, Bursty):
            out.append(replace(s, rate_on=s.rate_on * f, rate_off=s.rate_off * f, **common))
        else:
            out.append(replace(s, **common))
    return out


def policy_from_settings(settings: Mapping[str, Any], base: Policy | None = None) -> Policy:
    """The :class:`Policy` the settings describe (other fields from ``base``)."""
    base = base or Policy()
    batching = {name: Batching(int(m["max_batch"]), float(m["max_delay_ms"]))
                for name, m in settings["models"].items()}
    adaptive = ({name: AIMD(slo_ms=float(m["slo_ms"]), max_batch=int(m["max_batch"]))
                 for name, m in settings["models"].items()} if settings.get("aimd") else None)
    k = int(settings.get("streams", len(base.streams)))
    streams = base.streams if k == len(base.streams) else tuple(Stream() for _ in range(k))
    return replace(base, order=settings.get("order", base.order), batching=batching,
                   adaptive=adaptive, streams=streams)
