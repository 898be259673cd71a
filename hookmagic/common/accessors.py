"""Methods attached to a class from a floor above it, as pandas attaches ``DataFrame.plot``.

The data model (``Trace``, ``LayerProfile``, ``Summary``) must not import the analyses and views
that users reach through its methods (``trace.flame()``). So the class declares itself open::

    @accepts_methods("Trace")
    class Trace: ...

and the front door (:mod:`hookmagic.facades`) registers the methods::

    @register_method("Trace")
    def flame(self, **kw): ...

A wrong call of any such method (a misspelt keyword, a missing or extra argument) raises
:class:`~hookmagic.common.errors.InvalidArgument` naming the method, not a bare TypeError:
:func:`checked_calls` does that for the methods a class defines itself, and registration for
the ones attached.

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


def checked(func: F, owner: str = "") -> F:
    """``func``, except that a call whose arguments do not fit its signature raises
    :class:`~hookmagic.common.errors.InvalidArgument` (naming ``owner.func``) instead of
    TypeError. The signature is consulted only after a TypeError, so a correct call costs
    nothing, and a TypeError from inside a correctly called ``func`` passes unchanged.
    Anything but a plain function (a property, say) is returned as it is."""
    import functools
    import inspect

    if not inspect.isfunction(func) or getattr(func, "__hookmagic_checked__", False):
        return func  # a property or other descriptor, or checked already
    label = f"{owner}.{func.__name__}" if owner else func.__name__

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TypeError:
            try:
                inspect.signature(func).bind(*args, **kwargs)
            except TypeError as err:
                from hookmagic.common.errors import InvalidArgument
                raise InvalidArgument(f"{label}(): {err}") from None
            raise
    call.__hookmagic_checked__ = True  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def checked_calls(cls: T) -> T:
    """Class decorator: every public method the class defines (plain, class or static) is
    :func:`checked`."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(attr, (classmethod, staticmethod)):
            setattr(cls, name, type(attr)(checked(attr.__func__, cls.__name__)))
        elif callable(attr) and not isinstance(attr, type):
            setattr(cls, name, checked(attr, cls.__name__))
    return cls


def accepts_methods(key: str) -> Callable[[T], T]:
    """Class decorator: the class, known as ``key``, receives methods registered for ``key``,
    and its own public methods are :func:`checked`."""
    def decorate(cls: T) -> T:
        _classes[key] = cls
        checked_calls(cls)
        for name, func in _methods.get(key, {}).items():
            setattr(cls, name, checked(func, cls.__name__))
        return cls
    return decorate


def register_method(key: str, name: str | None = None) -> Callable[[F], F]:
    """Function decorator: attach the function as method ``name`` (default: its own name) of the
    class known as ``key``, now or when that class is created."""
    def decorate(func: F) -> F:
        attr = name or func.__name__
        _methods.setdefault(key, {})[attr] = func
        if key in _classes:
            setattr(_classes[key], attr, checked(func, _classes[key].__name__))
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
