"""Messages about names: what an unknown model name is told."""
from __future__ import annotations

import difflib

__all__ = ["unknown_model"]


def unknown_model(name: str, known) -> str:
    """The message for a model name that is not among ``known``: the name, then the known
    names, closest first (``unknown model 'resnt18'; known: resnet18, resnet34, ...``)."""
    known = [str(k) for k in known]
    close = difflib.get_close_matches(str(name), known, n=5, cutoff=0.5)
    rest = sorted(k for k in known if k not in close)
    shown = close + rest
    more = f", ... ({len(shown)} in all)" if len(shown) > 12 else ""
    return f"unknown model {name!r}; known: {', '.join(shown[:12])}{more}"
