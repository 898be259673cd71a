"""Layer-by-layer profiles of TensorRT engines, trtexec exports, PyTorch modules and ONNX Runtime.

Every source produces one :class:`LayerProfile`; the analyses in this package are pure
functions over its ``layers`` DataFrame, and ``hookmagic.views.layers`` draws them.

>>> from hookmagic.layers import from_trtexec
>>> p = from_trtexec(profile="x.profile.json", layers="x.graph.json")   # doctest: +SKIP
>>> p.total_ms, p.top(5)                                                 # doctest: +SKIP
"""
from .errors import LayerFileError
from .model import LAYER_COLUMNS, LayerProfile
from .trtexec import from_trtexec, load_logged_metadata

__all__ = ["LAYER_COLUMNS", "LayerFileError", "LayerProfile", "from_trtexec",
           "load_logged_metadata", "from_onnxruntime", "profile_module"]


def __getattr__(name: str):
    # Backends with optional dependencies are imported on first use only.
    if name == "from_onnxruntime":
        from .onnxruntime import from_onnxruntime
        return from_onnxruntime
    if name == "profile_module":
        from .torch_modules import profile_module
        return profile_module
    raise AttributeError(name)
