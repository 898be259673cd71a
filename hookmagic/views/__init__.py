"""Views: draw what an analysis returned (HTML, Plotly figures, widgets); no analysis here.

Import the module you need (``hookmagic.views.summary``, ...): this package imports nothing
eagerly, so drawing a summary never imports Plotly.
"""
