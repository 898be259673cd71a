"""Methods attached to a class from a floor above it, as pandas attaches ``DataFrame.plot``.

The data model (``Trace``, ``LayerProfile``, ``Summary``) must not import the analyses and views
that users reach through its methods (``trace.flame()``). So the class declares itself open::

    @accepts_methods("Trace")
    class Trace: ...

and the front door (:mod:`hookmagic.facades`) registers the methods::

    @register_method("Trace")
    def flame(self, **kw): ...

Registration and class creation may come in either order: a method registered before its
class exists is attached when the class is created, and one registered after is attached at
once. Importing ``hookmagic`` registers every method before any class can be used, because
Python imports the package (and so :mod:`hookmagic.facades`) before any of its submodules.
"""
from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T", bound=type)
F = TypeVar("F", bound=Callable)

_methods: dict[str, dict[str, Callable]] = {}
_classes: dict[str, type] = {}


def accepts_methods(key: str) -> Callable[[T], T]:
    """Class decorator: the class, known as ``key``, receives methods registered for ``key``."""
    def decorate(cls: T) -> T:
        _classes[key] = cls
        for name, func in _methods.get(key, {}).items():
            setattr(cls, name, func)
        return cls
    return decorate


def register_method(key: str, name: str | None = None) -> Callable[[F], F]:
    """Function decorator: attach the function as method ``name`` (default: its own name) of the
    class known as ``key``, now or when that class is created."""
    def decorate(func: F) -> F:
        attr = name or func.__name__
        _methods.setdefault(key, {})[attr] = func
        if key in _classes:
            setattr(_classes[key], attr, func)
        return func
    return decorate


def registered(key: str) -> list[str]:
    """Names of the methods registered for ``key`` (for tests and ``dir``)."""
    return sorted(_methods.get(key, {}))


def call_with(fn: "Callable[..., object]", *args: object, **kwargs: object) -> object:
    """``fn(*args, **kwargs)``, with arguments ``fn`` does not take refused first as
    :class:`~hookmagic.common.errors.InvalidArgument` naming them (a method that passes ``**kw`` on to a figure
    function says what went wrong in the project's terms, not a bare TypeError)."""
    import inspect

    from hookmagic.common.errors import InvalidArgument
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise InvalidArgument(f"{getattr(fn, '__name__', 'this call')}: {err}") from None
    return fn(*args, **kwargs)
