"""Views: draw what an analysis returned (HTML, Plotly figures, widgets); no analysis here.

Import the module you need (``hookmagic.views.summary``, ...): this package imports nothing
eagerly, so drawing a summary never imports Plotly.
"""

# Outside a notebook frontend, figures write an HTML file and print a line instead of asking
# for a browser (hookmagic.views.outside); inside a kernel this does nothing.
from hookmagic.views.outside import install_renderer as _install_renderer  # noqa: E402

_install_renderer()
