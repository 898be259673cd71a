"""Why a capture could not run, in words a user can act on."""
from __future__ import annotations

from hookmagic.common.errors import HookmagicError, InvalidArgument


class CaptureUnavailable(UserWarning):
    """Nothing was captured: no GPU, driver or CUPTI, or another tool holds CUPTI.

    The code under capture still ran; the message says why nothing was recorded and what to do.
    """


class CaptureFailed(HookmagicError, RuntimeError):
    """CUPTI refused to start for a reason hookmagic could not name more precisely."""


class CaptureOptionError(InvalidArgument):
    """A capture option has the wrong type or is out of range (the message names it)."""


class ScheduleError(InvalidArgument):
    """A ``hookmagic.schedule`` argument is out of range, or the schedule is misused."""
