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

from hookmagic.common.errors import InvalidArgument

from .policies import AIMD, Batching, Policy, Stream
from .workloads import Bursty, Cameras, Poisson, Replay

__all__ = ["offered_rate", "settings_from", "sources_from_settings", "policy_from_settings"]


class UnknownSource(InvalidArgument, TypeError):
    """A source that is neither a known workload source nor a list of them."""


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
    raise UnknownSource(f"unknown source {source!r}")


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
    per_model = _models_of(settings)
    current: dict[str, float] = {}
    for s in sources:
        current[s.model] = current.get(s.model, 0.0) + offered_rate(s)
    _check_names(per_model, list(current))
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
    per_model = _models_of(settings)
    batching = {name: Batching(m["max_batch"], m["max_delay_ms"])
                for name, m in per_model.items()}
    adaptive = ({name: AIMD(slo_ms=m["slo_ms"], max_batch=m["max_batch"])
                 for name, m in per_model.items()} if settings.get("aimd") else None)
    k = int(settings.get("streams", len(base.streams)))
    streams = base.streams if k == len(base.streams) else tuple(Stream() for _ in range(k))
    return replace(base, order=settings.get("order", base.order), batching=batching,
                   adaptive=adaptive, streams=streams)


#: the keys of one model's settings, with their units
MODEL_KEYS = {"rate": "requests per second", "priority": "0 is most urgent",
              "slo_ms": "milliseconds", "max_batch": "requests", "max_delay_ms": "milliseconds"}


def _models_of(settings: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    """``settings["models"]``, checked: a mapping of model name to a mapping with every key of
    :data:`MODEL_KEYS` and no other."""
    models = settings.get("models") if isinstance(settings, Mapping) else None
    if not isinstance(models, Mapping):
        raise InvalidArgument("settings need a 'models' mapping of model name to its settings")
    for name, m in models.items():
        if not isinstance(m, Mapping):
            raise InvalidArgument(f"settings for model {name!r} must be a mapping with keys "
                                  f"{sorted(MODEL_KEYS)}")
        missing = sorted(set(MODEL_KEYS) - set(m))
        extra = sorted(set(m) - set(MODEL_KEYS))
        if missing or extra:
            raise InvalidArgument(f"settings for model {name!r}: "
                                  + (f"missing {missing}" if missing else "")
                                  + ("; " if missing and extra else "")
                                  + (f"unknown key(s) {extra}" if extra else "")
                                  + f" (keys and units: {MODEL_KEYS})")
    return models


def _check_names(per_model: Mapping[str, Any], known: Sequence[str]) -> None:
    unknown = sorted(set(per_model) - set(known))
    if unknown:
        raise InvalidArgument(f"settings name unknown model(s) {unknown}; the models are "
                              f"{sorted(set(known))}")
