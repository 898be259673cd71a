"""The IPython extension: ``%load_ext hookmagic`` registers every magic of hookmagic,
``%unload_ext hookmagic`` removes every one, ``%reload_ext hookmagic`` does both.

The magics (``%%cudahook`` in :mod:`hookmagic.magics`, ``%trtprofile`` in
:mod:`hookmagic.layers_magic`) parse their line one way,
:func:`hookmagic.magic_args.parse_line`. A new magic is one more entry in :func:`magic_classes`.
"""
from __future__ import annotations

from typing import Any


def magic_classes() -> list[type]:
    """Every Magics class the extension registers (imported when the extension loads)."""
    from hookmagic.layers_magic import TrtProfileMagics
    from hookmagic.magics import CudaHookMagics

    return [CudaHookMagics, TrtProfileMagics]


def load_ipython_extension(ip: Any) -> None:
    """Register every magic on the shell ``ip``; loading twice is harmless.

    Each Magics instance joins ``ip.configurables``, so ``%config CudaHookMagics.stacks =
    False`` and ``%config TrtProfileMagics.iterations = 50`` set defaults.
    """
    for cls in magic_classes():
        if _registered(ip, cls) is None:
            ip.register_magics(cls(shell=ip))   # Magics.__init__ adds it to configurables


def unload_ipython_extension(ip: Any) -> None:
    """Remove every magic and its configurable (``%unload_ext`` / ``%reload_ext``)."""
    manager = ip.magics_manager
    for cls in magic_classes():
        instance = _registered(ip, cls)
        if instance is None:
            continue
        for kind, names in cls.magics.items():       # {"line": {...}, "cell": {...}}
            table = manager.magics.get(kind, {})
            for name in names:
                if getattr(table.get(name), "__self__", None) is instance:
                    del table[name]
        manager.registry.pop(cls.__name__, None)
        ip.configurables[:] = [c for c in ip.configurables if c is not instance]


def _registered(ip: Any, cls: type) -> Any:
    # Compare by class name: after %reload_ext the module (and class) is a fresh object.
    instance = ip.magics_manager.registry.get(cls.__name__)
    return instance if type(instance).__name__ == cls.__name__ else None
