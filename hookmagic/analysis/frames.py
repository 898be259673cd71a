"""Framework frames: the plumbing between the user's code and the work it asks for.

A flame graph of a PyTorch model is mostly ``Module._call_impl`` / ``_wrapped_call_impl``
frames, decorator wrappers (``functools``, ``torch.no_grad``'s ``decorate_context``, the
optimiser's ``profile_hook_step`` wrapper) and TorchDynamo's glue. They say nothing about where
the time goes, so the flame graph folds them away by default (their time stays with the frame
that called them); ``raw=True`` shows every frame. Only library frames are folded, never the
user's own code (:func:`hookmagic.common.sources.is_library_file`).

Pure functions over the ``stacks`` table.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from hookmagic.common.sources import is_library_file

__all__ = ["is_framework_frame", "framework_mask", "fold_stacks"]

# torch.nn module plumbing: co_qualname on Python >= 3.11, co_name on 3.10
_MODULE_PLUMBING = frozenset({"Module._call_impl", "Module._wrapped_call_impl", "Module.__call__",
                              "_call_impl", "_wrapped_call_impl"})
# whole files that are glue: decorators, context managers, TorchDynamo's frame evaluation
_GLUE_FILES = re.compile(
    r"[/\\](functools|contextlib)\.py$"
    r"|(^|[/\\])torch[/\\](_dynamo|_compile\.py|utils[/\\]_contextlib\.py|_ops\.py)"
    r"|(^|[/\\])torch[/\\]autograd[/\\]graph\.py$")
# decorator wrappers defined inside library functions: "<outer>.<locals>.wrapper"
_WRAPPERS = frozenset({"wrapper", "_wrapper", "inner", "_inner", "wrapped", "_wrapped", "_fn",
                       "fn", "decorate_context", "_use_grad", "maybe_fallback", "wrapped_fn",
                       "_wrapped_call", "wrap"})


def is_framework_frame(filename: str, function: str) -> bool:
    """Whether the frame ``function`` in ``filename`` is framework plumbing (see the module)."""
    filename, function = str(filename), str(function)
    if not is_library_file(filename) or filename == "<module>":
        return False
    if _GLUE_FILES.search(filename):
        return True
    if function in _MODULE_PLUMBING and re.search(r"(^|[/\\])torch[/\\]nn[/\\]modules[/\\]module\.py$",
                                                  filename):
        return True
    if ".<locals>." in function and function.rsplit(".", 1)[-1] in _WRAPPERS:
        return True
    return False


def framework_mask(stacks: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows of a ``stacks`` table that are framework frames."""
    if not len(stacks):
        return np.zeros(0, dtype=bool)
    pairs = pd.MultiIndex.from_arrays([stacks["filename"].astype(str), stacks["function"].astype(str)])
    code, uniq = pd.factorize(pairs)
    verdict = np.array([is_framework_frame(f, fn) for f, fn in uniq], dtype=bool)
    return verdict[code]


def fold_stacks(stacks: pd.DataFrame) -> pd.DataFrame:
    """The ``stacks`` table without its framework frames (depths keep their order)."""
    mask = framework_mask(stacks)
    return stacks[~mask] if mask.any() else stacks
