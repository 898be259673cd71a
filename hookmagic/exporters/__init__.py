"""Writers of a :class:`~hookmagic.trace.Trace` in other tools' formats.

- :mod:`~hookmagic.exporters.chrome`: Chrome / Perfetto trace JSON (Kineto's fields).

Exporters sit on the views floor (output side): they may import the data model and the pure
analyses, never the front doors.
"""
