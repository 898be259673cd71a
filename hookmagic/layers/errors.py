"""Errors raised while reading layer-profile files."""
from __future__ import annotations

from hookmagic.common.errors import BadNumbers, InputFileError


class LayerFileError(InputFileError):
    """A layer-profile input file is missing, unreadable, or not in the expected format.

    The message names the file and says what was expected, so that a notebook user sees one
    clear line instead of a traceback from deep inside ``json``.
    """


class LayerNumbersError(LayerFileError, BadNumbers):
    """A layer-profile file holds impossible numbers: negative or infinite times or counts, or
    text where a number belongs. The message names the file, the record and the field."""
