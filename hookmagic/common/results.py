"""The one shape every result's headline takes: :class:`Headline`.

Every result type (``Trace``, ``TraceSet``, ``LayerProfile``, the scheduler ``Result``,
``PipelineRun``) answers ``summary()`` with an object that

- displays itself: a compact HTML table in Jupyter, a few lines of text in a terminal;
- gives its numbers as a table: ``to_frame()`` returns a one-column DataFrame indexed by the
  quantity's name (``to_frame().loc["kernel_count", "value"]``);
- keeps named fields for code: ``headline["kernel_count"]`` or ``headline.values``.

A result whose summary needs more than name/value pairs (the trace's top kernels) subclasses or
wraps this, but keeps these three behaviours. Values read from files are escaped before they
reach HTML.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

__all__ = ["Headline", "SAVED_KIND_KEY"]

# Every saved result records what it is under this key of its metadata, so ``hookmagic.load``
# recognises the kind by content, not by the file's name.
SAVED_KIND_KEY = "hookmagic_kind"


@dataclass
class Headline:
    """A result's headline numbers: ``title``, then ordered ``name -> value`` pairs.

    ``units`` optionally names each value's unit (``"s"``, ``"bytes"``, ``"fps"``), shown beside
    it and kept as a column of :meth:`to_frame`. ``notes`` are sentences shown under the table
    (a status, a warning), never numbers.
    """

    title: str
    values: dict[str, Any] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def to_frame(self) -> Any:
        """The numbers as a DataFrame: index ``name``, columns ``value`` and ``unit``."""
        import pandas as pd

        names = list(self.values)
        return pd.DataFrame({"value": [self.values[n] for n in names],
                             "unit": [self.units.get(n, "") for n in names]},
                            index=pd.Index(names, name="name"))

    def to_dict(self) -> dict[str, Any]:
        """The numbers as a plain dict (a copy)."""
        return dict(self.values)

    def __str__(self) -> str:
        width = max((len(n) for n in self.values), default=0)
        lines = [self.title]
        lines += [f"  {n:<{width}}  {_text(v)}{(' ' + self.units[n]) if self.units.get(n) else ''}"
                  for n, v in self.values.items()]
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th>{html.escape(str(n))}</th><td class='n'>{html.escape(_text(v))}</td>"
            f"<td>{html.escape(self.units.get(n, ''))}</td></tr>" for n, v in self.values.items())
        notes = "".join(f"<div>{html.escape(str(note))}</div>" for note in self.notes)
        return (f"<div class='hm-headline'><b>{html.escape(self.title)}</b>"
                f"<table>{rows}</table>{notes}</div>")


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items())
    return str(value)
