"""Errors raised while reading layer-profile files."""
from __future__ import annotations

from hookmagic.common.errors import InputFileError


class LayerFileError(InputFileError):
    """A layer-profile input file is missing, unreadable, or not in the expected format.

    The message names the file and says what was expected, so that a notebook user sees one
    clear line instead of a traceback from deep inside ``json``.
    """
