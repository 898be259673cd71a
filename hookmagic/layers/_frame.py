"""Accept a LayerProfile or its ``layers`` DataFrame wherever an analysis takes layers."""
from __future__ import annotations

from typing import Any

import pandas as pd

from hookmagic.common.errors import InvalidArgument


class NotALayerProfile(InvalidArgument, TypeError):
    """An analysis of layers was given something that is neither a LayerProfile nor its table."""


def layers_of(obj: Any) -> pd.DataFrame:
    """The layers DataFrame of ``obj`` (a LayerProfile, or already a DataFrame)."""
    if isinstance(obj, pd.DataFrame):
        return obj
    frame = getattr(obj, "layers", None)
    if isinstance(frame, pd.DataFrame):
        return frame
    raise NotALayerProfile(f"expected a LayerProfile or its layers DataFrame, got "
                           f"{type(obj).__name__}")
