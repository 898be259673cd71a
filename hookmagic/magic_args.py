"""One way to parse a magic's line, for every magic of hookmagic.

Arguments are declared with IPython's ``magic_arguments`` decorators (their text is also the
magic's ``?`` help) and split with shell quoting, so ``--label 'my run'`` is one argument.
"""
from __future__ import annotations

import re
from typing import Any

from hookmagic.common.errors import HookmagicError


class MagicFailed(HookmagicError, RuntimeError):
    """A magic could not do what it was asked: the cell fails (later cells of a "run all" do
    not run) and shows this one line, ``hookmagic: <why>``, instead of a traceback. The error
    behind it is chained as ``__cause__``."""

    def _render_traceback_(self) -> list[str]:   # IPython shows these lines for the exception
        return [f"hookmagic: {self}"]


def parse_line(magic: Any, line: str) -> Any:
    """Parse a magic's argument line with shell quoting against its ``magic_arguments``.

    ``magic`` is the decorated magic method (``self.cudahook``). Raises IPython's
    UsageError, naming the magic, for unbalanced quotes or arguments it does not take.
    """
    from IPython.core.error import UsageError
    from IPython.utils.process import arg_split

    parser = magic.parser
    parser.allow_abbrev = False   # --lit is not --lite: a shortened option is refused
    try:
        argv = arg_split(line, posix=True, strict=True)
    except ValueError as err:   # unbalanced quotes
        raise UsageError(f"%{parser.prog}: {err}") from None
    return parser.parse_args(argv)   # MagicArgumentParser raises UsageError on misuse


_TOKEN = re.compile(r"""\s*((?:[^\s"']+|"(?:\\.|[^"\\])*"|'[^']*')+)""")


def split_statement(magic: Any, line: str) -> tuple[str, str]:
    """Split a line magic's line into its options and the statement after them.

    ``%cudahook -f step -v t step(x, "a b")`` -> ``('-f step -v t', 'step(x, "a b")')``: the
    leading tokens that are options of ``magic`` (with the value of each option that takes one)
    are the options, the rest of the line, untouched, is the statement (as ``%time`` runs it).
    ``--`` ends the options. Unbalanced quotes leave the whole line to :func:`parse_line`,
    which says so.
    """
    actions = magic.parser._option_string_actions
    pos = 0
    while True:
        m = _TOKEN.match(line, pos)
        if m is None:
            return (line, "") if line[pos:].strip() else (line[:pos], "")
        tok = m.group(1)
        if tok == "--":
            return line[:m.start(1)], line[m.end():].strip()
        if not tok.startswith("-") or tok == "-":
            return line[:pos], line[pos:].strip()
        pos = m.end()
        name = tok.split("=", 1)[0]
        action = actions.get(name)
        attached = "=" in tok or (action is None and name[:2] in actions and len(name) > 2)
        if action is not None and action.nargs != 0 and not attached:
            value = _TOKEN.match(line, pos)
            if value is None:
                return line, ""
            pos = value.end()
