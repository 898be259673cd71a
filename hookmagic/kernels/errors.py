"""Errors of :mod:`hookmagic.kernels`; each derives from :class:`hookmagic.common.errors.HookmagicError`."""
from __future__ import annotations

from hookmagic.common.errors import HookmagicError, InvalidArgument, Unavailable


class KernelCompileError(HookmagicError, RuntimeError):
    """NVRTC rejected a kernel source; the message holds the compiler log."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message + (f"\n--- NVRTC log ---\n{log.strip()}" if log.strip() else ""))
        self.log = log


class KernelArgumentError(InvalidArgument):
    """Operands of a kernel call disagree in shape, dtype, device or layout (names both operands)."""


class KernelsUnavailable(Unavailable):
    """cuda-core / NVRTC / a GPU driver that a kernel call needs is missing; says what to install."""


__all__ = ["KernelCompileError", "KernelArgumentError", "KernelsUnavailable"]
