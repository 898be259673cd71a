"""An ipywidgets control panel: edit rates, priorities, SLOs and batching, see the result.

    panel = SchedulerPanel(models, sources, policy, duration_s=10)
    panel            # in a notebook: displays the controls and the figures

Every change re-simulates (fast path when the policy allows) and redraws the latency CDF,
p99 vs SLO, batch-size histogram, Gantt of batches per stream and queue depth. "Find best"
sweeps batch size, delay and streams under the limits typed in and applies the winner;
"Export" shows the Triton configuration and Ray Serve parameters of the current policy.
"Run on GPU" drives the engines passed as ``engines=`` for the workload's duration and overlays
real on simulated; on a machine without a GPU it says so and does nothing else.

This module wires widgets to :mod:`.settings`, :func:`.simulate`, :mod:`.metrics`,
:mod:`.sweep`, :mod:`.export` and :mod:`hookmagic.views.sched`; it holds no logic of its own.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import ipywidgets as W
from IPython.display import display

from . import metrics as M
from .export import ray_serve_snippet, triton_config
from .models import ModelSpec
from .policies import Policy
from .settings import policy_from_settings, settings_from, sources_from_settings
from .simulator import simulate
from .sweep import best_policy, sweep
from .workloads import make_workload

__all__ = ["SchedulerPanel"]


class SchedulerPanel:
    """Interactive scheduler: controls on top, figures below (see module help)."""

    def __init__(self, models: Sequence[ModelSpec], sources: Sequence[Any], policy: Policy | None = None,
                 *, duration_s: float = 10.0, seed: int = 0,
                 engines: Mapping[str, Any] | Sequence[Any] | None = None) -> None:
        self.models = list(models)
        self.sources = list(sources)
        self.base = policy or Policy()
        self.duration_s = duration_s
        self.seed = seed
        self.engines = engines
        self.result = None
        self.real = None
        s = settings_from(self.models, self.sources, self.base)
        self.rows: dict[str, dict[str, W.Widget]] = {}
        header = W.HBox([W.HTML(f"<b>{t}</b>", layout=W.Layout(width=w)) for t, w in
                         (("model", "110px"), ("rate /s", "110px"), ("priority", "80px"),
                          ("SLO ms", "90px"), ("max batch", "90px"), ("delay ms", "90px"))])
        lines = [header]
        for name, m in s["models"].items():
            row = {"rate": W.BoundedFloatText(m["rate"], min=0, max=1e7, layout=W.Layout(width="110px")),
                   "priority": W.BoundedIntText(m["priority"], min=0, max=15, layout=W.Layout(width="80px")),
                   "slo_ms": W.BoundedFloatText(m["slo_ms"], min=0.01, max=1e6, layout=W.Layout(width="90px")),
                   "max_batch": W.BoundedIntText(m["max_batch"], min=1, max=1024, layout=W.Layout(width="90px")),
                   "max_delay_ms": W.BoundedFloatText(m["max_delay_ms"], min=0, max=1e4,
                                                      layout=W.Layout(width="90px"))}
            self.rows[name] = row
            lines.append(W.HBox([W.Label(name, layout=W.Layout(width="110px")), *row.values()]))
        self.order = W.Dropdown(options=["fifo", "priority", "edf"], value=s["order"], description="order")
        self.streams = W.BoundedIntText(s["streams"], min=1, max=16, description="streams")
        self.aimd = W.Checkbox(s["aimd"], description="AIMD adaptive batching")
        self.status = W.HTML()
        self.table = W.Output()
        self.plots = W.Output()
        self.sweep_p99 = W.BoundedFloatText(50.0, min=0.01, max=1e6, description="p99 ≤ ms")
        self.sweep_tput = W.BoundedFloatText(0.0, min=0, max=1e8, description="tput ≥ /s")
        self.sweep_btn = W.Button(description="Find best", icon="search")
        self.sweep_out = W.Output()
        self.export_model = W.Dropdown(options=[m.name for m in self.models], description="export")
        self.export_btn = W.Button(description="Export", icon="file-export")
        self.export_out = W.Output()
        self.gpu_btn = W.Button(description="Run on GPU", icon="play", button_style="warning")
        self.gpu_out = W.Output()
        for w in [self.order, self.streams, self.aimd] + [x for r in self.rows.values() for x in r.values()]:
            w.observe(lambda _chg: self.refresh(), names="value")
        self.sweep_btn.on_click(lambda _b: self.find_best())
        self.export_btn.on_click(lambda _b: self.export())
        self.gpu_btn.on_click(lambda _b: self.run_on_gpu())
        self.widget = W.VBox([
            W.VBox(lines), W.HBox([self.order, self.streams, self.aimd]), self.status, self.table,
            self.plots,
            W.HBox([self.sweep_p99, self.sweep_tput, self.sweep_btn]), self.sweep_out,
            W.HBox([self.export_model, self.export_btn, self.gpu_btn]), self.export_out, self.gpu_out])
        self.refresh()

    # -- wiring ------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """The settings the widgets show now."""
        return {"order": self.order.value, "streams": self.streams.value, "aimd": self.aimd.value,
                "models": {n: {k: w.value for k, w in r.items()} for n, r in self.rows.items()}}

    def current(self) -> tuple[Policy, Any]:
        """(policy, workload) for the current settings."""
        s = self.settings()
        pol = policy_from_settings(s, self.base)
        wl = make_workload(sources_from_settings(self.sources, s), self.duration_s, self.seed)
        return pol, wl

    def refresh(self) -> None:
        """Re-simulate and redraw."""
        pol, wl = self.current()
        self.policy, self.workload = pol, wl
        self.result = simulate(self.models, wl, pol, seed=self.seed)
        self.real = None
        meta = self.result.meta
        self.status.value = (f"simulated {len(wl):,} requests in {meta['sim_wall_s'] * 1e3:.0f} ms "
                             f"({meta['engine']} engine) — {pol.describe()}")
        self.draw()

    def draw(self) -> None:
        from hookmagic.views import sched as V
        runs = {"sim": self.result} if self.real is None else {"sim": self.result, "real": self.real}
        summaries = {k: r.metrics() for k, r in runs.items()}
        cols = ["offered", "served", "throughput_rps", "goodput_rps", "slo_pct", "p50_ms",
                "p99_ms", "queue_p99_ms", "compute_p50_ms", "batch_mean"]
        _show(self.table, *[s[cols].round(2).rename_axis(f"{k}: model") for k, s in summaries.items()])
        _show(self.plots,
              V.latency_cdf_figure({k: M.latency_cdf(r.requests) for k, r in runs.items()}),
              V.p99_vs_slo_figure(summaries),
              V.batch_histogram_figure({k: M.batch_histogram(r.batches) for k, r in runs.items()}),
              V.gantt_figure(self.result.batches),
              V.queue_depth_figure(M.queue_depth(self.result.requests)))

    def find_best(self) -> None:
        """Sweep max batch, delay and streams under the typed limits; apply the best."""
        pol, wl = self.current()
        limits = {"p99_ms": self.sweep_p99.value}
        if self.sweep_tput.value > 0:
            limits["min_throughput_rps"] = self.sweep_tput.value
        grid = {"max_batch": [1, 2, 4, 8, 16, 32], "max_delay_ms": [0, 0.5, 1, 2, 5],
                "streams": [1, 2, 4]}
        table = sweep(self.models, wl, grid, base=pol, limits=limits, seed=self.seed)
        best = best_policy(table)
        _show(self.sweep_out, table.head(8).round(2))
        if best is None:
            self.sweep_out.append_stdout("No configuration meets these limits.\n")
            return
        row = table.iloc[0]
        for r in self.rows.values():
            r["max_batch"].value = int(row["max_batch"])
            r["max_delay_ms"].value = float(row["max_delay_ms"])
        self.streams.value = int(row["streams"])

    def export(self) -> None:
        """Show the Triton config and Ray Serve snippet for the chosen model."""
        name = self.export_model.value
        prios = sorted({int(self.rows[name]["priority"].value)})
        spec = next(m for m in self.models if m.name == name)
        self.export_text = ("# config.pbtxt\n" + triton_config(name, self.policy, spec=spec, priorities=prios)
                            + "\n# Ray Serve\n" + ray_serve_snippet(name, self.policy))
        _show(self.export_out)
        self.export_out.append_stdout(self.export_text)

    def run_on_gpu(self) -> None:
        """Run the current settings on the engines given, or say plainly why not."""
        from .engines import gpu_available
        from .driver import run
        _show(self.gpu_out)
        ok, why = gpu_available()
        if not ok:
            self.message = f"No GPU on this machine ({why}); showing the simulation only."
        elif not self.engines:
            self.message = ("A GPU is present, but no engines were given: "
                            "SchedulerPanel(..., engines={name: TorchEngine(...)}).")
        else:
            self.gpu_out.append_stdout(f"Running on {why} for {self.duration_s:g} s ...\n")
            self.real = run(self.engines, self.workload, self.policy)
            self.message = (f"Real run: {len(self.real.requests):,} requests on "
                            f"{self.real.meta.get('gpu', '?')} (dashed lines / hatched bars).")
            self.draw()
        self.gpu_out.append_stdout(self.message + "\n")

    def _ipython_display_(self) -> None:
        from hookmagic.views.outside import show_panel

        def drawn() -> W.Widget:       # redrawn, so an exported page gets drawable figures
            self.draw()
            return self.widget

        # in a notebook: the widget; in a terminal or script: the status line and an HTML file
        show_panel(drawn, text=self.status.value, title="hookmagic scheduler")


def _show(out: W.Output, *objs: Any) -> None:
    """Replace ``out``'s content with ``objs``.

    Sets the widget's outputs directly instead of capturing with ``with out:``, which keeps
    notebook runners (nbclient, nbval) from waiting on captured output messages.
    """
    out.outputs = ()
    for obj in objs:
        if hasattr(obj, "to_plotly_json"):     # Plotly's own bundle, the same in any frontend
            from hookmagic.views.report import figure_bundle

            out.outputs += ({"output_type": "display_data", "data": figure_bundle(obj),
                             "metadata": {}},)
            continue
        try:
            out.append_display_data(obj)
        except Exception:  # no IPython display formatter (plain Python): keep the text
            out.append_stdout(repr(obj) + "\n")
