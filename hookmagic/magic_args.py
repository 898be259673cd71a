"""One way to parse a magic's line, for every magic of hookmagic.

Arguments are declared with IPython's ``magic_arguments`` decorators (their text is also the
magic's ``?`` help) and split with shell quoting, so ``--label 'my run'`` is one argument.
"""
from __future__ import annotations

from typing import Any


def parse_line(magic: Any, line: str) -> Any:
    """Parse a magic's argument line with shell quoting against its ``magic_arguments``.

    ``magic`` is the decorated magic method (``self.cudahook``). Raises IPython's
    UsageError, naming the magic, for unbalanced quotes or arguments it does not take.
    """
    from IPython.core.error import UsageError
    from IPython.utils.process import arg_split

    parser = magic.parser
    try:
        argv = arg_split(line, posix=True, strict=True)
    except ValueError as err:   # unbalanced quotes
        raise UsageError(f"%{parser.prog}: {err}") from None
    return parser.parse_args(argv)   # MagicArgumentParser raises UsageError on misuse
