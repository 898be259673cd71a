"""The project's own error classes: every error hookmagic raises on purpose derives from
:class:`HookmagicError`, so one ``except hookmagic.HookmagicError`` catches them all.

Each concrete class also derives from the built-in it refines (``ValueError``, ``RuntimeError``,
...), so code written against the built-ins keeps working. Messages say what was wrong, with
which input, and what to do about it; they fit on one line.
"""
from __future__ import annotations


class HookmagicError(Exception):
    """Base of every error hookmagic raises on purpose."""


class InvalidArgument(HookmagicError, ValueError):
    """An argument is out of range, of the wrong type, not finite, or inconsistent with another."""


class InputFileError(HookmagicError, ValueError):
    """A file could not be read: missing, not a regular file, corrupt, or not in the expected format."""


class LimitExceeded(InputFileError):
    """An input is larger than a documented budget (bytes, rows, nesting depth).

    The message names the limit and the environment variable that raises it.
    """


class BadNumbers(InputFileError):
    """An input holds NaN, infinite or negative values where measured times or counts belong."""


class Unavailable(HookmagicError, RuntimeError):
    """A GPU, driver, library or tool that this call needs is missing; the message says what to install."""


class MissingDependency(Unavailable, ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


class CaptureFailed(HookmagicError, RuntimeError):
    """A capture, run or measurement started but could not finish; the message says why."""


class MissingAttribute(HookmagicError, AttributeError):
    """An object or module has no attribute of that name (``hasattr`` and ``getattr`` with a
    default treat it as the built-in ``AttributeError``)."""
