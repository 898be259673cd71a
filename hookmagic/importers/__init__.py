"""Sources that read other tools' files into the trace tables (:mod:`hookmagic.trace.schema`).

- :mod:`~hookmagic.importers.kineto`: PyTorch Kineto / ``torch.profiler`` Chrome-trace JSON.

Importers sit on the sources floor, beside :mod:`hookmagic.cupti`: they import the data model
(:mod:`hookmagic.trace`) and :mod:`hookmagic.common`, nothing above.
"""
