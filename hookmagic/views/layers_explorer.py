"""Interactive layer bottleneck explorer (ipywidgets): filter, sort, pick a chart, inspect a layer.

``explore(profile)`` returns the panel. Filtering is :func:`hookmagic.layers.breakdown.filter_layers`;
charts are :mod:`hookmagic.views.layers`; this module only lays widgets out and wires them.
"""
from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as W
import pandas as pd
from IPython.display import display

from hookmagic.layers.breakdown import filter_layers
from hookmagic.layers.model import LayerProfile
from hookmagic.views import layers as views

_SORTS = {"time": "mean_ms", "median": "median_ms", "weights": "weight_bytes",
          "activations": "activation_bytes", "execution order": "order"}
_DETAIL_FIELDS = ("order", "name", "type", "layer_type", "precision", "in_precision",
                  "out_precision", "in_format", "out_format", "tactic", "mean_ms", "median_ms",
                  "p90_ms", "pct", "weight_bytes", "activation_bytes", "in_shapes", "out_shapes",
                  "origin")


class LayerExplorer:
    """Widgets over one :class:`LayerProfile`: type/precision/name filters, sort, top-N slider,
    bars/treemap/sunburst, and a layer list whose selection shows that layer's details.

    Display the instance (or ``.widget``) in a notebook.
    """

    def __init__(self, profile: LayerProfile, n: int = 20) -> None:
        self.profile = profile
        layers = profile.layers
        types = sorted(set(layers["type"]))
        precisions = sorted(set(layers["precision"]))
        self.types = W.SelectMultiple(options=types, value=(), rows=min(6, max(2, len(types))),
                                      description="type")
        self.precisions = W.SelectMultiple(options=precisions, value=(),
                                           rows=min(6, max(2, len(precisions))),
                                           description="precision")
        self.pattern = W.Text(value="", placeholder="regex on layer name", description="name")
        self.sort = W.Dropdown(options=list(_SORTS), value="time", description="sort by")
        self.top_n = W.IntSlider(value=min(n, max(1, len(layers))), min=1,
                                 max=max(1, len(layers)), description="top N")
        self.chart = W.ToggleButtons(options=["bars", "treemap", "sunburst"], value="bars")
        self.layer = W.Select(options=[], rows=10, description="layer",
                              layout=W.Layout(width="100%"))
        self.details = W.HTML()
        self.plot = W.Output()
        self.status = W.HTML()
        for w in (self.types, self.precisions, self.pattern, self.sort, self.top_n, self.chart):
            w.observe(self._refresh, names="value")
        self.layer.observe(self._show_layer, names="value")
        filters = W.HBox([W.VBox([self.types, self.precisions]),
                          W.VBox([self.pattern, self.sort, self.top_n, self.chart])])
        self.widget = W.VBox([W.HTML(f"<b>{html.escape(profile.name)}</b>: {len(layers)} layers, "
                                     f"layer sum {profile.total_ms:.3f} ms"),
                              filters, self.status, self.plot, self.layer, self.details])
        self._refresh()

    # -- state -----------------------------------------------------------------------------
    def filtered(self) -> pd.DataFrame:
        """The layers the current filters select, sorted and cut to top N."""
        return filter_layers(self.profile.layers, types=self.types.value,
                             precisions=self.precisions.value, pattern=self.pattern.value,
                             sort_by=_SORTS[self.sort.value], n=self.top_n.value)

    def figure(self):
        """The Plotly figure for the current filters and chart choice."""
        rows = self.filtered()
        if self.chart.value == "treemap":
            return views.treemap(rows)
        if self.chart.value == "sunburst":
            return views.sunburst(rows)
        return views.layer_bars(rows, color="precision", title=f"{len(rows)} layers")

    # -- callbacks -------------------------------------------------------------------------
    def _refresh(self, change: Any = None) -> None:
        rows = self.filtered()
        self.status.value = (f"{len(rows)} layer(s) shown, {rows['mean_ms'].sum():.4f} ms "
                             f"({rows['pct'].sum():.1f}% of the layer sum)")
        labels = [(f"{o}: {n[:90]}  ({ms:.4f} ms)", int(o))
                  for o, n, ms in zip(rows["order"], rows["name"], rows["mean_ms"])]
        keep = self.layer.value if self.layer.value in [v for _, v in labels] else None
        self.layer.options = labels
        self.layer.value = keep if keep is not None else (labels[0][1] if labels else None)
        with self.plot:
            self.plot.clear_output(wait=True)
            display(self.figure())

    def _show_layer(self, change: Any = None) -> None:
        self.details.value = layer_details_html(self.profile, self.layer.value)

    def _repr_mimebundle_(self, **kwargs: Any):
        return self.widget._repr_mimebundle_(**kwargs)


def layer_details_html(profile: LayerProfile, order: int | None) -> str:
    """HTML table of one layer's fields, fused source nodes, attributed kernels, raw record."""
    if order is None:
        return ""
    row = profile.layers.loc[profile.layers["order"] == order]
    if row.empty:
        return ""
    r = row.iloc[0]
    cells = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{html.escape(str(r[k]))}</td></tr>"
                    for k in _DETAIL_FIELDS)
    nodes = "<br>".join(html.escape(n) for n in r["source_nodes"]) or "(none)"
    out = (f"<table>{cells}<tr><th style='text-align:left'>source nodes</th><td>{nodes}</td>"
           f"</tr></table>")
    k = profile.kernels
    if k is not None and len(k) and "layer" in k:
        sel = k[k["layer"] == r["name"]]
        if len(sel):
            out += "<b>kernels</b>" + sel.to_html(index=False, float_format=lambda v: f"{v:.4f}")
    try:
        raw = json.dumps(json.loads(r["details"]), indent=1)
    except (TypeError, ValueError):
        raw = str(r["details"])
    return out + f"<details><summary>raw record</summary><pre>{html.escape(raw)}</pre></details>"


def explore(profile: LayerProfile, n: int = 20) -> LayerExplorer:
    """Open the interactive explorer on ``profile`` (display the returned object)."""
    return LayerExplorer(profile, n=n)
