"""hookmagic: see what the GPU really does, from the notebook you already work in.

In Jupyter: ``%load_ext hookmagic``, then ``%%cudahook`` on a cell. From Python::

    import hookmagic
    with hookmagic.capture() as trace:
        model(x)
    trace.summary(); trace.flame(); trace.timeline()

Importing hookmagic needs no GPU, driver, CUPTI or IPython; each is looked for only when used.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hookmagic.common.version import __version__

__all__ = ["capture", "range", "load", "Trace", "CaptureUnavailable", "HookmagicError",
           "recordings", "sched", "layers", "pipeline", "kernels", "ray",
           "load_many",
           "schedule", "doctor",
           "load_ipython_extension", "unload_ipython_extension", "__version__"]

from hookmagic.common.errors import HookmagicError
from hookmagic.facades import load  # also attaches trace.summary(), .flame(), ... (see facades)
from hookmagic.multirank import load_many  # also attaches TraceSet.stragglers(), ...

if TYPE_CHECKING:
    from hookmagic.cupti import CaptureUnavailable, capture, range
    from hookmagic.cupti import schedule
    from hookmagic.checkup import doctor
    from hookmagic.trace import Trace


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext hookmagic``: registers ``%%cudahook`` and ``%trtprofile``."""
    from hookmagic.extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext hookmagic``: removes every magic ``%load_ext hookmagic`` registered."""
    from hookmagic.extension import unload_ipython_extension as unload

    unload(ipython)


#: Subpackages reached as attributes (``hookmagic.ray.capture()``) without importing them first;
#: each imports its optional dependencies only when used.
_SUBMODULES = ("recordings", "sched", "layers", "pipeline", "kernels", "ray")


def __getattr__(name: str) -> Any:
    # Lazy: `import hookmagic` stays cheap and works without pandas-heavy imports.
    if name in ("capture", "range", "CaptureUnavailable", "schedule"):
        import hookmagic.cupti as cupti_package

        return getattr(cupti_package, name)
    if name == "doctor":
        from hookmagic.checkup import doctor

        return doctor
    if name == "Trace":
        from hookmagic.trace import Trace

        return Trace
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"hookmagic.{name}")
    raise AttributeError(f"module 'hookmagic' has no attribute {name!r}")


def __dir__() -> list[str]:
    # tab completion lists the public API only, including the names resolved lazily above
    return sorted(__all__)


# A launched rank (torchrun, srun, mpirun) with HOOKMAGIC_CAPTURE_DIR set captures itself:
# see hookmagic.cupti.autocapture. Nothing happens when the variable is unset.
def _autocapture() -> None:
    import os

    if os.environ.get("HOOKMAGIC_CAPTURE_DIR"):
        from hookmagic.cupti.autocapture import install_from_env

        install_from_env()


_autocapture()
